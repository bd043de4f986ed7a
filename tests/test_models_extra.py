"""Each building block against the book's formulas to 1e-6, no-valid-key gradients, block shapes.

Shapes: B batch, Q queries, K keys, H hidden, h heads, d = H / h.
The references below restate the book's algorithms (fill value -1e6, tanh features, the (B * h, ., .)
head layout with valid lengths repeated per head, float32 sinusoids) in plain tensor code that
shares nothing with attn_mt.models, and each module is compared with them in eval mode with random
weights, for valid lengths None, per batch row (1-D) and per query (2-D).
"""

from __future__ import annotations

import math

import pytest
import torch

from attn_mt.models import (
    AdditiveAttention,
    AddNorm,
    DecoderBlock,
    DotProductAttention,
    EncoderBlock,
    MultiHeadAttention,
    PositionalEncoding,
    PositionWiseFFN,
    masked_softmax,
)
from attn_mt.models.attention import AttentionMask

BOOK_TOL = 1e-6
B, Q, K = 3, 4, 6
LENS = {
    "none": None,
    "per_row": torch.tensor([2, 6, 1]),
    "per_query": torch.tensor([[1, 2, 3, 6], [6, 5, 4, 1], [2, 2, 2, 2]]),
}


def reference_masked_softmax(scores: torch.Tensor, lens: torch.Tensor | None) -> torch.Tensor:
    """The book's rule: scores of keys at or past the valid length become -1e6, then a softmax."""
    if lens is None:
        return torch.softmax(scores, dim=-1)
    per_query = lens.unsqueeze(1).expand(scores.shape[0], scores.shape[1]) if lens.dim() == 1 else lens
    key_index = torch.arange(scores.shape[-1]).view(1, 1, -1)  # (1, 1, K)
    hidden = key_index >= per_query.unsqueeze(-1)  # (B, Q, K)
    return torch.softmax(scores.masked_fill(hidden, -1e6), dim=-1)


def reference_additive(module, queries, keys, values, lens):
    """w_v^T tanh(W_q q + W_k k) scores, the book's masked softmax, weights @ values."""
    summed = module.W_q(queries)[:, :, None, :] + module.W_k(keys)[:, None, :, :]  # (B, Q, K, H)
    scores = torch.tanh(summed) @ module.w_v.weight[0]  # (B, Q, K)
    weights = reference_masked_softmax(scores, lens)
    return weights @ values, weights


def reference_dot(queries, keys, values, lens):
    """q k^T / sqrt(d) scores, the book's masked softmax, weights @ values."""
    scores = queries @ keys.transpose(-1, -2) / math.sqrt(queries.shape[-1])
    weights = reference_masked_softmax(scores, lens)
    return weights @ values, weights


