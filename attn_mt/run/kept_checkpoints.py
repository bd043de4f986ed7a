"""The last N checkpoints saved at validations (`train.keep_checkpoints`), named by step, for averaging.

Each kept file holds the weights, the config, the vocabularies, the step and that validation's
scores (what `attn-mt average --best N` ranks by), but no optimiser state: it is for translating
and averaging, not for resuming.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from attn_mt.run.checkpoint import save_checkpoint

KEPT_NAME = re.compile(r"step-(\d+)\.pt")
INFERENCE_KEYS = ("model", "step", "epoch", "config", "src_vocab", "tgt_vocab")


def kept_name(step: int) -> str:
    """The file name of the checkpoint kept at `step`."""
    return f"step-{step}.pt"


def kept_checkpoints(folder: Path) -> list[Path]:
    """The kept checkpoints in `folder`, oldest step first."""
    found = [(int(m.group(1)), p) for p in folder.glob("step-*.pt") if (m := KEPT_NAME.fullmatch(p.name))]
    return [path for _, path in sorted(found)]


def keep_checkpoint(folder: Path, state: dict[str, Any], scores: dict[str, float], keep: int) -> Path:
    """Write this validation's weights as step-STEP.pt and delete all but the newest `keep` of them."""
    path = folder / kept_name(int(state["step"]))
    save_checkpoint({**{k: state[k] for k in INFERENCE_KEYS}, "scores": dict(scores)}, path)
    for old in kept_checkpoints(folder)[:-keep]:
        old.unlink(missing_ok=True)
    return path
