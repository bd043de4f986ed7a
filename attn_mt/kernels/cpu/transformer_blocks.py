"""Transformer encoder and decoder blocks for CPU training, each as one autograd function.

Replaces: EncoderBlock.forward and DecoderBlock.forward (models/transformer.py) in training.
Shapes: B batch, S source steps, T target steps, H hidden, F feed-forward hidden, h heads,
N = B * S (or B * T) rows, K keys, Q queries.
At the book's sizes (H = 32, a few steps) a block's ~25 small kernels cost less than the autograd
bookkeeping around them: a node recorded per op in the forward, a node visited per op in the
backward, views and copies for splitting heads. Here a block's forward runs unrecorded and keeps
what its hand-written backward needs, so autograd sees one node per block. The maths is the
module path's (transformer.py: post-norm blocks, LayerNorm(X + dropout(sublayer(X))), book section
11.7) with packed_attention's multi-head attention. `encoder_block` and `decoder_block` take the
book's block, read its parameters by name and draw the dropout masks in the order and shapes of
its forward (kernels/cpu/dropout.py), so both give the same numbers from the same seed.
The parameters are saved with save_for_backward; the intermediates, nested per sublayer, are kept
on the context for the one backward a training step makes.
"""

from __future__ import annotations

from typing import Any

import torch

from attn_mt.kernels.cpu.dropout import draw_keep_masks
from attn_mt.kernels.cpu.packed_attention import Masks, PackedSaved, packed_backward, packed_forward
from attn_mt.models.attention import MultiHeadAttention
from attn_mt.models.transformer import AddNorm, DecoderBlock, EncoderBlock, PositionWiseFFN


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


def _attention_sublayer(
    x: torch.Tensor,
    memory: torch.Tensor,
    params: tuple,
    shape: tuple[int, int, int, int],
    masks: Masks,
    keeps: tuple,
    num_heads: int,
    eps: float,
) -> tuple[torch.Tensor, tuple]:
    """LayerNorm(x + dropout(attention(x, memory))) on rows (B * Q, H); params W_q, W_k, W_v, W_o, ln w, b."""
    attended, attention_saved = _attention(x, memory, params[:4], shape, masks, keeps[0], num_heads)
    out, norm_saved = _add_norm(x, attended, keeps[1], params[4:], eps)  # (B * Q, H)
    return out, (attention_saved, norm_saved)


def _attention_sublayer_backward(
    grad: torch.Tensor,
    x: torch.Tensor,
    memory: torch.Tensor,
    params: tuple,
    saved: tuple,
    keeps: tuple,
    num_heads: int,
) -> tuple[torch.Tensor, torch.Tensor, list[torch.Tensor]]:
    """Gradients of the query rows, the memory rows and the sublayer's six parameters."""
    grad_x, grad_attended, *grad_norm = _add_norm_backward(grad, saved[1], keeps[1], params[4:])
    grad_q, grad_memory, grad_attention = _attention_backward(
        grad_attended, x, memory, params[:4], saved[0], num_heads
    )
    return grad_x + grad_q, grad_memory, [*grad_attention, *grad_norm]


def _ffn_sublayer(
    x: torch.Tensor, params: tuple, keep: torch.Tensor | None, eps: float
) -> tuple[torch.Tensor, tuple]:
    """LayerNorm(x + dropout(FFN(x))) on rows (N, H); params W1, b1, W2, b2, ln w, b."""
    fed, hidden = _ffn(x, *params[:4])  # (N, H), (N, F)
    out, norm_saved = _add_norm(x, fed, keep, params[4:], eps)  # (N, H)
    return out, (hidden, norm_saved)


