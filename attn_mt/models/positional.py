"""Sinusoidal positional encoding (Vaswani et al. 2017 section 3.5; book section 11.6.3), and the
learned table and no positions at all that the chapter's exercises compare it with.

Shapes: B batch, T steps, H hidden.
P[i, 2j] = sin(i / 10000^(2j/H)), P[i, 2j+1] = cos(i / 10000^(2j/H)), computed in float32 in the
book's order of operations so a model imported from the book gives the book's numbers.
"""

from __future__ import annotations

import torch
from torch import nn

from attn_mt.errors import UserError

WAVELENGTH_BASE = 10000.0


def sinusoid_table(num_steps: int, num_hiddens: int) -> torch.Tensor:
    """The (T, H) table of sines (even columns) and cosines (odd columns)."""
    positions = torch.arange(num_steps, dtype=torch.float32).unsqueeze(1)  # (T, 1)
    frequencies = torch.pow(
        WAVELENGTH_BASE, torch.arange(0, num_hiddens, 2, dtype=torch.float32) / num_hiddens
    )  # (ceil(H / 2),)
    angles = positions / frequencies  # (T, ceil(H / 2))
    table = torch.zeros(num_steps, num_hiddens)  # (T, H)
    table[:, 0::2] = torch.sin(angles)
    table[:, 1::2] = torch.cos(angles[:, : num_hiddens // 2])
    return table


class PositionalEncoding(nn.Module):
    """Adds the sinusoidal table to the input, then applies dropout (the book's PositionalEncoding).

    The table is a non-persistent buffer (it is not in the state dict, as in the book) and grows
    when a longer input than `max_len` arrives.
    """

    def __init__(self, num_hiddens: int, dropout: float, max_len: int = 1000):
        super().__init__()
        self.num_hiddens = num_hiddens
        self.dropout = nn.Dropout(dropout)
        self.register_buffer(
            "P", sinusoid_table(max_len, num_hiddens).unsqueeze(0), persistent=False
        )  # (1, L, H)

    def forward(self, X: torch.Tensor, offset: int = 0) -> torch.Tensor:
        """X (B, T, H) holds positions offset .. offset + T - 1; returns dropout(X + P) (B, T, H)."""
        end = offset + X.shape[1]
        if end > self.P.shape[1]:
            table = sinusoid_table(max(end, 2 * self.P.shape[1]), self.num_hiddens)
            self.P = table.unsqueeze(0).to(self.P.device)  # (1, L', H)
        return self.dropout(X + self.P[:, offset:end].to(X.dtype))


class LearnedPositionalEncoding(nn.Module):
    """Adds a trained (1, max_len, H) table P to the input, then dropout (`positional_encoding: learned`).

    P starts N(0, 1/2), the mean square of the sinusoidal table's entries, and is a parameter in the
    state dict (`pos_encoding.P`); an input reaching past `max_len` positions is refused.
    """

    def __init__(self, num_hiddens: int, dropout: float, max_len: int):
        super().__init__()
        self.dropout = nn.Dropout(dropout)
        self.P = nn.Parameter(torch.randn(1, max_len, num_hiddens) * 0.5**0.5)  # (1, L, H)

    def forward(self, X: torch.Tensor, offset: int = 0) -> torch.Tensor:
        """X (B, T, H) holds positions offset .. offset + T - 1; returns dropout(X + P) (B, T, H)."""
        end = offset + X.shape[1]
        if end > self.P.shape[1]:
            raise UserError(
                f"an input of {end} positions is longer than the learned position table "
                f"(model.max_positions = {self.P.shape[1]})"
            )
        return self.dropout(X + self.P[:, offset:end].to(X.dtype))


class NoPositionalEncoding(nn.Module):
    """Dropout only, no positions (`positional_encoding: none`): self-attention then sees a bag of tokens."""

    def __init__(self, dropout: float):
        super().__init__()
        self.dropout = nn.Dropout(dropout)

    def forward(self, X: torch.Tensor, offset: int = 0) -> torch.Tensor:
        """X (B, T, H) -> dropout(X) (B, T, H); `offset` is ignored."""
        return self.dropout(X)


def positional_encoding(kind: str, num_hiddens: int, dropout: float, max_len: int) -> nn.Module:
    """The module `model.positional_encoding` names: sinusoidal (the book's), learned or none."""
    if kind == "learned":
        return LearnedPositionalEncoding(num_hiddens, dropout, max_len)
    if kind == "none":
        return NoPositionalEncoding(dropout)
    return PositionalEncoding(num_hiddens, dropout)
