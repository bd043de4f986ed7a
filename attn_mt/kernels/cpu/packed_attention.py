"""Multi-head scaled dot-product attention for training on the CPU, without splitting the heads.

Replaces: the attention of MultiHeadAttention.attend (models/attention.py) inside the Transformer
block kernels (kernels/cpu/transformer_blocks.py).

Shapes: B batch, Q queries, K keys (= values), h heads, H = h * d hidden.
At the book's sizes (d = 8, 5-10 steps) torch's batched matmul over B * h tiny matrices and its
softmax over a short last axis spend their time on per-matrix and per-row overhead, not arithmetic.
Here the heads stay packed in the hidden axis: each query row is spread into h rows that keep only
one head's channels (the others zero), so one matmul per batch row, (K, H) x (H, Q * h), scores every
head at once, in a keys-first layout (B, K, Q, h) whose softmax runs along a middle axis, vectorised
over Q * h. The same spread turns the output and the gradients back into (B, Q, H) by taking each
head's own channels (a diagonal). Forward and backward are written out by hand, so autograd records
one node for the whole attention instead of a dozen. The maths is the explicit path's:
softmax(q k^T / sqrt(d)) with masked keys at zero weight and dropout on the weights.
"""

from __future__ import annotations

from typing import Any

import torch

from attn_mt.models.attention import NEG_INF, AttentionMask


