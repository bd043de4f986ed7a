"""Attention scoring: the masked softmax, additive, scaled dot-product and multi-head attention.

Shapes: B batch, Q queries, K keys (= values), H hidden, h heads, d = H / h per-head size.
The public names and constructor signatures are the book's (d2l.ai section 11.3 "Attention Scoring
Functions" and 11.5 "Multi-Head Attention"), so the book's weights load unchanged. Unlike the book,
a masked key gets exactly zero weight and a query with no valid key gets an all-zero row (and zero,
not NaN, gradients), on the explicit path and on the fused `scaled_dot_product_attention` path alike.
The fused path hands torch's kernels every mask, causal or key-padding, as the additive bias
`with_bias` lays out once per batch (the memory-efficient kernel takes it without a copy); the
explicit path reads the boolean `keep` and `blocked` as the book does. A causal mask is not passed
as `is_causal`: flash attention would take it, and on an H200 at these lengths its backward cost
2.3 times the memory-efficient kernel's a call (docs/gpu.md, "Which kernel each attention takes").
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

NEG_INF = float("-inf")
BIAS_ALIGNMENT = 16  # columns each row of an additive bias is allocated with (see additive_bias)
EXPLICIT_WITH_DROPOUT = ("cpu",)  # devices where training with dropout takes the explicit path


def reads_back(device: torch.device) -> bool:
    """Whether a mask on `device` may look at its lengths on the host: on the CPU only, and not compiled.

    Asking whether any query lacks a valid key (`bool(empty.any())`) costs nothing on the CPU and
    spares every attention call a fill; on a GPU it would stop the host until the device caught up,
    once per attention call, so there the mask keeps `empty` and always applies the (no-op) fill.
    Under torch.compile the read would split the graph in two, so a compiled step never reads back.
    Both give the same numbers.
    """
    return device.type == "cpu" and not torch.compiler.is_compiling()


@dataclass(frozen=True)
class AttentionMask:
    """Which keys each query may attend to, built once per batch and reused by every attention call.

    `keep` is True where a query may look. A query with no valid key at all is all True in `keep`,
    so neither the softmax nor the fused kernel ever sees an all-masked row (which gives NaN), and is
    marked in `empty`, so its weights and output are set to zero afterwards.
    """

    keep: torch.Tensor  # bool (B, Q or 1, K), or (B, 1, Q or 1, K) after with_heads()
    blocked: torch.Tensor  # bool, ~keep
    empty: torch.Tensor | None  # bool (..., Q or 1, 1): queries without a valid key; None if none (CPU)
    bias: torch.Tensor | None = None  # keep as 0 / -inf in one dtype, rows aligned (with_bias); None: keep

    @classmethod
    def from_valid_lens(cls, valid_lens: torch.Tensor, num_queries: int, num_keys: int) -> AttentionMask:
        """Keys at positions >= the valid length are masked; `valid_lens` is (B,) or (B, Q) as in the book."""
        positions = torch.arange(num_keys, device=valid_lens.device)  # (K,)
        if valid_lens.dim() == 1:
            lens = valid_lens.reshape(-1, 1, 1)  # (B, 1, 1)
        elif valid_lens.dim() == 2:
            if valid_lens.shape[1] != num_queries:
                raise ValueError(
                    f"valid_lens (B, Q) needs Q = {num_queries} columns, got shape {tuple(valid_lens.shape)}"
                )
            lens = valid_lens.unsqueeze(-1)  # (B, Q, 1)
        else:
            raise ValueError(f"valid_lens must be (B,) or (B, Q), got shape {tuple(valid_lens.shape)}")
        keep = positions < lens  # (B, 1 or Q, K)
        empty = lens <= 0  # (B, 1 or Q, 1)
        if not reads_back(valid_lens.device):
            return cls(keep | empty, ~(keep | empty), empty)  # no wait for the device; a no-op fill if none
        if bool(empty.any()):
            keep = keep | empty
        else:
            empty = None
        return cls(keep, ~keep, empty)

    @classmethod
    def causal(cls, num_steps: int, device: torch.device | str | None = None) -> AttentionMask:
        """Query i may attend to keys 0..i (a decoder's self-attention); shape (1, T, T)."""
        keep = (
            torch.ones(num_steps, num_steps, dtype=torch.bool, device=device).tril().unsqueeze(0)
        )  # (1, T, T)
        return cls(keep, ~keep, None)

    def with_heads(self) -> AttentionMask:
        """The same mask with a head axis inserted after the batch axis, for (B, h, Q, K) scores."""
        empty = None if self.empty is None else self.empty.unsqueeze(1)
        bias = None if self.bias is None else self.bias.unsqueeze(1)
        return AttentionMask(self.keep.unsqueeze(1), self.blocked.unsqueeze(1), empty, bias)

    def with_bias(self, dtype: torch.dtype) -> AttentionMask:
        """The same mask carrying its additive bias in `dtype`, the dtype the fused kernel's queries have."""
        return AttentionMask(self.keep, self.blocked, self.empty, additive_bias(self.keep, dtype))

    def index_select(self, index: torch.Tensor) -> AttentionMask:
        """Rows `index` of the batch axis (for beam search)."""
        empty = None if self.empty is None else self.empty.index_select(0, index)
        keep = self.keep.index_select(0, index)
        bias = None if self.bias is None else additive_bias(keep, self.bias.dtype)
        return AttentionMask(keep, self.blocked.index_select(0, index), empty, bias)


def additive_bias(keep: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """0 where `keep` (..., K) is True and -inf elsewhere, in `dtype`: (..., K), rows BIAS_ALIGNMENT wide.

    The rows are allocated BIAS_ALIGNMENT columns wide and sliced to K, so every stride but the last
    is a multiple of 16: CUDA's memory-efficient attention kernel then reads the bias as it is,
    where a boolean mask is turned into a bias in the queries' dtype and a bias of other strides is
    padded and copied, at every call (attention.cpp's convert_boolean_attn_mask and preprocess_mask;
    tests/support/cuda_rules.py checks the layout). Built once a batch, it serves every layer.
    """
    width = keep.shape[-1]
    columns = -(-width // BIAS_ALIGNMENT) * BIAS_ALIGNMENT
    rows = torch.full((*keep.shape[:-1], columns), NEG_INF, dtype=dtype, device=keep.device)  # (..., K')
    bias = rows[..., :width]  # (..., K), a view keeping the aligned strides
    bias.masked_fill_(keep, 0.0)
    return bias


def softmax_with_mask(scores: torch.Tensor, mask: AttentionMask | None) -> torch.Tensor:
    """Softmax over the last axis of `scores`; blocked keys get weight 0, rows with no valid key are 0."""
    if mask is None:
        return F.softmax(scores, dim=-1)
    weights = F.softmax(scores.masked_fill(mask.blocked, NEG_INF), dim=-1)
    if mask.empty is not None:
        weights = weights.masked_fill(mask.empty, 0.0)
    return weights


def masked_softmax(X: torch.Tensor, valid_lens: torch.Tensor | None) -> torch.Tensor:
    """The book's masked softmax of X (B, Q, K); `valid_lens` is None, (B,) or (B, Q)."""
    if valid_lens is None:
        return F.softmax(X, dim=-1)
    return softmax_with_mask(X, AttentionMask.from_valid_lens(valid_lens, X.shape[1], X.shape[2]))


class AdditiveAttention(nn.Module):
    """Additive attention, a(q, k) = w_v^T tanh(W_q q + W_k k) (Bahdanau et al. 2014; book eq. 11.3.7).

    `forward` is the book's. A decoder that attends over the same keys at every step projects them
    once with `W_k` and calls `attend` with the projected keys (only done for efficiency).
    """

    def __init__(self, key_size: int, query_size: int, num_hiddens: int, dropout: float):
        super().__init__()
        self.W_k = nn.Linear(key_size, num_hiddens, bias=False)
        self.W_q = nn.Linear(query_size, num_hiddens, bias=False)
        self.w_v = nn.Linear(num_hiddens, 1, bias=False)
        self.dropout = nn.Dropout(dropout)
        self.attention_weights: torch.Tensor | None = None

    def forward(
        self,
        queries: torch.Tensor,
        keys: torch.Tensor,
        values: torch.Tensor,
        valid_lens: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Queries (B, Q, q), keys (B, K, k), values (B, K, v) -> (B, Q, v); keeps attention_weights."""
        mask = (
            None
            if valid_lens is None
            else AttentionMask.from_valid_lens(valid_lens, queries.shape[1], keys.shape[1])
        )
        return self.attend(queries, self.W_k(keys), values, mask)

    def attend(
        self,
        queries: torch.Tensor,
        projected_keys: torch.Tensor,
        values: torch.Tensor,
        mask: AttentionMask | None,
    ) -> torch.Tensor:
        """Queries (B, Q, q), W_k-projected keys (B, K, H), values (B, K, v) -> (B, Q, v)."""
        features = torch.tanh(self.W_q(queries).unsqueeze(2) + projected_keys.unsqueeze(1))  # (B, Q, K, H)
        scores = self.w_v(features).squeeze(-1)  # (B, Q, K)
        self.attention_weights = softmax_with_mask(scores, mask)  # (B, Q, K)
        return torch.bmm(self.dropout(self.attention_weights), values)  # (B, Q, v)


class UnprojectedDotProductAttention(nn.Module):
    """softmax(q k^T / sqrt(d)) v with AdditiveAttention's `attend` and `W_k` (the Bahdanau decoder's
    `model.scoring: dot`, one of the chapter's exercises).

    There the query (the decoder's top GRU state) and the keys (the encoder's outputs) are both
    num_hiddens wide, so they are compared as they are: no projection, `W_k` is the identity and the
    scoring has no parameters. Queries and keys of different sizes are refused.
    """

    def __init__(self, dropout: float):
        super().__init__()
        self.W_k = nn.Identity()
        self.dropout = nn.Dropout(dropout)
        self.attention_weights: torch.Tensor | None = None

    def attend(
        self,
        queries: torch.Tensor,
        keys: torch.Tensor,
        values: torch.Tensor,
        mask: AttentionMask | None,
    ) -> torch.Tensor:
        """Queries (B, Q, d), keys (B, K, d), values (B, K, v) -> (B, Q, v); keeps attention_weights."""
        if queries.shape[-1] != keys.shape[-1]:
            raise ValueError(
                f"dot-product scoring needs queries and keys of one size, got {queries.shape[-1]} "
                f"and {keys.shape[-1]}"
            )
        scores = torch.bmm(queries, keys.transpose(1, 2)) / math.sqrt(queries.shape[-1])  # (B, Q, K)
        self.attention_weights = softmax_with_mask(scores, mask)  # (B, Q, K)
        return torch.bmm(self.dropout(self.attention_weights), values)  # (B, Q, v)


class DotProductAttention(nn.Module):
    """Scaled dot-product attention, softmax(q k^T / sqrt(d)) v (Vaswani et al. 2017; book eq. 11.3.4).

    `attend` uses torch's fused `scaled_dot_product_attention` when the weights are not needed and
    the explicit computation when they are, or when training with dropout on the CPU (where the
    fused kernel's own fallback is slower); both give the same output.
    """

    def __init__(self, dropout: float):
        super().__init__()
        self.dropout = nn.Dropout(dropout)
        self.attention_weights: torch.Tensor | None = None

    def forward(
        self,
        queries: torch.Tensor,
        keys: torch.Tensor,
        values: torch.Tensor,
        valid_lens: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Queries (B, Q, d), keys (B, K, d), values (B, K, v) -> (B, Q, v); keeps attention_weights."""
        mask = (
            None
            if valid_lens is None
            else AttentionMask.from_valid_lens(valid_lens, queries.shape[1], keys.shape[1])
        )
        output, self.attention_weights = self.attend(queries, keys, values, mask, need_weights=True)
        return output

    def attend(
        self,
        queries: torch.Tensor,
        keys: torch.Tensor,
        values: torch.Tensor,
        mask: AttentionMask | None,
        need_weights: bool,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """(..., Q, d), (..., K, d), (..., K, v) -> output (..., Q, v) and weights (..., Q, K) or None."""
        dropout_p = self.dropout.p if self.training else 0.0
        if need_weights or (dropout_p > 0 and queries.device.type in EXPLICIT_WITH_DROPOUT):
            # torch's CPU fused kernel falls back to a slower path of its own with dropout and a mask
            scores = torch.matmul(queries, keys.transpose(-1, -2)) / math.sqrt(
                queries.shape[-1]
            )  # (..., Q, K)
            weights = softmax_with_mask(scores, mask)  # (..., Q, K)
            return torch.matmul(self.dropout(weights), values), weights if need_weights else None
        return fused_attention(queries, keys, values, mask, dropout_p), None


def fused_attention(
    queries: torch.Tensor,
    keys: torch.Tensor,
    values: torch.Tensor,
    mask: AttentionMask | None,
    dropout_p: float,
) -> torch.Tensor:
    """DotProductAttention's fused path: (..., Q, d), (..., K, d), (..., K, v) -> (..., Q, v).

    The mask goes to `scaled_dot_product_attention` as its bias when it carries one in the queries'
    dtype (the memory-efficient kernel reads it without a copy), else as `keep`; while an ONNX graph
    is traced, always as `keep` (the graph serves every length, a bias is laid out for one).
    """
    attn_mask = None
    if mask is not None:
        usable = mask.bias is not None and mask.bias.dtype == queries.dtype
        attn_mask = mask.bias if usable and not torch.onnx.is_in_onnx_export() else mask.keep
    output = F.scaled_dot_product_attention(
        queries, keys, values, attn_mask=attn_mask, dropout_p=dropout_p
    )  # (..., Q, v)
    if mask is not None and mask.empty is not None:
        output = output.masked_fill(mask.empty, 0.0)
    return output


class MultiHeadAttention(nn.Module):
    """h scaled dot-product attentions over learned projections, concatenated and projected by W_o.

    Vaswani et al. 2017 section 3.2.2; book section 11.5. `attention_weights` is (B, h, Q, K); the
    inner `attention.attention_weights` holds the book's (B * h, Q, K) layout of the same numbers.
    """

    def __init__(
        self,
        key_size: int,
        query_size: int,
        value_size: int,
        num_hiddens: int,
        num_heads: int,
        dropout: float,
        bias: bool = False,
    ):
        super().__init__()
        if num_hiddens % num_heads:
            raise ValueError(f"num_hiddens = {num_hiddens} is not divisible by num_heads = {num_heads}")
        self.num_heads = num_heads
        self.attention = DotProductAttention(dropout)
        self.W_q = nn.Linear(query_size, num_hiddens, bias=bias)
        self.W_k = nn.Linear(key_size, num_hiddens, bias=bias)
        self.W_v = nn.Linear(value_size, num_hiddens, bias=bias)
        self.W_o = nn.Linear(num_hiddens, num_hiddens, bias=bias)
        self.attention_weights: torch.Tensor | None = None

    def split_heads(self, X: torch.Tensor) -> torch.Tensor:
        """(B, N, H) -> (B, h, N, d)."""
        batch, steps, _ = X.shape
        return X.view(batch, steps, self.num_heads, -1).transpose(1, 2)  # (B, h, N, d)

    def merge_heads(self, X: torch.Tensor) -> torch.Tensor:
        """(B, h, N, d) -> (B, N, H)."""
        batch, _, steps, _ = X.shape
        return X.transpose(1, 2).reshape(batch, steps, -1)  # (B, N, H)

    def project_keys_values(
        self, keys: torch.Tensor, values: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Keys (B, K, k) and values (B, K, v) -> per-head keys and values, each (B, h, K, d)."""
        return self.split_heads(self.W_k(keys)), self.split_heads(self.W_v(values))

    def attend(
        self,
        queries: torch.Tensor,
        head_keys: torch.Tensor,
        head_values: torch.Tensor,
        mask: AttentionMask | None,
        need_weights: bool,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Queries (B, Q, q), projected keys/values (B, h, K, d) -> (B, Q, H), weights (B, h, Q, K) or None.

        `mask` must have a head axis (see AttentionMask.with_heads).
        """
        head_queries = self.split_heads(self.W_q(queries))  # (B, h, Q, d)
        output, weights = self.attention.attend(head_queries, head_keys, head_values, mask, need_weights)
        return self.W_o(self.merge_heads(output)), weights  # (B, Q, H)

    def forward(
        self,
        queries: torch.Tensor,
        keys: torch.Tensor,
        values: torch.Tensor,
        valid_lens: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Queries (B, Q, q), keys (B, K, k), values (B, K, v) -> (B, Q, H); keeps attention_weights."""
        mask = None
        if valid_lens is not None:
            mask = AttentionMask.from_valid_lens(valid_lens, queries.shape[1], keys.shape[1]).with_heads()
        head_keys, head_values = self.project_keys_values(keys, values)
        output, weights = self.attend(queries, head_keys, head_values, mask, need_weights=True)
        assert weights is not None
        self.attention_weights = weights  # (B, h, Q, K)
        self.attention.attention_weights = weights.flatten(0, 1)  # (B * h, Q, K), the book's layout
        return output
