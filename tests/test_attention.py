"""Attention building blocks: masked softmax, additive, dot-product and multi-head attention, positions.

Shapes: B batch, Q queries, K keys, H hidden, h heads.
"""

from __future__ import annotations

import math

import pytest
import torch
from support.tolerances import assert_float32_close

from attn_mt.models import (
    AdditiveAttention,
    AttentionMask,
    DotProductAttention,
    MultiHeadAttention,
    PositionalEncoding,
    masked_softmax,
)
from attn_mt.models.attention import fused_attention


def hand_softmax(row: list[float], valid: int) -> list[float]:
    """Softmax of the first `valid` entries, zeros after, in plain Python."""
    exps = [math.exp(x) for x in row[:valid]]
    return [e / sum(exps) for e in exps] + [0.0] * (len(row) - valid)


def book_keys_values(batch: int = 2) -> tuple[torch.Tensor, torch.Tensor]:
    """The book's example: keys (B, 10, 2) of ones, values (B, 10, 4) = 0..39."""
    keys = torch.ones(batch, 10, 2)
    values = torch.arange(40, dtype=torch.float32).reshape(1, 10, 4).repeat(batch, 1, 1)
    return keys, values


# ----- masked softmax -----


def test_masked_softmax_per_batch_lengths_matches_hand_computation():
    X = torch.rand(2, 2, 4, generator=torch.Generator().manual_seed(0))
    out = masked_softmax(X, torch.tensor([2, 3]))
    for b, valid in enumerate([2, 3]):
        for q in range(2):
            assert out[b, q].tolist() == pytest.approx(hand_softmax(X[b, q].tolist(), valid), abs=1e-7)
            assert (out[b, q, valid:] == 0).all()


def test_masked_softmax_per_query_lengths_matches_hand_computation():
    X = torch.rand(2, 2, 4, generator=torch.Generator().manual_seed(1))
    lens = [[1, 3], [2, 4]]
    out = masked_softmax(X, torch.tensor(lens))
    for b in range(2):
        for q in range(2):
            assert out[b, q].tolist() == pytest.approx(hand_softmax(X[b, q].tolist(), lens[b][q]), abs=1e-7)


def test_masked_softmax_without_lengths_is_softmax():
    X = torch.randn(2, 3, 5)
    torch.testing.assert_close(masked_softmax(X, None), torch.softmax(X, dim=-1))


def test_masked_keys_get_exactly_zero_weight_whatever_their_scores():
    # Masked scores are large (a 0-fill variant would weight them) and the valid scores sit near -1e6
    # (where the book's -1e6 fill would spread weight onto the masked keys).
    X = torch.tensor([[[-1e6, -1e6 + 1.0, 50.0, 0.0]], [[3.0, 1e-6, 0.0, 40.0]]])
    out = masked_softmax(X, torch.tensor([2, 3]))
    assert out[0, 0].tolist() == pytest.approx(hand_softmax([0.0, 1.0, 0, 0], 2), abs=1e-7)
    assert out[1, 0].tolist() == pytest.approx(hand_softmax([3.0, 1e-6, 0.0, 40.0], 3), abs=1e-7)
    assert out[0, 0, 2:].tolist() == [0.0, 0.0]
    assert out[1, 0, 3].item() == 0.0


@pytest.mark.parametrize("lens", [torch.tensor([0, 2]), torch.tensor([[0, 3], [2, 0]])])
def test_query_without_valid_key_gets_zero_row_and_finite_gradient(lens):
    X = torch.randn(2, 2, 3, requires_grad=True)
    out = masked_softmax(X, lens)
    empty = (lens == 0).reshape(2, -1).expand(2, 2)  # (B, Q)
    assert (out[empty] == 0).all()
    assert torch.isfinite(out).all()
    assert out[~empty].sum(-1).tolist() == pytest.approx([1.0] * int((~empty).sum()))
    (out * torch.randn(2, 2, 3)).sum().backward()
    assert torch.isfinite(X.grad).all()
    assert (X.grad[empty] == 0).all()


