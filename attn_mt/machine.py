"""Facts about this machine, read without torch: the CPU's cores, feature flags, native bf16 and int8
kernels, and a GPU's dense bf16 peak by its name (for MFU, training/flops.py).

torch, CTranslate2, data preparation and the benchmark scripts all ask these questions; they ask
here, so a CTranslate2 folder opens without importing torch and every caller gets the same answer.
"""

from __future__ import annotations

import os
from pathlib import Path

CPUINFO = Path("/proc/cpuinfo")
BF16_FLAGS = ("avx512_bf16", "amx_bf16")  # bfloat16 products in hardware
VNNI_FLAGS = ("avx512_vnni", "avx_vnni", "amx_int8")  # int8 dot products without 16-bit saturation
# dense bf16 tensor-core peaks in TFLOP/s (vendor data sheets), matched in this order on the device name
PEAK_TFLOPS = (
    ("H200", 989.0),
    ("H100 PCIe", 756.0),
    ("H100 NVL", 835.0),
    ("H100", 989.0),  # SXM
    ("A100", 312.0),
    ("L40S", 362.0),
    ("L4", 121.0),
    ("A10", 125.0),
)


def gpu_peak_tflops(device_name: str) -> float | None:
    """A GPU's dense bf16 peak in TFLOP/s from its name (`torch.cuda.get_device_name`), None if unlisted."""
    for part, peak in PEAK_TFLOPS:
        if part in device_name:
            return peak
    return None


def available_cores() -> int:
    """CPU cores this process may run on (its affinity mask where the platform has one)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def cpu_threads() -> int:
    """Threads a CPU engine should use: $OMP_NUM_THREADS when set to a positive number, else the cores."""
    value = os.environ.get("OMP_NUM_THREADS", "")
    if value.isdigit() and int(value) > 0:
        return int(value)
    return available_cores()


def cpu_flags(cpuinfo: Path = CPUINFO) -> set[str]:
    """This CPU's feature flags from /proc/cpuinfo (empty where there is none)."""
    try:
        text = cpuinfo.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return set()
    return {flag for line in text.splitlines() if line.startswith("flags") for flag in line.split()[2:]}


def cpu_name(cpuinfo: Path = CPUINFO) -> str:
    """The CPU's model name from /proc/cpuinfo ('' where there is none)."""
    try:
        text = cpuinfo.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""
    names = [line.split(":", 1)[1].strip() for line in text.splitlines() if line.startswith("model name")]
    return names[0] if names else ""


def cpu_has_native_bf16() -> bool:
    """Whether this CPU multiplies bfloat16 in hardware (AVX512-BF16 or AMX); False when unknown."""
    return bool(cpu_flags() & set(BF16_FLAGS))


def cpu_has_vnni() -> bool:
    """Whether the CPU multiplies int8 with VNNI or AMX (no intermediate 16-bit sums that saturate)."""
    return bool(cpu_flags() & set(VNNI_FLAGS))
