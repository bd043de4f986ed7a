"""`train.amp: auto` on a CPU with native bfloat16: time float32 against bf16 and keep the faster.

A CPU that advertises AVX512-BF16 does not always train faster in bfloat16. On 2 Zen 4 cores bf16
autocast made the whole-corpus Transformer step 0.52 s -> ~0.35 s; on 2 Xeon vCPUs without AMX it
made the same step 1.4x slower than float32 (docs/benchmarks.md). So the choice is measured on the
run's own batches, as cuDNN's benchmark mode picks convolution algorithms.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence


def time_modes(run_pass: Callable[[str], None], modes: Sequence[str], rounds: int = 3) -> dict[str, float]:
    """Median seconds of `run_pass(mode)` per mode: one warm-up each, then `rounds` interleaved rounds."""
    for mode in modes:
        run_pass(mode)
    seconds: dict[str, list[float]] = {mode: [] for mode in modes}
    for _ in range(rounds):
        for mode in modes:
            started = time.perf_counter()
            run_pass(mode)
            seconds[mode].append(time.perf_counter() - started)
    return {mode: statistics.median(times) for mode, times in seconds.items()}


def faster_mode(seconds: dict[str, float], margin: float = 0.05) -> str:
    """bf16 only when it beats float32 ("none") by more than `margin`; float32 otherwise."""
    return "bf16" if seconds["bf16"] < (1.0 - margin) * seconds["none"] else "none"
