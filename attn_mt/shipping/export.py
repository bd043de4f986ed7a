"""The one-file export: everything needed to translate, readable with `torch.load(weights_only=True)`.

The file's contents are listed, and read back, in attn_mt/run/open_export.py.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from attn_mt.data.subword import SubwordVocab
from attn_mt.run.checkpoint import save_checkpoint
from attn_mt.run.open_export import EXPORT_FORMAT
from attn_mt.run.opened import LoadedRun


def export_state(run: LoadedRun) -> dict[str, Any]:
    """The export dict of a loaded run (see attn_mt/run/open_export.py)."""
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


def write_export(run: LoadedRun, out: Path) -> Path:
    """Write the loaded run's model, config and vocabularies as one file at `out`."""
    save_checkpoint(export_state(run), out)
    return out