def test_attention_mask_shapes_and_row_selection():
    mask = AttentionMask.from_valid_lens(torch.tensor([2, 0, 3]), num_queries=4, num_keys=3)
    assert mask.keep.shape == (3, 1, 3) and mask.empty is not None
    assert mask.keep[0, 0].tolist() == [True, True, False]
    assert mask.keep[1, 0].tolist() == [True, True, True]  # empty rows are safe for the softmax
    assert mask.empty[:, 0, 0].tolist() == [False, True, False]
    picked = mask.index_select(torch.tensor([2, 2, 1]))
    assert picked.keep[:, 0].tolist() == [[True] * 3, [True] * 3, [True] * 3]
    assert picked.empty[:, 0, 0].tolist() == [False, False, True]
    assert AttentionMask.from_valid_lens(torch.tensor([1, 2]), 1, 3).empty is None
    causal = AttentionMask.causal(3)
    assert causal.keep[0].tolist() == [[True, False, False], [True, True, False], [True, True, True]]
    assert causal.with_heads().keep.shape == (1, 1, 3, 3)


def test_two_dimensional_lengths_must_match_queries():
    with pytest.raises(ValueError, match="Q = 3"):
        AttentionMask.from_valid_lens(torch.tensor([[1, 2]]), num_queries=3, num_keys=4)


# ----- additive attention -----


def test_additive_attention_hand_computed():
    attention = AdditiveAttention(key_size=2, query_size=2, num_hiddens=2, dropout=0.0)
    with torch.no_grad():
        attention.W_q.weight.copy_(torch.eye(2))
        attention.W_k.weight.copy_(torch.tensor([[1.0, 0.0], [0.0, 2.0]]))
        attention.w_v.weight.copy_(torch.tensor([[1.0, -0.5]]))
    q = [0.5, -1.0]
    keys = [[0.0, 0.0], [1.0, 0.5], [-1.0, 2.0]]
    values = [[1.0, 2.0], [3.0, 4.0], [100.0, 100.0]]
    scores = [math.tanh(q[0] + k[0]) - 0.5 * math.tanh(q[1] + 2 * k[1]) for k in keys]
    weights = hand_softmax(scores, 2)
    expected = [sum(w * v[c] for w, v in zip(weights, values, strict=True)) for c in range(2)]
    out = attention(torch.tensor([[q]]), torch.tensor([keys]), torch.tensor([values]), torch.tensor([2]))
    assert out.shape == (1, 1, 2)
    assert out[0, 0].tolist() == pytest.approx(expected, abs=1e-6)
    assert attention.attention_weights[0, 0].tolist() == pytest.approx(weights, abs=1e-6)


def test_additive_attention_book_example():
    torch.manual_seed(0)
    keys, values = book_keys_values()
    attention = AdditiveAttention(key_size=2, query_size=20, num_hiddens=8, dropout=0.1)
    attention.eval()
    out = attention(torch.normal(0, 1, (2, 1, 20)), keys, values, torch.tensor([2, 6]))
    assert out.shape == (2, 1, 4)
    # equal keys: uniform weights over the valid keys, so the output is the mean of their values
    torch.testing.assert_close(out, torch.tensor([[[2.0, 3.0, 4.0, 5.0]], [[10.0, 11.0, 12.0, 13.0]]]))
    assert attention.attention_weights.shape == (2, 1, 10)
    assert attention.attention_weights[0, 0, :2].tolist() == pytest.approx([0.5, 0.5])
    assert (attention.attention_weights[0, 0, 2:] == 0).all()


def test_additive_attention_several_queries_matches_single_query_calls():
    torch.manual_seed(1)
    attention = AdditiveAttention(3, 5, 7, dropout=0.0)
    queries, keys, values = torch.randn(2, 4, 5), torch.randn(2, 6, 3), torch.randn(2, 6, 2)
    lens = torch.tensor([3, 6])
    together = attention(queries, keys, values, lens)
    for q in range(4):
        one = attention(queries[:, q : q + 1], keys, values, lens)
        # one query or four: the same 7-unit scores and 6-key softmax, in another batch shape
        assert_float32_close(together[:, q : q + 1], one, terms=7 + 6)


