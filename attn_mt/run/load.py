"""Where translate, eval, serve and `attn_mt.load` get their model: a run directory or an export file.

An export file (written by `attn-mt export`, attn_mt/shipping/export.py) is a dict of plain data:
    format            "attn-mt-export", and format_version
    config            the run's resolved config (its decode section gives the decoding defaults)
    model             the weights (state_dict)
    src_vocab, tgt_vocab                  the token lists
    src_sentencepiece, tgt_sentencepiece  the sentencepiece model bytes (sentencepiece runs only)
    step, checkpoint  where the weights came from
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
from attn_mt.run.ctranslate2_folder import is_ctranslate2_folder, load_ctranslate2_folder
from attn_mt.run.quantize import quantize_model
from attn_mt.run.run_dir import LoadedRun, check_fits, load_run, model_with_weights

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
    cfg = config_from_dict(state["config"], f"config inside {path}")
    src_vocab = _vocab(state, "src", cfg.data.tokenizer, path)
    tgt_vocab = _vocab(state, "tgt", cfg.data.tokenizer, path)
    check_fits(state, cfg, src_vocab.idx_to_token, tgt_vocab.idx_to_token, path)
    model = model_with_weights(cfg, len(src_vocab), len(tgt_vocab), state["model"], path)
    model.to(device).eval()
    return LoadedRun(cfg, src_vocab, tgt_vocab, model, path, int(state.get("step", 0)))


def load_model(
    source: Path, checkpoint: str = "best", device: torch.device | str = "cpu", quantize: str | None = None
) -> LoadedRun:
    """A run directory's `checkpoint`, an export file or a CTranslate2 folder on `device`; int8 when asked."""
    source = Path(source)
    if is_ctranslate2_folder(source):
        return load_ctranslate2_folder(
            source, torch.device(device).type, torch.get_num_threads(), quantize, checkpoint
        )
    if source.is_file():
        if checkpoint != "best":
            raise UserError(f"--checkpoint {checkpoint}: {source} is an export file, which holds one model")
        run = load_export(source, device)
    else:
        run = load_run(source, checkpoint, device)
    if quantize is not None:
        run.model = quantize_model(run.model, quantize, torch.device(device))
    return run