def spread_heads(x: torch.Tensor, num_heads: int, scale: float = 1.0) -> torch.Tensor:
    """(B, N, H) -> (B, N * h, H): row (n, i) is head i's channels of row n times `scale`, zeros elsewhere."""
    batch, steps, hidden = x.shape
    out = x.new_zeros(batch, steps, num_heads, num_heads, hidden // num_heads)  # (B, N, h, h, d)
    diagonal = torch.diagonal(out, dim1=2, dim2=3)  # (B, N, d, h), a view of out
    torch.mul(x.view(batch, steps, num_heads, -1).transpose(2, 3), scale, out=diagonal)
    return out.view(batch, steps * num_heads, hidden)


def gather_heads(x: torch.Tensor, num_heads: int, scale: float = 1.0) -> torch.Tensor:
    """(B, N * h, H) -> (B, N, H): row n takes head i's channels from row (n, i), times `scale`.

    The inverse of spread_heads.
    """
    batch, rows, hidden = x.shape
    steps = rows // num_heads
    diagonal = torch.diagonal(x.view(batch, steps, num_heads, num_heads, -1), dim1=2, dim2=3)  # (B, N, d, h)
    out = x.new_empty(batch, steps, num_heads, hidden // num_heads)  # (B, N, h, d)
    torch.mul(diagonal.transpose(2, 3), scale, out=out)
    return out.view(batch, steps, hidden)


PackedSaved = tuple  # what packed_forward keeps for packed_backward
Masks = tuple[torch.Tensor | None, torch.Tensor | None]  # keys-first (blocked, empty)


def keys_first(mask: AttentionMask) -> Masks:
    """A head-axis mask (B, 1, Q, K) in this module's layout: blocked (B, K, Q, 1), empty (B, 1, Q, 1)."""
    blocked = mask.blocked.squeeze(1).transpose(1, 2).unsqueeze(-1)  # (B, K, Q, 1)
    empty = None if mask.empty is None else mask.empty.squeeze(1).transpose(1, 2).unsqueeze(-1)
    return blocked, empty


def packed_forward(
    queries: torch.Tensor,
    keys: torch.Tensor,
    values: torch.Tensor,
    num_heads: int,
    blocked: torch.Tensor | None,
    empty: torch.Tensor | None,
    keep: torch.Tensor | None,
) -> tuple[torch.Tensor, PackedSaved]:
    """Queries (B, Q, H), keys and values (B, K, H) -> (B, Q, H), and what packed_backward needs."""
    batch, num_queries, hidden = queries.shape
    num_keys = keys.shape[1]
    scale = (hidden // num_heads) ** -0.5
    spread = spread_heads(queries, num_heads, scale)  # (B, Q * h, H), scaled by 1 / sqrt(d)
    scores = torch.bmm(keys, spread.transpose(1, 2))  # (B, K, Q * h)
    scores = scores.view(batch, num_keys, num_queries, num_heads)  # (B, K, Q, h)
    if blocked is not None:
        scores.masked_fill_(blocked, NEG_INF)
    weights = torch.softmax(scores, dim=1)  # (B, K, Q, h)
    if empty is not None:
        weights.masked_fill_(empty, 0.0)
    dropped = weights if keep is None else weights * keep  # (B, K, Q, h)
    dropped = dropped.view(batch, num_keys, num_queries * num_heads)  # (B, K, Q * h)
    rows = torch.bmm(dropped.transpose(1, 2), values)  # (B, Q * h, H)
    return gather_heads(rows, num_heads), (spread, keys, values, weights, dropped, keep)


def packed_backward(
    grad: torch.Tensor, saved: PackedSaved, num_heads: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Gradients (B, Q, H), (B, K, H), (B, K, H) for queries, keys and values from the output's (B, Q, H)."""
    spread, keys, values, weights, dropped, keep = saved
    batch, num_keys, num_queries, _ = weights.shape
    scale = (keys.shape[2] // num_heads) ** -0.5
    grad_rows = spread_heads(grad.contiguous(), num_heads)  # (B, Q * h, H)
    grad_values = torch.bmm(dropped, grad_rows)  # (B, K, H)
    grad_weights = torch.bmm(values, grad_rows.transpose(1, 2))  # (B, K, Q * h)
    grad_weights = grad_weights.view(batch, num_keys, num_queries, num_heads)  # (B, K, Q, h)
    if keep is not None:
        grad_weights = grad_weights.mul_(keep)
    # softmax's backward along the keys, weights * (grad - sum(grad * weights)), in one kernel
    grad_scores = torch.ops.aten._softmax_backward_data(grad_weights, weights, 1, weights.dtype)
    grad_scores = grad_scores.view(batch, num_keys, num_queries * num_heads)  # (B, K, Q * h)
    grad_keys = torch.bmm(grad_scores, spread)  # (B, K, H); spread holds the scaled queries
    grad_spread = torch.bmm(grad_scores.transpose(1, 2), keys)  # (B, Q * h, H)
    return gather_heads(grad_spread, num_heads, scale), grad_keys, grad_values


class _PackedAttention(torch.autograd.Function):
    """softmax(q k^T * scale) with masks and dropout, times v, on (B, N, H) tensors; see the module doc."""

    @staticmethod
    def forward(
        ctx: Any,
        queries: torch.Tensor,
        keys: torch.Tensor,
        values: torch.Tensor,
        blocked: torch.Tensor | None,
        empty: torch.Tensor | None,
        keep: torch.Tensor | None,
        num_heads: int,
    ) -> torch.Tensor:
        """queries (B, Q, H), keys and values (B, K, H) -> (B, Q, H)."""
        output, saved = packed_forward(queries, keys, values, num_heads, blocked, empty, keep)
        ctx.save_for_backward(*saved)
        ctx.num_heads = num_heads
        return output

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        """Gradients for queries, keys and values; none for the masks."""
        grads = packed_backward(grad, ctx.saved_tensors, ctx.num_heads)
        return *grads, None, None, None, None


def packed_attention(
    queries: torch.Tensor,
    keys: torch.Tensor,
    values: torch.Tensor,
    num_heads: int,
    blocked: torch.Tensor | None = None,
    empty: torch.Tensor | None = None,
    keep: torch.Tensor | None = None,
) -> torch.Tensor:
    """Multi-head attention of queries (B, Q, H) over keys and values (B, K, H) -> (B, Q, H), heads packed.

    Masks are in the keys-first layout: `blocked` broadcasts to (B, K, Q, 1) and is True where a
    query may not look, `empty` broadcasts to (B, 1, Q, 1) and marks queries whose weights are set
    to zero, `keep` is (B, K, Q, h) of inverted-dropout multipliers on the weights.
    """
    return _PackedAttention.apply(queries, keys, values, blocked, empty, keep, num_heads)
