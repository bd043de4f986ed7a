"""The logged loss summed where it is computed, so a training step on a GPU never waits to report it.

A step adds its loss to two sums, the log window's and the epoch's, and a loss that is no longer
finite stops the run (TrainingDivergedError) before another checkpoint is written. Reading a
number off a GPU stops the host until every queued kernel has run, so on one CUDA process the sums
are float64 tensors on the device (`DeviceLossTotals`), read, and checked, once per log line,
validation, epoch end or checkpoint. Every addition there is the one Python makes with floats
(float32 widened, then divided and added in float64), so the sums are bit for bit those of the
host. On the CPU reading a number back costs nothing and a Python float is cheaper than a tensor
operation, and under DDP the ranks read the step's loss back to agree on stopping anyway, so there
the sums are Python floats (`HostLossTotals`), checked at every step, as they always were; on
Apple's MPS too (it has no float64).
"""

from __future__ import annotations

import math
from pathlib import Path

import torch

from attn_mt.errors import UserError
from attn_mt.training.run_state import Progress


class TrainingDivergedError(UserError):
    """The loss became NaN or infinite; the last good checkpoint is kept."""


def diverged(loss: float, when: str, kept: Path) -> TrainingDivergedError:
    """The error for a `loss` that is not finite, seen `when` ("at step 12"); `kept` is last.pt."""
    return TrainingDivergedError(
        f"the loss became {loss} {when}; training stopped, the last good checkpoint is kept at {kept}"
    )


class HostLossTotals:
    """The window's and the epoch's summed loss as Python floats, each step's loss checked as it comes."""

    def __init__(self, kept: Path, start: Progress):
        self.kept, self.window, self.epoch = kept, start.window_loss, start.epoch_loss

    def scalar(self, value: torch.Tensor | float) -> float:
        """`value` (a float32 loss, or a float) as a Python float."""
        return float(value)

    def zero(self) -> float:
        """0.0, to start a step's sum from."""
        return 0.0

    def add(self, loss: float, step: int) -> None:
        """Add step `step`'s loss to both sums; a loss that is not finite stops the run."""
        if not math.isfinite(loss):
            raise diverged(loss, f"at step {step}", self.kept)
        self.window, self.epoch = self.window + loss, self.epoch + loss

    def read(self) -> tuple[float, float]:
        """(window, epoch)."""
        return self.window, self.epoch

    def clear_window(self) -> None:
        """Start a new log window."""
        self.window = 0.0

    def clear_epoch(self) -> None:
        """Start a new epoch."""
        self.epoch = 0.0


class DeviceLossTotals:
    """The window's and the epoch's summed loss as float64 scalars on the training device (CUDA)."""

    def __init__(self, device: torch.device, kept: Path, start: Progress):
        self.device, self.kept = device, kept
        sums = [start.window_loss, start.epoch_loss]
        self.sums = torch.tensor(sums, dtype=torch.float64, device=device)  # (2,): window, epoch
        self.checked_step = self.last_step = start.step  # the sums were read, and finite, up to checked_step

    def scalar(self, value: torch.Tensor | float) -> torch.Tensor:
        """`value` as a float64 scalar beside the sums (a float32 loss is widened exactly)."""
        if isinstance(value, torch.Tensor):
            return value.to(self.device, torch.float64)
        return torch.tensor(value, dtype=torch.float64, device=self.device)

    def zero(self) -> torch.Tensor:
        """A float64 zero beside the sums, to start a step's sum from."""
        return torch.zeros((), dtype=torch.float64, device=self.device)

    def add(self, loss: torch.Tensor, step: int) -> None:
        """Add step `step`'s loss (a float64 scalar from `scalar`) to both sums, without waiting."""
        self.sums += loss
        self.last_step = step

    def read(self) -> tuple[float, float]:
        """(window, epoch) as floats: the one place the host waits; a sum no longer finite stops the run."""
        window, epoch = self.sums.tolist()
        if self.last_step > self.checked_step and not math.isfinite(window + epoch):
            raise diverged(window + epoch, f"in steps {self.checked_step + 1}-{self.last_step}", self.kept)
        self.checked_step = self.last_step
        return window, epoch

    def clear_window(self) -> None:
        """Start a new log window."""
        self.sums[0] = 0.0

    def clear_epoch(self) -> None:
        """Start a new epoch."""
        self.sums[1] = 0.0


LossTotals = HostLossTotals | DeviceLossTotals
Loss = torch.Tensor | float  # a logged loss as LossTotals keep it: float64 on a GPU, a float elsewhere


def loss_totals(device: torch.device, distributed: bool, kept: Path, start: Progress) -> LossTotals:
    """The sums of a run on `device` from where `start` stands: on the GPU for one CUDA process, else floats.

    `kept` is the run's last.pt, which the error of a diverged run names.
    """
    if device.type == "cuda" and not distributed:
        return DeviceLossTotals(device, kept, start)
    return HostLossTotals(kept, start)
