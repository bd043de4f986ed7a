"""`train.amp: auto` on a CPU with native bfloat16: time float32 against bf16 and keep the faster.

A CPU that advertises AVX512-BF16 does not always train faster in bfloat16. On 2 Zen 4 cores bf16
autocast made the whole-corpus Transformer step 0.52 s -> ~0.35 s; on 2 Xeon vCPUs without AMX it
made the same step 1.4x slower than float32 (docs/benchmarks.md). So the choice is measured on the
run's own batches, as cuDNN's benchmark mode picks convolution algorithms.

The gradient scaler's state follows the run across a resume that changes train.amp: only fp16
keeps one, and `restore_scaler` reads a checkpoint of any mode into a scaler of any mode.
"""

from __future__ import annotations

import logging
import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any, Protocol

import torch

from attn_mt.data.batch import Batch
from attn_mt.training.distributed import DistContext

log = logging.getLogger("attn_mt")


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


def choose_amp(run_pass: Callable[[str], None], dist: DistContext, batches: int) -> str:
    """ "bf16" or "none", whichever `run_pass(mode)` (forward and backward, no update) runs faster.

    The passes run with the RNG state restored afterwards, so the run's random stream is that of a
    run without them; every rank takes the same choice.
    """
    with torch.random.fork_rng(devices=[]):
        seconds = time_modes(run_pass, ("none", "bf16"))
    if dist.enabled:
        totals = dist.sum([seconds["none"], seconds["bf16"]])
        seconds = {"none": totals[0], "bf16": totals[1]}
    amp = faster_mode(seconds)
    log.info(
        "train.amp=auto: %s (%d batches forward and backward: float32 %.3f s, bf16 %.3f s)",
        "bf16" if amp == "bf16" else "float32",
        batches,
        seconds["none"],
        seconds["bf16"],
    )
    return amp


def restore_scaler(scaler: torch.amp.GradScaler, saved: dict[str, Any]) -> None:
    """Load a checkpoint's scaler state, whichever AMP mode wrote it and whichever resumes it.

    A run without fp16 saves an empty state (its scaler is disabled), which GradScaler refuses to
    load into an enabled one (torch/amp/grad_scaler.py: "The source state dict is empty"): an fp16
    run resumed from it starts with a fresh scaler, as a new fp16 run does. A disabled scaler
    ignores any state, so an fp16 checkpoint resumed in bf16 or float32 drops its scale.
    """
    if not scaler.is_enabled():
        return
    if not saved:
        log.info("train.amp=fp16: the checkpoint has no gradient scaler state; starting a fresh scaler")
        return
    scaler.load_state_dict(saved)


class AmpProbe(Protocol):
    """What `auto_amp` needs of a Trainer (training/trainer.py)."""

    dist: DistContext

    def collate(self, indices: Sequence[int]) -> Batch: ...

    def untraced_passes(self, batches: list[Batch], amp: str) -> None: ...


def auto_amp(trainer: AmpProbe, plan: Sequence[Sequence[int]], probe_batches: int = 3) -> str:
    """train.amp=auto: time float32 and bf16 passes over the plan's first batches, and keep the faster."""
    batches = [trainer.collate(ix) for ix in plan[:probe_batches]]
    return choose_amp(lambda amp: trainer.untraced_passes(batches, amp), trainer.dist, len(batches))
