"""Packed multi-head attention (heads kept in the hidden axis) against the explicit per-head maths.

Shapes: B batch, Q queries, K keys, h heads, H hidden, d = H / h.
"""

from __future__ import annotations

import math

import pytest
import torch

from attn_mt.kernels.cpu.packed_attention import gather_heads, keys_first, packed_attention, spread_heads
from attn_mt.models import AttentionMask


def explicit(queries, keys, values, num_heads, blocked_bqk, empty_bq, keep_bkqh):
    """Per-head softmax(q k^T / sqrt(d)) with a (B, Q, K) block mask, empty query rows and dropout."""
    batch, num_queries, hidden = queries.shape
    d = hidden // num_heads

    def heads(x):
        return x.view(batch, x.shape[1], num_heads, d).transpose(1, 2)  # (B, h, N, d)

    scores = heads(queries) @ heads(keys).transpose(-1, -2) / math.sqrt(d)  # (B, h, Q, K)
    weights = torch.softmax(scores.masked_fill(blocked_bqk.unsqueeze(1), -math.inf), dim=-1)
    weights = weights.masked_fill(empty_bq[:, None, :, None], 0.0)
    weights = weights * keep_bkqh.permute(0, 3, 2, 1)  # (B, h, Q, K)
    return (weights @ heads(values)).transpose(1, 2).reshape(batch, num_queries, hidden)


def test_spread_and_gather_heads_by_hand():
    x = torch.arange(1.0, 9.0).view(1, 2, 4)  # (B=1, N=2, H=4), two heads of two channels
    spread = spread_heads(x, 2)  # (1, 4, 4)
    expected = torch.tensor([[1.0, 2, 0, 0], [0, 0, 3, 4], [5, 6, 0, 0], [0, 0, 7, 8]])
    assert torch.equal(spread[0], expected)
    assert torch.equal(gather_heads(spread, 2), x)
    rows = torch.arange(16.0).view(1, 4, 4)  # row (n, i) keeps only head i's channels
    assert torch.equal(gather_heads(rows, 2)[0], torch.tensor([[0.0, 1, 6, 7], [8, 9, 14, 15]]))


@pytest.mark.parametrize("causal", [False, True])
def test_values_and_gradients_equal_the_explicit_maths(causal):
    torch.manual_seed(0)
    batch, num_queries, num_keys, num_heads, hidden = 3, 4, 4 if causal else 5, 2, 6
    q = torch.randn(batch, num_queries, hidden, dtype=torch.float64, requires_grad=True)
    k = torch.randn(batch, num_keys, hidden, dtype=torch.float64, requires_grad=True)
    v = torch.randn(batch, num_keys, hidden, dtype=torch.float64, requires_grad=True)
    if causal:
        mask = AttentionMask.causal(num_queries).with_heads()
    else:
        mask = AttentionMask.from_valid_lens(torch.tensor([5, 2, 0]), num_queries, num_keys).with_heads()
    keep = (torch.rand(batch, num_keys, num_queries, num_heads) > 0.3).double() / 0.7  # (B, K, Q, h)
    blocked, empty = keys_first(mask)
    empty_bq = torch.zeros(batch, num_queries, dtype=torch.bool)
    if empty is not None:
        empty_bq = empty_bq | empty[:, 0, :, 0]
    out = packed_attention(q, k, v, num_heads, blocked, empty, keep)
    reference = explicit(q, k, v, num_heads, mask.blocked[:, 0].expand(batch, -1, -1), empty_bq, keep)
    torch.testing.assert_close(out, reference, rtol=0, atol=1e-12)
    if not causal:
        assert torch.equal(out[2], torch.zeros_like(out[2]))  # no valid key: a zero row
    grad = torch.randn_like(out)
    got = torch.autograd.grad(out, (q, k, v), grad)
    want = torch.autograd.grad(reference, (q, k, v), grad)
    for a, b in zip(got, want, strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-12)
        assert torch.isfinite(a).all()
    assert torch.autograd.gradcheck(
        lambda a, b, c: packed_attention(a, b, c, num_heads, blocked, empty, keep), (q, k, v)
    )
