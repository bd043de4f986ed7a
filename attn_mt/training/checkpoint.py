"""Checkpoints: written atomically, read back with `weights_only=True` so they can run no code."""

from __future__ import annotations

import os
import pickle
import tempfile
from pathlib import Path
from typing import Any

import torch

from attn_mt.errors import UserError

FORMAT_VERSION = 1


class CheckpointWriteError(UserError):
    """A checkpoint could not be written; the previous file, if any, is untouched."""


def save_checkpoint(state: dict[str, Any], path: str | Path) -> None:
    """Write `state` to a temporary file beside `path`, fsync it, then rename it over `path`."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            torch.save({**state, "format_version": FORMAT_VERSION}, handle)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp_name, path)
    except BaseException as exc:
        Path(tmp_name).unlink(missing_ok=True)
        if isinstance(exc, OSError):
            kept = "the previous checkpoint is kept" if path.exists() else "no earlier checkpoint exists"
            raise CheckpointWriteError(
                f"could not write checkpoint {path}: {exc.strerror or exc}; {kept}"
            ) from exc
        raise


def load_checkpoint(path: str | Path, map_location: str | torch.device = "cpu") -> dict[str, Any]:
    """Read a checkpoint with `weights_only=True`; anything that is not plain data is refused."""
    path = Path(path)
    if not path.is_file():
        raise UserError(f"checkpoint not found: {path}")
    try:
        state = torch.load(path, map_location=map_location, weights_only=True)
    except pickle.UnpicklingError as exc:
        raise UserError(
            f"refusing to load {path}: it holds objects other than tensors and plain data "
            f"(loaded with weights_only=True): {str(exc).splitlines()[0]}"
        ) from None
    except (RuntimeError, EOFError, OSError, ValueError) as exc:
        raise UserError(f"cannot read checkpoint {path}: {str(exc).splitlines()[0]}") from None
    if not isinstance(state, dict) or "model" not in state:
        raise UserError(f"{path} is not an attn-mt checkpoint (no 'model' entry)")
    return state