def _ffn_sublayer_backward(
    grad: torch.Tensor, x: torch.Tensor, params: tuple, saved: tuple, keep: torch.Tensor | None
) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """Gradients of the input rows and the sublayer's six parameters."""
    grad_x, grad_fed, *grad_norm = _add_norm_backward(grad, saved[1], keep, params[4:])
    grad_x_ffn, *grad_ffn = _ffn_backward(grad_fed, x, saved[0], params[0], params[2])
    return grad_x + grad_x_ffn, [*grad_ffn, *grad_norm]


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
        x = X.reshape(batch * steps, hidden)  # (N, H)
        y, attention_saved = _attention_sublayer(
            x, x, params[:6], (batch, steps, steps, hidden), masks, keeps[:2], num_heads, eps
        )  # (N, H)
        z, ffn_saved = _ffn_sublayer(y, params[6:], keeps[2], eps)  # (N, H)
        ctx.save_for_backward(*params)
        ctx.saved = (x, y, attention_saved, ffn_saved, keeps)
        ctx.num_heads = num_heads
        return z.view(batch, steps, hidden)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        """Gradients of X and of every parameter; none for masks, keeps, heads and eps."""
        params = ctx.saved_tensors
        x, y, attention_saved, ffn_saved, keeps = ctx.saved
        grad_y, grad_ffn = _ffn_sublayer_backward(grad.reshape(x.shape), y, params[6:], ffn_saved, keeps[2])
        grad_x, grad_kv, grad_attention = _attention_sublayer_backward(
            grad_y, x, x, params[:6], attention_saved, keeps[:2], ctx.num_heads
        )
        grad_X = (grad_x + grad_kv).view(grad.shape)  # (B, S, H)
        return grad_X, None, None, None, None, *grad_attention, *grad_ffn


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
        """X (B, T, H), memory (B, S, H) -> (B, T, H).

        params: self-attention W_q, W_k, W_v, W_o, ln1 w, b; cross-attention W_q, W_k, W_v, W_o,
        ln2 w, b; W1, b1, W2, b2, ln3 w, b.
        """
        batch, steps, hidden = X.shape
        source_steps = memory.shape[1]
        x = X.reshape(batch * steps, hidden)  # (N, H)
        mem = memory.reshape(batch * source_steps, hidden)  # (B * S, H)
        y, self_saved = _attention_sublayer(
            x, x, params[:6], (batch, steps, steps, hidden), self_masks, keeps[:2], num_heads, eps
        )  # (N, H)
        z, cross_saved = _attention_sublayer(
            y, mem, params[6:12], (batch, steps, source_steps, hidden), src_masks, keeps[2:4], num_heads, eps
        )  # (N, H)
        out, ffn_saved = _ffn_sublayer(z, params[12:], keeps[4], eps)  # (N, H)
        ctx.save_for_backward(*params)
        ctx.saved = (x, mem, y, z, self_saved, cross_saved, ffn_saved, keeps)
        ctx.num_heads = num_heads
        return out.view(batch, steps, hidden)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        """Gradients of X, the memory and every parameter; none for masks, keeps, heads and eps."""
        params = ctx.saved_tensors
        x, mem, y, z, self_saved, cross_saved, ffn_saved, keeps = ctx.saved
        heads = ctx.num_heads
        grad_z, grad_ffn = _ffn_sublayer_backward(grad.reshape(x.shape), z, params[12:], ffn_saved, keeps[4])
        grad_y, grad_mem, grad_cross = _attention_sublayer_backward(
            grad_z, y, mem, params[6:12], cross_saved, keeps[2:4], heads
        )
        grad_x, grad_kv, grad_self = _attention_sublayer_backward(
            grad_y, x, x, params[:6], self_saved, keeps[:2], heads
        )
        grad_X = (grad_x + grad_kv).view(grad.shape)  # (B, T, H)
        grad_memory = grad_mem.view(grad.shape[0], -1, grad.shape[2])  # (B, S, H)
        return grad_X, grad_memory, None, None, None, None, None, *grad_self, *grad_cross, *grad_ffn


