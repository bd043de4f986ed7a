"""Dropout masks for the CPU kernels; `Dropout` replaces the book modules' torch.nn.Dropout on the CPU.

Shapes: any. On the CPU, torch's dropout draws a Bernoulli number per element with a generator
that is about twice as slow as drawing uniform numbers with torch.rand and comparing them with p,
which gives the same Bernoulli(1 - p) mask; at the book's sizes dropout is the largest single cost
of a Transformer step. `Dropout` draws its mask that way, and the kernels draw theirs with the same
function, in the order and shapes of the book modules' forwards, so a kernel and the modules it
replaces drop the same elements from the same seed. `gru_keep_masks` draws as torch's nn.GRU does
between its layers, for the kernels that replace an nn.GRU.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


def draw_keep_masks(shape: tuple[int, ...], p: float, like: torch.Tensor) -> torch.Tensor | None:
    """Inverted-dropout multipliers of `like`'s dtype and device: 0 with probability p, else 1 / (1 - p).

    None when p is 0 (nothing to drop).
    """
    if p <= 0:
        return None
    if p >= 1:
        return like.new_zeros(shape)
    return torch.rand(shape, dtype=like.dtype, device=like.device).ge_(p).mul_(1.0 / (1.0 - p))


def gru_keep_masks(shape: tuple[int, ...], p: float, like: torch.Tensor) -> torch.Tensor | None:
    """The multipliers torch's GRU applies between layers: torch's CPU dropout, Bernoulli(1 - p) / (1 - p)."""
    if p <= 0:
        return None
    if p >= 1:
        return like.new_zeros(shape)
    return like.new_empty(shape).bernoulli_(1 - p).div_(1 - p)


def dropout(x: torch.Tensor, p: float, training: bool) -> torch.Tensor:
    """Inverted dropout: zero each element with probability p, scale the rest by 1 / (1 - p)."""
    if not training or p <= 0:
        return x
    if x.device.type != "cpu":
        return F.dropout(x, p, training=True)
    return x * draw_keep_masks(x.shape, p, x)


class Dropout(nn.Dropout):
    """torch.nn.Dropout with the faster CPU mask of `dropout` (installed by `kernels.install_dropout`)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x -> x with elements dropped in training mode."""
        return dropout(x, self.p, self.training)


def install_dropout(model: nn.Module) -> None:
    """Replace every torch.nn.Dropout inside `model` by `Dropout` of the same rate (no parameters change)."""
    for module in list(model.modules()):
        for name, child in module.named_children():
            if type(child) is nn.Dropout:
                setattr(module, name, Dropout(child.p).train(child.training))
