"""Where a training run stands (saved in every checkpoint), this session's clocks, and what a run reports."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

from attn_mt.training.flops import mfu
from attn_mt.training.stopping import StopReason

STEADY_AFTER = (
    10  # a session's first steps (allocator, autotuning, compiling) are left out of its steady state
)


@dataclass
class Progress:
    """Where training stands; saved in every checkpoint."""

    step: int = 0
    epoch: int = 0
    batch_in_epoch: int = 0
    best_value: float | None = None  # best train.best_metric of the scheduled validations (patience)
    bad_validations: int = 0
    best_saved_value: float | None = None  # train.best_metric of the weights in best.pt
    elapsed_s: float = 0.0
    window_loss: float = 0.0
    window_tokens: int = 0
    epoch_loss: float = 0.0
    epoch_tokens: int = 0

    def count_step(self, batches: int, tokens: int, elapsed_s: float) -> None:
        """Count one optimiser step: `batches` batches of the plan and their target tokens.

        The step's loss goes to the trainer's LossTotals, which writes the sums into window_loss
        and epoch_loss whenever they are read.
        """
        self.batch_in_epoch += batches
        self.step += 1
        self.elapsed_s = elapsed_s
        self.window_tokens, self.epoch_tokens = self.window_tokens + tokens, self.epoch_tokens + tokens


@dataclass
class TrainResult:
    """What a finished (or stopped) run reports back."""

    run_dir: Path
    step: int
    epoch: int
    final_loss: float
    tokens_per_s: float
    wall_s: float
    stopped_because: StopReason
    steady_tokens_per_s: float | None = None  # over the training steps alone, after the first STEADY_AFTER
    steady_mfu: float | None = None  # over the same steps (training/flops.py); None where no peak is known


@dataclass
class Session:
    """This process's share of a run (a resumed run starts a new session): clocks, tokens, last loss."""

    training_start: float  # perf_counter value at which the whole run's training time was 0
    started: float = field(default_factory=time.perf_counter)
    tokens: int = 0
    window_start: float = field(default_factory=time.perf_counter)
    window_tokens: int = 0
    last_loss: float = float("nan")
    steps: int = 0  # optimiser steps of this session
    steady_s: float = (
        0.0  # seconds inside the steps after the first STEADY_AFTER (no validation, no start-up)
    )
    steady_tokens: int = 0  # their target tokens
    steady_flops: float = 0.0  # their training FLOPs (training/flops.py), where the trainer counts them

    def count(self, tokens: int) -> None:
        """Add one step's target tokens."""
        self.tokens += tokens
        self.window_tokens += tokens

    def time_step(self, seconds: float, tokens: int, flops: float = 0.0) -> None:
        """Count one step's seconds (its batch fetched, forward, backward, update) toward the steady state."""
        self.steps += 1
        if self.steps > STEADY_AFTER:
            self.steady_s += seconds
            self.steady_tokens += tokens
            self.steady_flops += flops

    @property
    def steady_tokens_per_s(self) -> float | None:
        """Target tokens per second of the training steps alone, once warm (None within STEADY_AFTER)."""
        return self.steady_tokens / self.steady_s if self.steady_s > 0 else None

    def close_window(self) -> float:
        """Target tokens per second since the last call (or the start), and start a new window."""
        now = time.perf_counter()
        rate = self.window_tokens / max(now - self.window_start, 1e-9)
        self.window_start, self.window_tokens = now, 0
        return rate

    def result(
        self,
        run_dir: Path,
        progress: Progress,
        stopped_because: StopReason,
        hooks_s: float = 0.0,
        peak_tflops: float | None = None,
    ) -> TrainResult:
        """The session's TrainResult, ended now; its tokens/s leaves out `hooks_s` (the timeline's, ...).

        `peak_tflops`: the card's dense bf16 peak, for the steady state's MFU (training/flops.py).
        """
        wall = time.perf_counter() - self.started
        return TrainResult(
            run_dir,
            progress.step,
            progress.epoch,
            self.last_loss,
            self.tokens / max(wall - hooks_s, 1e-9),
            wall,
            stopped_because,
            self.steady_tokens_per_s,
            mfu(self.steady_flops, self.steady_s, peak_tflops) if self.steady_flops else None,
        )