def _attention_params(attention: MultiHeadAttention) -> list[torch.Tensor]:
    """W_q, W_k, W_v, W_o of a bias-free multi-head attention."""
    return [attention.W_q.weight, attention.W_k.weight, attention.W_v.weight, attention.W_o.weight]


def _norm_params(addnorm: AddNorm) -> list[torch.Tensor]:
    """The layer norm's weight and bias."""
    return [addnorm.ln.weight, addnorm.ln.bias]


def _ffn_params(ffn: PositionWiseFFN) -> list[torch.Tensor]:
    """W1, b1, W2, b2."""
    return [ffn.dense1.weight, ffn.dense1.bias, ffn.dense2.weight, ffn.dense2.bias]


def encoder_block_params(block: EncoderBlock) -> list[torch.Tensor]:
    """The parameters EncoderBlockFunction takes, by name: attention, addnorm1, ffn, addnorm2."""
    return [
        *_attention_params(block.attention),
        *_norm_params(block.addnorm1),
        *_ffn_params(block.ffn),
        *_norm_params(block.addnorm2),
    ]


def decoder_block_params(block: DecoderBlock) -> list[torch.Tensor]:
    """The parameters, by name: attention1, addnorm1, attention2, addnorm2, ffn, addnorm3."""
    return [
        *_attention_params(block.attention1),
        *_norm_params(block.addnorm1),
        *_attention_params(block.attention2),
        *_norm_params(block.addnorm2),
        *_ffn_params(block.ffn),
        *_norm_params(block.addnorm3),
    ]


def _attention_keep(
    attention: MultiHeadAttention, batch: int, queries: int, keys: int, like: torch.Tensor, training: bool
) -> torch.Tensor | None:
    """The weights' dropout mask as the book draws it, (B, h, Q, K), seen keys first as (B, K, Q, h)."""
    if not training:
        return None
    keep = draw_keep_masks((batch, attention.num_heads, queries, keys), attention.attention.dropout.p, like)
    return None if keep is None else keep.permute(0, 3, 2, 1).contiguous()  # (B, K, Q, h)


def _norm_keep(addnorm: AddNorm, like: torch.Tensor, training: bool) -> torch.Tensor | None:
    """AddNorm's dropout mask on the sublayer output, shaped as `like` (B, N, H)."""
    return draw_keep_masks(like.shape, addnorm.dropout.p, like) if training else None


def encoder_block(block: EncoderBlock, X: torch.Tensor, masks: Masks) -> torch.Tensor:
    """`block`'s forward as one autograd function: X (B, S, H) -> (B, S, H); masks keys-first."""
    batch, steps, _ = X.shape
    training = block.training
    keeps = (
        _attention_keep(block.attention, batch, steps, steps, X, training),
        _norm_keep(block.addnorm1, X, training),
        _norm_keep(block.addnorm2, X, training),
    )
    heads, eps = block.attention.num_heads, block.addnorm1.ln.eps
    return EncoderBlockFunction.apply(X, masks, keeps, heads, eps, *encoder_block_params(block))


def decoder_block(
    block: DecoderBlock, X: torch.Tensor, memory: torch.Tensor, self_masks: Masks, src_masks: Masks
) -> torch.Tensor:
    """`block`'s teacher-forced forward as one autograd function: X (B, T, H), memory (B, S, H) -> (B, T, H).

    The cross-attention keys and values are projected from `memory` inside; masks are keys-first.
    """
    batch, steps, _ = X.shape
    training = block.training
    keeps = (
        _attention_keep(block.attention1, batch, steps, steps, X, training),
        _norm_keep(block.addnorm1, X, training),
        _attention_keep(block.attention2, batch, steps, memory.shape[1], X, training),
        _norm_keep(block.addnorm2, X, training),
        _norm_keep(block.addnorm3, X, training),
    )
    heads, eps = block.attention1.num_heads, block.addnorm1.ln.eps
    return DecoderBlockFunction.apply(
        X, memory, self_masks, src_masks, keeps, heads, eps, *decoder_block_params(block)
    )
