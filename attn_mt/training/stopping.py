"""Why a training run stops, and the signals that ask it to."""

from __future__ import annotations

import enum
import signal
from types import FrameType
from typing import Any


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
