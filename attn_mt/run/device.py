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


def cuda_has_native_bf16() -> bool:
    """Whether the current CUDA device computes in bfloat16 natively (Ampere and later).

    torch.cuda.is_bf16_supported() also answers True where bfloat16 is only emulated (a T4 or a
    V100), many times slower than fp16; torch 2.3 and later can be asked to leave emulation out.
    """
    try:
        return torch.cuda.is_bf16_supported(including_emulation=False)
    except TypeError:  # an older torch without the argument
        return torch.cuda.get_device_capability()[0] >= 8


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
    fp16 needs a gradient scaler and applies on CUDA only. "auto" is bf16 on a CUDA device that
    computes it natively (fp16 where bf16 would be emulated, as on a T4 or V100), stays "auto" on
    a CPU with native bf16 for the trainer to time both, and is float32 elsewhere.
    """
    if amp == "auto":
        if device.type == "cuda":
            return "bf16" if cuda_has_native_bf16() else "fp16"
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


def use_tf32(enabled: bool) -> None:
    """Let CUDA's float32 matrix products and cuDNN run in TensorFloat-32 (Ampere and later), or not.

    These are the CUDA-only switches: torch.set_float32_matmul_precision would also reach the CPU's
    oneDNN matrix products. The older allow_tf32 flags are used rather than the fp32_precision
    ones, because torch 2.13 refuses torch.get_float32_matmul_precision() (which torch.compile's
    inductor reads) once the two are mixed.
    """
    torch.backends.cuda.matmul.allow_tf32 = enabled
    torch.backends.cudnn.allow_tf32 = enabled


def avoid_cudnn_attention(device: torch.device) -> None:
    """On CUDA, keep scaled_dot_product_attention off cuDNN's backend (flash, efficient and math stay).

    torch 2.11 on an H200 chose cuDNN's attention for the Transformer's masked calls, and cuDNN
    builds an execution plan for every new batch shape: on the GPU config's varied batches that
    host work took most of each training step (docs/benchmarks.md, "One GPU: the check-up"), and
    beam search meets a new key length at every step. The switch is process-wide, as torch's
    backend flags are; on other devices it does nothing.
    """
    if device.type == "cuda":
        torch.backends.cuda.enable_cudnn_sdp(False)


def setup_device(device: torch.device, threads: int, tf32: bool = False) -> None:
    """Before training: torch's threads (0 keeps torch's), the CPU's oneDNN cache, CUDA's train.tf32."""
    if threads:
        torch.set_num_threads(threads)
    if device.type == "cpu":
        limit_kernel_cache()
    if device.type == "cuda":
        use_tf32(tf32)
        avoid_cudnn_attention(device)
