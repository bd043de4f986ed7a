"""Transformer encoder and decoder blocks for CPU training, each as one autograd function.

Shapes: B batch, S source steps, T target steps, H hidden, F feed-forward hidden, h heads,
N = B * S (or B * T) rows, K keys, Q queries.
At the book's sizes (H = 32, a few steps) a block's ~25 small kernels cost less than the autograd
bookkeeping around them: a node recorded per op in the forward, a node visited per op in the
backward, views and copies for splitting heads. Here a block's forward runs unrecorded and keeps
what its hand-written backward needs, so autograd sees one node per block. The maths is the
module path's (transformer.py: post-norm blocks, LayerNorm(X + dropout(sublayer(X))), book section
11.7) with packed_attention's multi-head attention; dropout masks are drawn by the caller in the
module path's order and shapes, so both paths give the same numbers from the same seed.
The parameters are saved with save_for_backward; the intermediates, nested per sublayer, are kept
on the context for the one backward a training step makes.
"""

from __future__ import annotations

from typing import Any

import torch

from attn_mt.models.packed_attention import PackedSaved, packed_backward, packed_forward

Masks = tuple[torch.Tensor | None, torch.Tensor | None]  # keys-first (blocked, empty), see packed_attention


def _add_norm(
    residual: torch.Tensor, sublayer: torch.Tensor, keep: torch.Tensor | None, norm: tuple, eps: float
) -> tuple[torch.Tensor, tuple]:
    """LayerNorm(residual + dropout(sublayer)) on (N, H) rows, and what _add_norm_backward needs.

    `keep` holds the dropout multipliers as (B, steps, H), the rows' own layout.
    """
    summed = residual + (sublayer if keep is None else sublayer * keep.view(sublayer.shape))  # (N, H)
    out, mean, rstd = torch.native_layer_norm(summed, (summed.shape[1],), norm[0], norm[1], eps)
    return out, (summed, mean, rstd)


