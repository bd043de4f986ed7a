"""Device choice, thread count and mixed precision."""

from __future__ import annotations

import contextlib
import logging
import os

import torch

from attn_mt.errors import UserError
from attn_mt.machine import cpu_has_native_bf16
from attn_mt.run.opened import parse_device

log = logging.getLogger("attn_mt")


def pick_device(name: str = "auto") -> torch.device:
    """`auto`: cuda, then mps, then cpu; `cuda:N`: GPU N; a named device that is missing is a UserError."""
    kind, index = parse_device(name)
    has_mps = hasattr(torch.backends, "mps") and torch.backends.mps.is_available()
    if kind == "auto":
        if torch.cuda.is_available():
            return torch.device("cuda")
        return torch.device("mps") if has_mps else torch.device("cpu")
    if kind == "cuda" and not torch.cuda.is_available():
        raise UserError(f"--device {name}: no CUDA device is available (use --device auto or cpu)")
    if index is not None and index >= torch.cuda.device_count():
        raise UserError(
            f"--device {name}: torch sees {torch.cuda.device_count()} CUDA device(s), "
            f"numbered 0 to {torch.cuda.device_count() - 1}"
        )
    if kind == "mps" and not has_mps:
        raise UserError("--device mps: no Apple MPS device is available (use --device auto or cpu)")
    return torch.device(name)


def limit_kernel_cache(entries: int = 16) -> str:
    """Keep oneDNN's cache of compiled matrix-product kernels small, unless the user sized it.

    Under bf16 autocast the CPU's matrix products go through oneDNN, which keeps a compiled
    primitive for every shape it meets, up to 1,024 of them; batches of many lengths fill that
    with hundreds of megabytes, while a small cache costs only a little recompiling
    (docs/benchmarks.md). oneDNN reads the size when it first runs, so this is called before
    training; returns the size in force.
    """
    return os.environ.setdefault("ONEDNN_PRIMITIVE_CACHE_CAPACITY", str(entries))


def autocast_context(device: torch.device, amp: str) -> contextlib.AbstractContextManager:
    """Autocast for `amp`: bf16 or fp16 on CUDA, bf16 on the CPU; a no-op for "none"."""
    if amp == "none":
        return contextlib.nullcontext()
    dtype = torch.bfloat16 if amp == "bf16" else torch.float16
    return torch.autocast(device_type=device.type, dtype=dtype)


def effective_amp(device: torch.device, amp: str) -> str:
    """The AMP mode that applies on `device`, warning when a requested mode is ignored or slow.

    bf16 applies on CUDA and on CPUs with native bfloat16 arithmetic (matrix products in bfloat16,
    weights and loss in float32); elsewhere the CPU emulates it, measured 13x slower than float32
    for the whole-corpus Transformer on an AVX2 Zen 3, so training falls back to float32.
    fp16 needs a gradient scaler and applies on CUDA only. "auto" is bf16 on CUDA where supported
    (fp16 otherwise), stays "auto" on a CPU with native bf16 for the trainer to time both, and is
    float32 elsewhere.
    """
    if amp == "auto":
        if device.type == "cuda":
            return "bf16" if torch.cuda.is_bf16_supported() else "fp16"
        # a CPU with native bf16 is timed on the run's batches (training/precision.py)
        return "auto" if device.type == "cpu" and cpu_has_native_bf16() else "none"
    if amp == "none" or device.type == "cuda":
        return amp
    if amp == "bf16" and device.type == "cpu":
        if cpu_has_native_bf16():
            return amp
        log.warning(
            "train.amp=bf16: this CPU has no native bfloat16 arithmetic (AVX512-BF16 or AMX), where "
            "bfloat16 is many times slower; training in float32"
        )
        return "none"
    log.warning("train.amp=%s does not apply on %s; training in float32", amp, device.type)
    return "none"


def setup_device(device: torch.device, threads: int) -> None:
    """Before training: torch's thread count (0 keeps torch's) and, on the CPU, the oneDNN cache's size."""
    if threads:
        torch.set_num_threads(threads)
    if device.type == "cpu":
        limit_kernel_cache()
