"""Device choice, thread count and mixed precision."""

from __future__ import annotations

import contextlib
import logging

import torch

from attn_mt.errors import UserError

DEVICES = ("auto", "cpu", "cuda", "mps")
log = logging.getLogger("attn_mt")


def pick_device(name: str = "auto") -> torch.device:
    """`auto` picks cuda, then mps, then cpu; an explicit device that is missing is a UserError."""
    if name not in DEVICES:
        raise UserError(f"--device {name!r}: expected one of {', '.join(DEVICES)}")
    has_mps = hasattr(torch.backends, "mps") and torch.backends.mps.is_available()
    if name == "auto":
        if torch.cuda.is_available():
            return torch.device("cuda")
        return torch.device("mps") if has_mps else torch.device("cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise UserError("--device cuda: no CUDA device is available (use --device auto or cpu)")
    if name == "mps" and not has_mps:
        raise UserError("--device mps: no Apple MPS device is available (use --device auto or cpu)")
    return torch.device(name)


def autocast_context(device: torch.device, amp: str) -> contextlib.AbstractContextManager:
    """Autocast for `amp` in ("bf16", "fp16") on CUDA; a no-op elsewhere or for "none"."""
    if amp == "none" or device.type != "cuda":
        return contextlib.nullcontext()
    dtype = torch.bfloat16 if amp == "bf16" else torch.float16
    return torch.autocast(device_type="cuda", dtype=dtype)


def effective_amp(device: torch.device, amp: str) -> str:
    """The AMP mode that applies on `device`, warning when a requested mode is ignored."""
    if amp != "none" and device.type != "cuda":
        log.warning("train.amp=%s applies on CUDA only; training in float32 on %s", amp, device.type)
        return "none"
    return amp