# ----- dot-product attention -----


def test_dot_product_attention_hand_computed():
    attention = DotProductAttention(dropout=0.0)
    keys = [[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]]
    values = [[1.0], [10.0], [100.0]]
    q = [1.0, 0.5]
    scores = [(q[0] * k[0] + q[1] * k[1]) / math.sqrt(2) for k in keys]
    for valid in (2, 3):
        weights = hand_softmax(scores, valid)
        expected = sum(w * v[0] for w, v in zip(weights, values, strict=True))
        out = attention(
            torch.tensor([[q]]), torch.tensor([keys]), torch.tensor([values]), torch.tensor([valid])
        )
        assert out.item() == pytest.approx(expected, rel=1e-6)
        assert attention.attention_weights[0, 0].tolist() == pytest.approx(weights, abs=1e-7)


def test_dot_product_attention_book_example():
    torch.manual_seed(0)
    keys, values = book_keys_values()
    attention = DotProductAttention(dropout=0.5)
    attention.eval()
    out = attention(torch.normal(0, 1, (2, 1, 2)), keys, values, torch.tensor([2, 6]))
    torch.testing.assert_close(out, torch.tensor([[[2.0, 3.0, 4.0, 5.0]], [[10.0, 11.0, 12.0, 13.0]]]))


@pytest.mark.parametrize(
    "mask",
    [
        None,
        AttentionMask.from_valid_lens(torch.tensor([3, 0, 5]), 4, 5).with_heads(),
        AttentionMask.from_valid_lens(
            torch.tensor([[1, 2, 0, 5], [5, 4, 3, 2], [0, 0, 1, 1]]), 4, 5
        ).with_heads(),
    ],
)
def test_fused_path_equals_explicit_path(mask):
    torch.manual_seed(2)
    attention = DotProductAttention(dropout=0.3)
    attention.eval()
    q, k, v = (torch.randn(3, 2, n, 8, requires_grad=True) for n in (4, 5, 5))
    explicit, weights = attention.attend(q, k, v, mask, need_weights=True)
    fused, none = attention.attend(q, k, v, mask, need_weights=False)
    assert none is None and weights.shape == (3, 2, 4, 5)
    # torch's fused kernel and the book's steps: 8-term scores, a 5-key softmax, 5-term weighted sums
    assert_float32_close(fused, explicit, terms=8 + 5 + 5)
    if mask is not None and mask.empty is not None:
        empty = mask.empty.expand(3, 2, 4, 1).squeeze(-1)  # (B, h, Q)
        assert (fused[empty] == 0).all() and (weights[empty] == 0).all()
    grads = []
    for out in (explicit, fused):
        grads.append(torch.autograd.grad((out * torch.linspace(-1, 1, 8)).sum(), (q, k, v)))
    for g_explicit, g_fused in zip(*grads, strict=True):
        assert torch.isfinite(g_fused).all()
        # backward adds the 4 queries' and 8 features' contributions too
        assert_float32_close(g_fused, g_explicit, terms=8 + 5 + 5 + 4 + 8)


def test_fused_path_with_dropout_in_training_keeps_zero_rows():
    attention = DotProductAttention(dropout=0.5)
    attention.train()
    q, k, v = (torch.randn(2, 1, 3, 4, requires_grad=True) for _ in range(3))
    mask = AttentionMask.from_valid_lens(torch.tensor([0, 2]), 3, 3).with_heads()
    out, _ = attention.attend(q, k, v, mask, need_weights=False)
    assert (out[0] == 0).all() and torch.isfinite(out).all()
    out.sum().backward()
    assert all(torch.isfinite(t.grad).all() for t in (q, k, v))


# ----- multi-head attention -----


