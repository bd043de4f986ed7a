"""The training loss on the CPU: torch.nn.functional.cross_entropy (training/loss.py) made cheaper.

Shapes: B batch, T target steps, H hidden, V target vocabulary, N = B * T token positions,
M real target tokens.
- `TokenCrossEntropy` reads the (N, V) logits once forward and once backward, chunk by chunk,
  where log_softmax + nll_loss + the smoothing term stream the whole tensor through memory about a
  dozen times. The logits are the largest tensor of a training step, so on a big vocabulary this
  is a large share of the step.
- `LinearCrossEntropy` scores the output layer's inputs chunk by chunk and never holds the logits.
- `CpuLoss` picks between them and torch's own kernel by the size of a batch's logits.
Tests prove each equal to torch's cross-entropy in values and gradients.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from attn_mt.data.batch import Batch


class TokenCrossEntropy(torch.autograd.Function):
    """Per-row cross-entropy of logits (N, V) against targets (N,), label-smoothed as torch's.

    loss = (1 - eps) * (lse - x[target]) + eps * (lse - mean(x)), with lse = logsumexp(x); this
    equals F.cross_entropy(x, target, reduction="none", label_smoothing=eps). Rows are processed
    in chunks of about a megabyte, so each chunk's passes (cast, exponent, scale) run in cache
    instead of streaming the whole (N, V) tensor through memory once per pass. Half-precision
    logits are computed in float32; the gradient is returned in the logits' dtype.
    """

    @staticmethod
    def forward(ctx, logits: torch.Tensor, target: torch.Tensor, smoothing: float) -> torch.Tensor:  # noqa: D102
        dtype = torch.promote_types(logits.dtype, torch.float32)
        rows = row_chunk(logits.shape[1])
        lse = logits.new_empty(logits.shape[0], dtype=dtype)  # (N,)
        mean = logits.new_empty(logits.shape[0], dtype=dtype) if smoothing else None  # (N,)
        for start in range(0, logits.shape[0], rows):
            chunk = logits[start : start + rows].to(dtype)  # (n, V)
            torch.logsumexp(chunk, dim=1, out=lse[start : start + rows])
            if mean is not None:
                torch.mean(chunk, dim=1, out=mean[start : start + rows])
        picked = logits.gather(1, target.unsqueeze(1)).squeeze(1).to(dtype)  # (N,)
        loss = lse - picked
        if mean is not None:
            loss = loss + smoothing * (picked - mean)
        ctx.save_for_backward(logits, lse, target)
        ctx.smoothing = smoothing
        return loss

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> tuple[torch.Tensor, None, None]:  # noqa: D102
        logits, lse, target = ctx.saved_tensors
        eps, vocab = ctx.smoothing, logits.shape[1]
        weight = grad.to(lse.dtype).unsqueeze(1)  # (N, 1)
        grad_logits = torch.empty_like(logits)  # (N, V)
        rows = row_chunk(vocab)
        for start in range(0, logits.shape[0], rows):
            part = slice(start, start + rows)
            probs = torch.sub(logits[part].to(lse.dtype), lse[part].unsqueeze(1)).exp_()  # (n, V) softmax
            if eps:
                probs.sub_(eps / vocab)
            probs.mul_(weight[part])
            probs.scatter_add_(1, target[part].unsqueeze(1), weight[part] * -(1.0 - eps))
            grad_logits[part] = probs
        return grad_logits, None, None


def row_chunk(vocab_size: int, chunk_bytes: int = 1 << 20) -> int:
    """Rows of a (N, vocab_size) float32 tensor that fit in about `chunk_bytes`."""
    return max(1, chunk_bytes // (4 * vocab_size))


def token_cross_entropy(
    logits: torch.Tensor, target: torch.Tensor, label_smoothing: float = 0.0
) -> torch.Tensor:
    """Cross-entropy per row of `logits` (N, V) against `target` (N,): (N,), float32 or wider.

    On the CPU, float32 logits without smoothing go to torch's own kernel, the faster one there; the
    chunked function serves label smoothing and half-precision logits. Other devices use torch's.
    """
    if logits.device.type != "cpu":
        return F.cross_entropy(logits.float(), target, reduction="none", label_smoothing=label_smoothing)
    if not label_smoothing and logits.dtype in (torch.float32, torch.float64):
        return F.cross_entropy(logits, target, reduction="none")
    return TokenCrossEntropy.apply(logits, target, float(label_smoothing))


class LinearCrossEntropy(torch.autograd.Function):
    """Summed cross-entropy of the output layer X W^T + b against targets, never holding all logits.

    Forward walks the rows in chunks; each chunk's logits (n, V) give its losses and, at once, the
    gradients of the summed loss with respect to X, W and b, which backward only scales by the
    incoming scalar. So the (N, V) logits and their gradient, the largest tensors of a training
    step on a big vocabulary, are never allocated: memory stays at one chunk whatever the batch,
    and no batch-sized block is left behind to fragment the heap. Matrix products run in
    `compute_dtype` (bfloat16 under autocast), the softmax and the sums in float32 or wider.
    """

    @staticmethod
    def forward(  # noqa: D102
        ctx,
        X: torch.Tensor,
        weight: torch.Tensor,
        bias: torch.Tensor | None,
        target: torch.Tensor,
        smoothing: float,
        compute_dtype: torch.dtype,
        chunk_rows: int,
    ) -> torch.Tensor:
        acc = torch.promote_types(X.dtype, torch.float32)
        vocab = weight.shape[0]
        with torch.autocast(X.device.type, enabled=False):
            W = weight.detach().to(compute_dtype)  # (V, H)
            b = bias.detach().to(compute_dtype) if bias is not None else None  # (V,)
            Xc = X.detach().to(compute_dtype)  # (N, H)
            grad_X = torch.empty(X.shape, dtype=acc, device=X.device)  # (N, H)
            grad_W = torch.zeros(weight.shape, dtype=acc, device=X.device)  # (V, H)
            grad_b = torch.zeros(vocab, dtype=acc, device=X.device) if bias is not None else None  # (V,)
            total = torch.zeros((), dtype=acc, device=X.device)
            for start in range(0, X.shape[0], chunk_rows):
                part = slice(start, start + chunk_rows)
                x, t = Xc[part], target[part].unsqueeze(1)  # (n, H), (n, 1)
                logits = (torch.addmm(b, x, W.t()) if b is not None else x @ W.t()).to(acc)  # (n, V)
                lse = torch.logsumexp(logits, dim=1, keepdim=True)  # (n, 1)
                picked = logits.gather(1, t)  # (n, 1)
                loss = lse - picked
                if smoothing:
                    loss = loss + smoothing * (picked - logits.mean(dim=1, keepdim=True))
                total += loss.sum()
                grad = logits.sub_(lse).exp_()  # (n, V) softmax, in place of the logits
                if smoothing:
                    grad.sub_(smoothing / vocab)
                grad.scatter_add_(1, t, grad.new_full(t.shape, smoothing - 1.0))
                if grad_b is not None:
                    grad_b += grad.sum(dim=0)
                g = grad.to(compute_dtype)
                grad_X[part] = g @ W
                grad_W += g.t() @ x
        ctx.save_for_backward(grad_X, grad_W, grad_b)
        ctx.dtypes = (X.dtype, weight.dtype, None if bias is None else bias.dtype)
        return total

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> tuple[torch.Tensor | None, ...]:  # noqa: D102
        grad_X, grad_W, grad_b = ctx.saved_tensors
        x_dtype, w_dtype, b_dtype = ctx.dtypes
        scale = grad.to(grad_X.dtype)
        return (
            (grad_X * scale).to(x_dtype),
            (grad_W * scale).to(w_dtype),
            None if grad_b is None else (grad_b * scale).to(b_dtype),
            None,
            None,
            None,
            None,
        )


def linear_chunk(vocab_size: int, chunk_bytes: int = 8 << 20) -> int:
    """Rows of float32 logits (n, vocab_size) in about `chunk_bytes`, at least 64 for the products."""
    return max(64, chunk_bytes // (4 * vocab_size))


class CpuLoss:
    """Summed cross-entropy of a batch's real target tokens, computed the way that is fastest on the CPU.

    Batches whose float32 logits would reach `min_logits_bytes` are scored through the output layer
    chunk by chunk (LinearCrossEntropy), in the autocast dtype when autocast is on, as the layer's
    own forward would be; that calls the model's `encode` and `decode_features` rather than its
    forward, so it is for a single process only (DDP synchronises gradients through the forward).
    Smaller batches are scored through their logits (`token_cross_entropy`): at the book's sizes
    (64 x 10 x ~200) the chunked loss's extra steps cost more than the logits they avoid.
    """

    min_logits_bytes = 8 << 20

    def __init__(self, through_output_layer: bool):
        self.through_output_layer = through_output_layer

    def __call__(
        self, net: nn.Module, batch: Batch, tgt_in: torch.Tensor, label_smoothing: float
    ) -> torch.Tensor:
        """`net`'s teacher-forced cross-entropy of `batch.tgt` (B, T) from `tgt_in` (B, T), summed."""
        B, T = batch.tgt.shape
        keep = torch.arange(T, device=batch.tgt.device)[None, :] < batch.tgt_lens[:, None]  # (B, T)
        big = self.through_output_layer and 4 * B * T * net.output_layer.out_features >= self.min_logits_bytes
        if big:  # float32 logits of at least min_logits_bytes
            hidden = net.decode_features(tgt_in, net.encode(batch.src, batch.src_lens))  # (B, T, H)
            return output_layer_loss(hidden[keep], net.output_layer, batch.tgt[keep], label_smoothing)
        logits = net(batch.src, batch.src_lens, tgt_in)  # (B, T, V)
        per_token = token_cross_entropy(logits.reshape(B * T, -1), batch.tgt.reshape(B * T), label_smoothing)
        return (per_token.reshape(B, T) * keep).sum()


def output_layer_loss(
    hidden: torch.Tensor, output_layer: nn.Linear, target: torch.Tensor, label_smoothing: float
) -> torch.Tensor:
    """Summed cross-entropy of `output_layer(hidden)` (M, V) against `target` (M,), without the logits.

    The products run in the autocast dtype when autocast is on, as the layer's own forward would.
    """
    kind = hidden.device.type
    compute = torch.get_autocast_dtype(kind) if torch.is_autocast_enabled(kind) else hidden.dtype
    return LinearCrossEntropy.apply(
        hidden,  # (M, H)
        output_layer.weight,
        output_layer.bias,
        target,  # (M,)
        float(label_smoothing),
        compute,
        linear_chunk(output_layer.weight.shape[0]),
    )
