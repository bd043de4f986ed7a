"""The logged loss summed where it is computed, so a training step on a GPU never waits to report it.

A step adds its loss to two sums, the log window's and the epoch's. Reading a number off a GPU
stops the host until every queued kernel has run, so on CUDA the sums are float64 tensors on the
device (`DeviceLossTotals`), read once per log line, validation, epoch end or checkpoint. Every
addition there is the one Python makes with floats (float32 widened, then divided and added in
float64), so the sums are bit for bit those of the host. On the CPU reading a number back costs
nothing and a Python float is cheaper than a tensor operation, so the sums are Python floats
(`HostLossTotals`), as they always were; on Apple's MPS too (it has no float64).
"""

from __future__ import annotations

import torch


class HostLossTotals:
    """The window's and the epoch's summed loss as Python floats (the CPU and MPS)."""

    def __init__(self, window: float = 0.0, epoch: float = 0.0):
        self.window, self.epoch = window, epoch

    def scalar(self, value: torch.Tensor | float) -> float:
        """`value` (a float32 loss, or a float) as a Python float."""
        return float(value)

    def zero(self) -> float:
        """0.0, to start a step's sum from."""
        return 0.0

    def add(self, loss: float) -> None:
        """Add one step's loss to both sums."""
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

    def __init__(self, device: torch.device, window: float = 0.0, epoch: float = 0.0):
        self.device = device
        self.sums = torch.tensor([window, epoch], dtype=torch.float64, device=device)  # (2,)

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


LossTotals = HostLossTotals | DeviceLossTotals


def loss_totals(device: torch.device, window: float = 0.0, epoch: float = 0.0) -> LossTotals:
    """The sums for a run on `device`, starting from `window` and `epoch`: on the GPU for CUDA."""
    if device.type == "cuda":
        return DeviceLossTotals(device, window, epoch)
    return HostLossTotals(window, epoch)
