"""When a training run stops (its bounds), why it stopped, and the signals that ask it to."""

from __future__ import annotations

import enum
import signal
from dataclasses import dataclass
from types import FrameType
from typing import Any


@dataclass(frozen=True)
class StopBounds:
    """The bounds that end a run: steps (from epochs and train.max_steps) and minutes; 0 = no bound."""

    max_steps: int = 0
    epochs: int = 0
    steps_per_epoch: int = 0
    time_limit_minutes: float = 0.0

    @property
    def step_bound(self) -> int:
        """The last step the step bounds allow (0 when neither is set)."""
        bounds = [b for b in (self.max_steps, self.epochs * self.steps_per_epoch) if b > 0]
        return min(bounds) if bounds else 0

    @property
    def time_limit_s(self) -> float:
        """The time limit in seconds (0 = none)."""
        return self.time_limit_minutes * 60


class StopReason(str, enum.Enum):
    """Why a run stopped; the value is what train.log, run_summary.json and the report show."""

    EPOCHS = "epochs"  # train.epochs done
    MAX_STEPS = "max_steps"  # train.max_steps reached
    TIME_LIMIT = "time_limit"  # train.time_limit_minutes used up
    PATIENCE = "patience"  # early stopping: train.patience validations without improvement
    INTERRUPTED = "interrupted"  # Ctrl-C or SIGTERM

    def __str__(self) -> str:
        return self.value

    @property
    def budget_spent(self) -> bool:
        """The run used up its epochs, steps or time (rather than stopping early)."""
        return self in (StopReason.EPOCHS, StopReason.MAX_STEPS, StopReason.TIME_LIMIT)


class StopSignals:
    """While entered, a first Ctrl-C or SIGTERM sets `caught` (finish the step, save, stop).

    A second one stops at once.
    """

    def __init__(self) -> None:
        self.caught = False
        self._previous: dict[int, Any] = {}

    def __enter__(self) -> StopSignals:
        for signum in (signal.SIGINT, signal.SIGTERM):
            self._previous[signum] = signal.signal(signum, self._on_signal)
        return self

    def __exit__(self, *exc: object) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        """First signal: ask for a clean stop. Second: stop at once."""
        if self.caught:
            raise KeyboardInterrupt
        self.caught = True
