"""The logged loss summed where it is computed, so a training step never waits for the GPU to report it.

A step adds its loss to two sums, the log window's and the epoch's. Reading a number off a GPU
stops the host until every queued kernel has run; kept on the device, the sums are read once per
log line, validation, epoch end or checkpoint. They are float64 (float32 on an Apple GPU, which
has no float64, they stay on the host there) and every addition is the one Python would make with
floats, so the sums are bit for bit those of a host-side `total += loss`.
"""

from __future__ import annotations

import torch


def sum_device(device: torch.device) -> torch.device:
    """Where the sums live: on the training device, except on MPS (no float64), on the host."""
    return torch.device("cpu") if device.type == "mps" else device


class LossTotals:
    """The window's and the epoch's summed loss, float64 scalars on the training device."""

    def __init__(self, device: torch.device, window: float = 0.0, epoch: float = 0.0):
        self.device = sum_device(device)
        self.sums = torch.tensor([window, epoch], dtype=torch.float64, device=self.device)  # (2,)

    def scalar(self, value: torch.Tensor | float) -> torch.Tensor:
        """`value` as a float64 scalar beside the sums (a float32 loss is widened exactly)."""
        if isinstance(value, torch.Tensor):
            return value.to(self.device, torch.float64)
        return torch.tensor(value, dtype=torch.float64, device=self.device)

    def zero(self) -> torch.Tensor:
        """A float64 zero beside the sums, to start a step's sum from."""
        return torch.zeros((), dtype=torch.float64, device=self.device)

    def add(self, loss: torch.Tensor) -> None:
        """Add one step's loss (a float64 scalar from `scalar`) to both sums, without waiting."""
        self.sums += loss

    def read(self) -> tuple[float, float]:
        """(window, epoch) as floats: the one place the host waits for the device."""
        window, epoch = self.sums.tolist()
        return window, epoch

    def clear_window(self) -> None:
        """Start a new log window."""
        self.sums[0] = 0.0

    def clear_epoch(self) -> None:
        """Start a new epoch."""
        self.sums[1] = 0.0