def per_head_reference(
    mha: MultiHeadAttention, X: torch.Tensor, Y: torch.Tensor, lens: list[int]
) -> torch.Tensor:
    """Multi-head attention one batch row and one head at a time, slicing the valid keys."""
    h, H = mha.num_heads, mha.W_q.weight.shape[0]
    d = H // h
    rows = []
    for b, valid in enumerate(lens):
        Q, K, V = mha.W_q(X[b]), mha.W_k(Y[b, :valid]), mha.W_v(Y[b, :valid])
        heads = []
        for i in range(h):
            part = slice(i * d, (i + 1) * d)
            weights = torch.softmax(Q[:, part] @ K[:, part].T / math.sqrt(d), dim=-1)
            heads.append(weights @ V[:, part])
        rows.append(mha.W_o(torch.cat(heads, dim=-1)))
    return torch.stack(rows)


def test_multi_head_attention_book_example_and_per_head_reference():
    torch.manual_seed(3)
    mha = MultiHeadAttention(100, 100, 100, 100, 5, 0.5)
    mha.eval()
    X, Y = torch.randn(2, 4, 100), torch.randn(2, 6, 100)
    out = mha(X, Y, Y, torch.tensor([3, 2]))
    assert out.shape == (2, 4, 100)
    assert mha.attention_weights.shape == (2, 5, 4, 6)
    assert mha.attention.attention_weights.shape == (10, 4, 6)  # the book's (B * h, Q, K) layout
    torch.testing.assert_close(mha.attention.attention_weights[5:10], mha.attention_weights[1])
    # 100-term projections, 20-term head scores, a 6-key softmax and sum, the 100-term output projection
    assert_float32_close(out, per_head_reference(mha, X, Y, [3, 2]), terms=100 + 20 + 6 + 6 + 100)
    assert (mha.attention_weights[1, :, :, 2:] == 0).all()


def test_multi_head_attention_sizes_and_bias():
    mha = MultiHeadAttention(key_size=6, query_size=5, value_size=7, num_hiddens=12, num_heads=3, dropout=0.0)
    assert [tuple(p.shape) for p in (mha.W_q.weight, mha.W_k.weight, mha.W_v.weight, mha.W_o.weight)] == [
        (12, 5),
        (12, 6),
        (12, 7),
        (12, 12),
    ]
    assert mha.W_q.bias is None
    assert MultiHeadAttention(4, 4, 4, 4, 2, 0.0, bias=True).W_o.bias is not None
    out = mha(
        torch.randn(2, 3, 5), torch.randn(2, 4, 6), torch.randn(2, 4, 7), torch.tensor([[1, 2, 3], [4, 4, 0]])
    )
    assert out.shape == (2, 3, 12)
    assert torch.isfinite(out).all()
    torch.testing.assert_close(out[1, 2], mha.W_o(torch.zeros(12)))  # no valid key: zero heads
    with pytest.raises(ValueError, match="not divisible"):
        MultiHeadAttention(8, 8, 8, 10, 4, 0.0)


# ----- positional encoding -----


def test_positional_encoding_values_match_formula():
    encoding = PositionalEncoding(32, dropout=0.0, max_len=60)
    encoding.eval()
    table = encoding(torch.zeros(1, 60, 32))[0]  # (60, 32)
    for i, j in [(0, 0), (1, 0), (5, 3), (20, 7), (59, 15)]:
        angle = i / 10000 ** (2 * j / 32)
        assert table[i, 2 * j].item() == pytest.approx(math.sin(angle), abs=1e-6)
        assert table[i, 2 * j + 1].item() == pytest.approx(math.cos(angle), abs=1e-6)


def test_positional_encoding_adds_table_with_offset_and_grows():
    encoding = PositionalEncoding(6, dropout=0.0, max_len=4)
    encoding.eval()
    X = torch.randn(2, 3, 6)
    full = PositionalEncoding(6, dropout=0.0, max_len=20)(torch.zeros(1, 20, 6))  # (1, 20, 6)
    torch.testing.assert_close(encoding(X), X + full[:, :3])
    torch.testing.assert_close(encoding(X, offset=2), X + full[:, 2:5])  # past max_len: the table grows
    torch.testing.assert_close(encoding(torch.zeros(1, 20, 6)), full)
    assert "P" not in encoding.state_dict()  # as the book: not a saved parameter


