"""Open an export file with torch (written by `attn-mt export`, attn_mt/shipping/export.py).

An export file is a dict of plain data:
    format            "attn-mt-export", and format_version
    config            the run's resolved config (its decode section gives the decoding defaults)
    model             the weights (state_dict)
    src_vocab, tgt_vocab                  the token lists
    src_sentencepiece, tgt_sentencepiece  the sentencepiece model bytes (sentencepiece runs only)
    step, checkpoint  where the weights came from
Device and threads are resolved as for a run directory (run/open_run_dir.py).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from attn_mt.config import config_from_dict
from attn_mt.data.subword import SubwordVocab
from attn_mt.data.vocab import Vocab
from attn_mt.errors import UserError
from attn_mt.run.checkpoint import load_checkpoint
from attn_mt.run.device import avoid_cudnn_attention, pick_device
from attn_mt.run.opened import LoadedRun, ModelKind, within_bounds
from attn_mt.run.quantize import quantize_model
from attn_mt.run.run_dir import check_fits, model_with_weights

EXPORT_FORMAT = "attn-mt-export"


def _vocab(state: dict[str, Any], side: str, tokenizer: str, path: Path) -> Vocab:
    """One side's vocabulary from the export: sentencepiece model bytes, or the token list."""
    tokens = state.get(f"{side}_vocab")
    if tokenizer == "sentencepiece":
        proto = state.get(f"{side}_sentencepiece")
        if not isinstance(proto, bytes):
            raise UserError(f"export file {path} is damaged: no {side} sentencepiece model")
        try:
            vocab: Vocab = SubwordVocab(proto)
        except (RuntimeError, ValueError) as exc:
            raise UserError(f"export file {path} is damaged: its {side} sentencepiece model: {exc}") from None
    elif isinstance(tokens, list) and all(isinstance(t, str) for t in tokens):
        vocab = Vocab(tokens)
    else:
        raise UserError(f"export file {path} is damaged: no {side} vocabulary")
    if vocab.idx_to_token != tokens:
        raise UserError(f"export file {path} is damaged: its {side} vocabulary and model disagree")
    return vocab


def load_export(path: Path, device: torch.device | str = "cpu") -> LoadedRun:
    """Read an export file (refusing damaged or foreign files as checkpoints are) into a ready model."""
    state = load_checkpoint(path)
    if state.get("format") != EXPORT_FORMAT or not isinstance(state.get("config"), dict):
        raise UserError(f"{path} is not an attn-mt export file (made by `attn-mt export`)")
    cfg = within_bounds(config_from_dict(state["config"], f"config inside {path}", saved=True), path)
    src_vocab = _vocab(state, "src", cfg.data.tokenizer, path)
    tgt_vocab = _vocab(state, "tgt", cfg.data.tokenizer, path)
    check_fits(state, cfg, src_vocab.idx_to_token, tgt_vocab.idx_to_token, path)
    model = model_with_weights(cfg, len(src_vocab), len(tgt_vocab), state["model"], path)
    model.to(device).eval()
    step = int(state.get("step", 0))
    return LoadedRun(cfg, src_vocab, tgt_vocab, model, path, step, ModelKind.EXPORT_FILE, str(device), path)


def open_export_file(source: Path, checkpoint: str, device: str, quantize: str | None) -> LoadedRun:
    """The export file's model on `device`, int8 when `quantize` asks (it holds one model: no checkpoint)."""
    if checkpoint != "best":
        raise UserError(f"--checkpoint {checkpoint}: {source} is an export file, which holds one model")
    where = pick_device(device)
    avoid_cudnn_attention(where)
    run = load_export(source, where)
    if quantize is not None:
        run.model = quantize_model(run.model, quantize, where)
    return run
