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


BOILERPLATE = ("Weights only load failed", "Please file an issue", "Check the documentation")


def _refusal_reason(exc: Exception) -> str:
    """The line of torch's weights-only failure that names the cause, without its advice to disable it."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    reasons = [line for line in lines if not line.startswith(BOILERPLATE)]
    return (reasons or lines or [type(exc).__name__])[0][:200]


def load_checkpoint(path: str | Path, map_location: str | torch.device = "cpu") -> dict[str, Any]:
    """Read a checkpoint with `weights_only=True`; anything that is not plain data is refused."""
    path = Path(path)
    if not path.is_file():
        raise UserError(f"checkpoint not found: {path}")
    try:
        state = torch.load(path, map_location=map_location, weights_only=True)
    except pickle.UnpicklingError as exc:
        reason = _refusal_reason(exc)
        if "GLOBAL" not in reason:
            raise UserError(
                f"cannot read checkpoint {path}: damaged, or not a PyTorch checkpoint ({reason})"
            ) from None
        raise UserError(
            f"refusing to load {path}: it holds objects other than tensors and plain data "
            f"(loaded with weights_only=True): {reason}"
        ) from None
    except OSError as exc:
        raise UserError(f"cannot read checkpoint {path}: {exc.strerror or exc}") from None
    except Exception as exc:  # torch raises many types for damaged or foreign bytes
        detail = f"{type(exc).__name__}: {(str(exc).splitlines() or [''])[0][:160]}"
        raise UserError(
            f"cannot read checkpoint {path}: damaged, or not a PyTorch checkpoint ({detail})"
        ) from None
    if not isinstance(state, dict) or not isinstance(state.get("model"), dict):
        raise UserError(f"{path} is not an attn-mt checkpoint (no 'model' weights)")
    return state


def snapshot(state: Any) -> Any:
    """A copy of a checkpoint state that later training cannot change: tensors cloned, containers copied.

    Strings and numbers are shared rather than copied (they are immutable), which makes this several
    times cheaper than copy.deepcopy when a book run keeps a new best state every epoch.
    """
    if isinstance(state, torch.Tensor):
        return state.detach().clone()
    if isinstance(state, dict):
        return {key: snapshot(value) for key, value in state.items()}
    if isinstance(state, (list, tuple)):
        return type(state)(snapshot(value) for value in state)
    return state