def _add_norm_backward(
    grad: torch.Tensor, saved: tuple, keep: torch.Tensor | None, norm: tuple
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Gradients of the residual and the sublayer (N, H), and of the norm's weight and bias."""
    summed, mean, rstd = saved
    grad_sum, grad_w, grad_b = torch.ops.aten.native_layer_norm_backward(
        grad, summed, (summed.shape[1],), mean, rstd, norm[0], norm[1], [True, True, True]
    )
    return grad_sum, (grad_sum if keep is None else grad_sum * keep.view(grad_sum.shape)), grad_w, grad_b


def _ffn(x: torch.Tensor, w1: torch.Tensor, b1: torch.Tensor, w2: torch.Tensor, b2: torch.Tensor) -> tuple:
    """dense2(relu(dense1(x))) on (N, H) rows, and the ReLU output (N, F) the backward needs."""
    hidden = torch.addmm(b1, x, w1.t()).relu_()  # (N, F)
    return torch.addmm(b2, hidden, w2.t()), hidden  # (N, H)


def _ffn_backward(
    grad: torch.Tensor, x: torch.Tensor, hidden: torch.Tensor, w1: torch.Tensor, w2: torch.Tensor
) -> tuple[torch.Tensor, ...]:
    """Gradients of the input (N, H), W1, b1, W2, b2 from the output's (N, H)."""
    grad_hidden = torch.ops.aten.threshold_backward(grad.mm(w2), hidden, 0)  # (N, F)
    return (
        grad_hidden.mm(w1),
        grad_hidden.t().mm(x),
        grad_hidden.sum(0),
        grad.t().mm(hidden),
        grad.sum(0),
    )


def _attention(
    queries: torch.Tensor,
    memory: torch.Tensor,
    weights: tuple,
    shape: tuple[int, int, int, int],
    masks: Masks,
    keep: torch.Tensor | None,
    num_heads: int,
) -> tuple[torch.Tensor, tuple]:
    """Multi-head attention of query rows (B * Q, H) over memory rows (B * K, H) -> (B * Q, H), saved."""
    batch, num_queries, num_keys, hidden = shape
    w_q, w_k, w_v, w_o = weights
    q = queries.mm(w_q.t()).view(batch, num_queries, hidden)  # (B, Q, H)
    k = memory.mm(w_k.t()).view(batch, num_keys, hidden)  # (B, K, H)
    v = memory.mm(w_v.t()).view(batch, num_keys, hidden)  # (B, K, H)
    attended, saved = packed_forward(q, k, v, num_heads, masks[0], masks[1], keep)  # (B, Q, H)
    attended = attended.view(batch * num_queries, hidden)  # (B * Q, H)
    return attended.mm(w_o.t()), (attended, saved)


def _attention_backward(
    grad: torch.Tensor,
    queries: torch.Tensor,
    memory: torch.Tensor,
    weights: tuple,
    saved: tuple[torch.Tensor, PackedSaved],
    num_heads: int,
) -> tuple[torch.Tensor, torch.Tensor, tuple[torch.Tensor, ...]]:
    """Gradients of the query rows, the memory rows and (W_q, W_k, W_v, W_o) from the output's."""
    w_q, w_k, w_v, w_o = weights
    attended, packed = saved
    hidden = grad.shape[1]
    grad_attended = grad.mm(w_o).view(packed[0].shape[0], -1, hidden)  # (B, Q, H)
    grad_q, grad_k, grad_v = packed_backward(grad_attended, packed, num_heads)
    grad_q, grad_k, grad_v = (g.reshape(-1, hidden) for g in (grad_q, grad_k, grad_v))  # rows
    grad_memory = grad_k.mm(w_k).addmm_(grad_v, w_v)  # (B * K, H)
    grad_weights = (
        grad_q.t().mm(queries),
        grad_k.t().mm(memory),
        grad_v.t().mm(memory),
        grad.t().mm(attended),
    )
    return grad_q.mm(w_q), grad_memory, grad_weights


class EncoderBlockFunction(torch.autograd.Function):
    """One post-norm encoder block: self-attention, add & norm, FFN, add & norm (book 11.7.4)."""

    @staticmethod
    def forward(
        ctx: Any,
        X: torch.Tensor,
        masks: Masks,
        keeps: tuple,
        num_heads: int,
        eps: float,
        *params: torch.Tensor,
    ) -> torch.Tensor:
        """X (B, S, H) -> (B, S, H); params: W_q, W_k, W_v, W_o, ln1 w, b, W1, b1, W2, b2, ln2 w, b."""
        batch, steps, hidden = X.shape
        attention, norm1, ffn, norm2 = params[:4], params[4:6], params[6:10], params[10:12]
        x = X.reshape(batch * steps, hidden)  # (N, H)
        attended, att_saved = _attention(
            x, x, attention, (batch, steps, steps, hidden), masks, keeps[0], num_heads
        )
        y, norm1_saved = _add_norm(x, attended, keeps[1], norm1, eps)  # (N, H)
        fed, relu_out = _ffn(y, *ffn)  # (N, H)
        z, norm2_saved = _add_norm(y, fed, keeps[2], norm2, eps)  # (N, H)
        ctx.save_for_backward(*params)
        ctx.saved = (x, att_saved, norm1_saved, y, relu_out, norm2_saved, keeps)
        ctx.num_heads = num_heads
        return z.view(batch, steps, hidden)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        """Gradients of X and of every parameter; none for masks, keeps, heads and eps."""
        params = ctx.saved_tensors
        attention, norm1, ffn, norm2 = params[:4], params[4:6], params[6:10], params[10:12]
        x, att_saved, norm1_saved, y, relu_out, norm2_saved, keeps = ctx.saved
        grad_y, grad_fed, *grad_norm2 = _add_norm_backward(
            grad.reshape(x.shape), norm2_saved, keeps[2], norm2
        )
        grad_y_ffn, *grad_ffn = _ffn_backward(grad_fed, y, relu_out, ffn[0], ffn[2])
        grad_x, grad_attended, *grad_norm1 = _add_norm_backward(
            grad_y + grad_y_ffn, norm1_saved, keeps[1], norm1
        )
        grad_q, grad_kv, grad_attention = _attention_backward(
            grad_attended, x, x, attention, att_saved, ctx.num_heads
        )
        grad_x = grad_x + grad_q + grad_kv  # (N, H)
        return (
            grad_x.view(grad.shape),
            None,
            None,
            None,
            None,
            *grad_attention,
            *grad_norm1,
            *grad_ffn,
            *grad_norm2,
        )


class DecoderBlockFunction(torch.autograd.Function):
    """One post-norm decoder block: causal self-attention, cross-attention and FFN, each with add & norm."""

    @staticmethod
    def forward(
        ctx: Any,
        X: torch.Tensor,
        memory: torch.Tensor,
        self_masks: Masks,
        src_masks: Masks,
        keeps: tuple,
        num_heads: int,
        eps: float,
        *params: torch.Tensor,
    ) -> torch.Tensor:
        """X (B, T, H), memory (B, S, H) -> (B, T, H); params: self-attention W_q, W_k, W_v, W_o,
        ln1 w, b, cross-attention W_q, W_k, W_v, W_o, ln2 w, b, W1, b1, W2, b2, ln3 w, b."""
        batch, steps, hidden = X.shape
        source_steps = memory.shape[1]
        attention1, norm1, attention2, norm2 = params[:4], params[4:6], params[6:10], params[10:12]
        ffn, norm3 = params[12:16], params[16:18]
        x = X.reshape(batch * steps, hidden)  # (N, H)
        mem = memory.reshape(batch * source_steps, hidden)  # (B * S, H)
        attended, att1_saved = _attention(
            x, x, attention1, (batch, steps, steps, hidden), self_masks, keeps[0], num_heads
        )
        y, norm1_saved = _add_norm(x, attended, keeps[1], norm1, eps)  # (N, H)
        attended, att2_saved = _attention(
            y, mem, attention2, (batch, steps, source_steps, hidden), src_masks, keeps[2], num_heads
        )
        z, norm2_saved = _add_norm(y, attended, keeps[3], norm2, eps)  # (N, H)
        fed, relu_out = _ffn(z, *ffn)  # (N, H)
        out, norm3_saved = _add_norm(z, fed, keeps[4], norm3, eps)  # (N, H)
        ctx.save_for_backward(*params)
        ctx.saved = (
            x,
            mem,
            att1_saved,
            norm1_saved,
            y,
            att2_saved,
            norm2_saved,
            z,
            relu_out,
            norm3_saved,
            keeps,
        )
        ctx.num_heads = num_heads
        return out.view(batch, steps, hidden)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        """Gradients of X, the memory and every parameter; none for masks, keeps, heads and eps."""
        params = ctx.saved_tensors
        attention1, norm1, attention2, norm2 = params[:4], params[4:6], params[6:10], params[10:12]
        ffn, norm3 = params[12:16], params[16:18]
        x, mem, att1_saved, norm1_saved, y, att2_saved, norm2_saved, z, relu_out, norm3_saved, keeps = (
            ctx.saved
        )
        heads = ctx.num_heads
        grad_z, grad_fed, *grad_norm3 = _add_norm_backward(
            grad.reshape(x.shape), norm3_saved, keeps[4], norm3
        )
        grad_z_ffn, *grad_ffn = _ffn_backward(grad_fed, z, relu_out, ffn[0], ffn[2])
        grad_y, grad_cross, *grad_norm2 = _add_norm_backward(
            grad_z + grad_z_ffn, norm2_saved, keeps[3], norm2
        )
        grad_y_q, grad_mem, grad_attention2 = _attention_backward(
            grad_cross, y, mem, attention2, att2_saved, heads
        )
        grad_x, grad_self, *grad_norm1 = _add_norm_backward(grad_y + grad_y_q, norm1_saved, keeps[1], norm1)
        grad_q, grad_kv, grad_attention1 = _attention_backward(grad_self, x, x, attention1, att1_saved, heads)
        grad_x = grad_x + grad_q + grad_kv  # (N, H)
        return (
            grad_x.view(grad.shape),
            grad_mem.view(grad.shape[0], -1, grad.shape[2]),
            None,
            None,
            None,
            None,
            None,
            *grad_attention1,
            *grad_norm1,
            *grad_attention2,
            *grad_norm2,
            *grad_ffn,
            *grad_norm3,
        )