def test_positional_encoding_odd_size_and_book_shape():
    encoding = PositionalEncoding(5, dropout=0.0)
    table = encoding(torch.zeros(1, 3, 5))[0]
    assert table[2].tolist() == pytest.approx(
        [
            math.sin(2),
            math.cos(2),
            math.sin(2 / 10000**0.4),
            math.cos(2 / 10000**0.4),
            math.sin(2 / 10000**0.8),
        ],
        abs=1e-6,
    )
    assert PositionalEncoding(32, 0.5)(torch.zeros(1, 60, 32)).shape == (1, 60, 32)


# ----- the fused path's masks: an aligned bias, causal or key-padding (issue 70) -----


def test_source_bias_is_laid_out_for_the_fused_kernels():
    mask = AttentionMask.from_valid_lens(torch.tensor([3, 1, 5]), 1, 5).with_heads()
    biased = mask.with_bias(torch.bfloat16)
    bias = biased.bias
    assert bias.shape == (3, 1, 1, 5) and bias.dtype == torch.bfloat16
    assert all(stride % 16 == 0 for stride in bias.stride()[:-1])  # no copy in the memory-efficient kernel
    assert torch.equal(bias == 0, mask.keep) and torch.isinf(bias[~mask.keep]).all()
    picked = biased.index_select(torch.tensor([2, 0, 0]))  # beam search keeps the layout
    assert torch.equal(picked.bias == 0, mask.keep[[2, 0, 0]]) and picked.bias.stride()[0] % 16 == 0
    causal = AttentionMask.causal(4).with_heads().with_bias(torch.bfloat16).bias  # (1, 1, T, T)
    assert causal.shape == (1, 1, 4, 4) and all(stride % 16 == 0 for stride in causal.stride()[:-1])
    assert torch.equal(causal[0, 0] == 0, torch.ones(4, 4, dtype=torch.bool).tril())


@pytest.mark.parametrize("dropout", [0.0, 0.3])
def test_fused_causal_and_biased_attention_equal_the_explicit_path_in_training(dropout):
    attention = DotProductAttention(dropout)
    attention.train()
    q, k, v = (torch.randn(3, 2, 6, 8, requires_grad=True) for _ in range(3))
    causal = AttentionMask.causal(6).with_heads().with_bias(torch.float32)
    padded = (
        AttentionMask.from_valid_lens(torch.tensor([6, 2, 4]), 1, 6).with_heads().with_bias(torch.float32)
    )
    for mask in (causal, padded):
        torch.manual_seed(5)
        explicit, _ = attention.attend(q, k, v, mask, need_weights=True)  # nn.Dropout on the weights
        torch.manual_seed(5)
        fused = fused_attention(q, k, v, mask, dropout)  # the same draws inside torch's kernel
        assert_float32_close(fused, explicit, terms=8 + 6 + 6)
        grads = [
            torch.autograd.grad((out * torch.linspace(-1, 1, 8)).sum(), (q, k, v))
            for out in (explicit, fused)
        ]
        for g_explicit, g_fused in zip(*grads, strict=True):
            assert_float32_close(g_fused, g_explicit, terms=8 + 6 + 6 + 6 + 8)


def test_the_bias_in_bf16_gives_the_boolean_masks_output():
    q, k, v = (torch.randn(3, 2, n, 8).bfloat16() for n in (4, 5, 5))
    mask = AttentionMask.from_valid_lens(torch.tensor([3, 1, 5]), 4, 5).with_heads()
    with_bool = fused_attention(q, k, v, mask, 0.0)
    with_bias = fused_attention(q, k, v, mask.with_bias(torch.bfloat16), 0.0)
    assert (
        fused_attention(q, k, v, mask.with_bias(torch.float32), 0.0).dtype == torch.bfloat16
    )  # keep, not a wrong bias
    explicit = fused_attention(q.float(), k.float(), v.float(), mask, 0.0)
    torch.testing.assert_close(with_bias, with_bool, rtol=0, atol=0)
    torch.testing.assert_close(with_bias.float(), explicit, rtol=2e-2, atol=2e-2)  # bf16's 8-bit mantissa