def reference_multi_head(module, queries, keys, values, lens):
    """Heads folded into the batch axis as (B * h, N, d), valid lengths repeated once per head."""
    h = module.num_heads

    def fold(X: torch.Tensor) -> torch.Tensor:
        batch, steps, width = X.shape
        return X.view(batch, steps, h, width // h).permute(0, 2, 1, 3).reshape(batch * h, steps, width // h)

    head_lens = None if lens is None else lens.repeat_interleave(h, dim=0)
    out, weights = reference_dot(
        fold(module.W_q(queries)), fold(module.W_k(keys)), fold(module.W_v(values)), head_lens
    )  # (B * h, Q, d), (B * h, Q, K)
    batch = queries.shape[0]
    unfolded = out.view(batch, h, out.shape[1], out.shape[2]).permute(0, 2, 1, 3).flatten(2)  # (B, Q, H)
    return module.W_o(unfolded), weights


def reference_sinusoids(steps: int, H: int) -> torch.Tensor:
    """(steps, H) in float32: angle i / 10000^(2j / H); sin in even columns, cos in odd."""
    angles = torch.arange(steps, dtype=torch.float32)[:, None] / torch.pow(
        torch.tensor(10000.0), torch.arange(0, H, 2, dtype=torch.float32) / H
    )
    table = torch.empty(steps, H)
    table[:, 0::2], table[:, 1::2] = angles.sin(), angles.cos()
    return table


# ----- each block against the book to 1e-6 -----


@pytest.mark.parametrize("lens", LENS.values(), ids=LENS.keys())
def test_masked_softmax_equals_book(lens):
    scores = torch.randn(B, Q, K, generator=torch.Generator().manual_seed(10)) * 4
    expected = reference_masked_softmax(scores, lens)
    torch.testing.assert_close(masked_softmax(scores, lens), expected, atol=BOOK_TOL, rtol=0)


@pytest.mark.parametrize("lens", LENS.values(), ids=LENS.keys())
def test_additive_attention_equals_book(lens):
    torch.manual_seed(11)
    module = AdditiveAttention(key_size=7, query_size=5, num_hiddens=9, dropout=0.4).eval()
    with torch.no_grad():
        for param in module.parameters():
            param.normal_(0.0, 1.0)  # larger weights than the default, so tanh saturates somewhere
    queries, keys, values = torch.randn(B, Q, 5), torch.randn(B, K, 7), torch.randn(B, K, 2)
    with torch.no_grad():
        out = module(queries, keys, values, lens)
        expected, weights = reference_additive(module, queries, keys, values, lens)
    torch.testing.assert_close(out, expected, atol=BOOK_TOL, rtol=0)
    torch.testing.assert_close(module.attention_weights, weights, atol=BOOK_TOL, rtol=0)


@pytest.mark.parametrize("lens", LENS.values(), ids=LENS.keys())
def test_dot_product_attention_equals_book(lens):
    torch.manual_seed(12)
    module = DotProductAttention(dropout=0.4).eval()
    queries, keys, values = torch.randn(B, Q, 8), torch.randn(B, K, 8), torch.randn(B, K, 3)
    out = module(queries, keys, values, lens)
    expected, weights = reference_dot(queries, keys, values, lens)
    torch.testing.assert_close(out, expected, atol=BOOK_TOL, rtol=0)
    torch.testing.assert_close(module.attention_weights, weights, atol=BOOK_TOL, rtol=0)


@pytest.mark.parametrize("lens", LENS.values(), ids=LENS.keys())
@pytest.mark.parametrize("bias", [False, True])
def test_multi_head_attention_equals_book(lens, bias):
    torch.manual_seed(13)
    module = MultiHeadAttention(7, 5, 3, num_hiddens=12, num_heads=3, dropout=0.4, bias=bias).eval()
    queries, keys, values = torch.randn(B, Q, 5), torch.randn(B, K, 7), torch.randn(B, K, 3)
    with torch.no_grad():
        out = module(queries, keys, values, lens)
        expected, weights = reference_multi_head(module, queries, keys, values, lens)
    torch.testing.assert_close(out, expected, atol=BOOK_TOL, rtol=0)
    torch.testing.assert_close(module.attention.attention_weights, weights, atol=BOOK_TOL, rtol=0)


def test_positional_encoding_equals_book_over_its_whole_length():
    module = PositionalEncoding(32, dropout=0.3).eval()  # max_len 1000, the book's default
    X = torch.randn(2, 1000, 32)
    torch.testing.assert_close(module(X), X + reference_sinusoids(1000, 32), atol=BOOK_TOL, rtol=0)


# ----- a query with no valid key: zero row, zero output, finite gradients -----


def test_additive_attention_query_without_valid_key():
    torch.manual_seed(14)
    module = AdditiveAttention(4, 3, 5, dropout=0.0)
    queries = torch.randn(2, 2, 3, requires_grad=True)
    keys = torch.randn(2, 4, 4, requires_grad=True)
    values = torch.randn(2, 4, 2, requires_grad=True)
    out = module(queries, keys, values, torch.tensor([[0, 2], [3, 0]]))
    assert (module.attention_weights[0, 0] == 0).all() and (module.attention_weights[1, 1] == 0).all()
    assert (out[0, 0] == 0).all() and (out[1, 1] == 0).all()
    assert module.attention_weights[0, 1].sum().item() == pytest.approx(1.0)
    out.sum().backward()
    for tensor in (queries, keys, values, *module.parameters()):
        assert torch.isfinite(tensor.grad).all()
    assert (queries.grad[0, 0] == 0).all() and (queries.grad[1, 1] == 0).all()


@pytest.mark.parametrize("need_weights", [True, False], ids=["explicit", "fused"])
def test_multi_head_query_without_valid_key_on_both_paths(need_weights):
    torch.manual_seed(15)
    module = MultiHeadAttention(6, 6, 6, 6, 2, dropout=0.0).train()
    queries, keys = torch.randn(2, 3, 6, requires_grad=True), torch.randn(2, 5, 6, requires_grad=True)
    mask = AttentionMask.from_valid_lens(torch.tensor([0, 4]), 3, 5).with_heads()
    head_keys, head_values = module.project_keys_values(keys, keys)
    out, weights = module.attend(queries, head_keys, head_values, mask, need_weights)
    assert (out[0] == 0).all()  # W_o has no bias, so a zero context stays zero
    if need_weights:
        assert (weights[0] == 0).all() and not torch.isnan(weights).any()
    out.sum().backward()
    for tensor in (queries, keys, *module.parameters()):
        assert torch.isfinite(tensor.grad).all()
    assert (queries.grad[0] == 0).all() and (keys.grad[0] == 0).all()


# ----- the book's shape examples for the Transformer's parts -----


def test_transformer_parts_book_shapes():
    assert PositionWiseFFN(4, 4, 8).eval()(torch.ones(2, 3, 4)).shape == (2, 3, 8)
    add_norm = AddNorm([3, 4], 0.5).eval()
    assert add_norm(torch.ones(2, 3, 4), torch.ones(2, 3, 4)).shape == (2, 3, 4)
    X = torch.ones(2, 100, 24)
    src_mask = AttentionMask.from_valid_lens(torch.tensor([3, 2]), 1, 100).with_heads()
    encoded, _ = EncoderBlock(24, 48, 8, 0.5).eval()(X, src_mask, need_weights=False)
    assert encoded.shape == (2, 100, 24)
    decoder_block = DecoderBlock(24, 48, 8, 0.5).eval()
    cross = decoder_block.attention2.project_keys_values(encoded, encoded)
    causal = AttentionMask.causal(100).with_heads()
    decoded, cache, _, _ = decoder_block(X, None, causal, cross, src_mask, need_weights=False)
    assert decoded.shape == (2, 100, 24) and cache[0].shape == (2, 8, 100, 3)
