"""The one-file export: everything needed to translate, readable with `torch.load(weights_only=True)`.

The file is a dict of plain data only:
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
from attn_mt.run.checkpoint import load_checkpoint, save_checkpoint
from attn_mt.run.run_dir import LoadedRun, check_fits, load_run, model_with_weights

EXPORT_FORMAT = "attn-mt-export"


def export_state(run: LoadedRun) -> dict[str, Any]:
    """The export dict of a loaded run (see the module docstring)."""
    state: dict[str, Any] = {
        "format": EXPORT_FORMAT,
        "config": run.config.to_dict(),
        "model": {name: tensor.detach().cpu() for name, tensor in run.model.state_dict().items()},
        "src_vocab": list(run.src_vocab.idx_to_token),
        "tgt_vocab": list(run.tgt_vocab.idx_to_token),
        "step": run.step,
        "checkpoint": run.checkpoint.name,
    }
    for side, vocab in (("src", run.src_vocab), ("tgt", run.tgt_vocab)):
        if isinstance(vocab, SubwordVocab):
            state[f"{side}_sentencepiece"] = vocab.model_proto
    return state


def export_run(run_dir: Path, out: Path, checkpoint: str = "best") -> Path:
    """Write the run's `checkpoint` with its config and vocabularies as one file at `out`."""
    if out.is_dir():
        raise UserError(f"{out} is a directory; give a file path for the export")
    save_checkpoint(export_state(load_run(run_dir, checkpoint, "cpu")), out)
    return out


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
