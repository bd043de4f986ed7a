"""The GPU path's loss: summed label-smoothed cross-entropy as one autograd node (`train.kernels: gpu`).

Shapes: M real target tokens, V target vocabulary. training/speed.py's GpuPath and
transformer_pass.py's `token_loss` call `smoothed_cross_entropy_sum`; tests prove it equal to
torch's cross-entropy in values and gradients (tests/test_gpu_transformer.py).
"""

from __future__ import annotations

import torch


class SmoothedCrossEntropySum(torch.autograd.Function):
    """Summed label-smoothed cross-entropy of logits (M, V) against targets (M,), as one autograd node.

    The same sum as F.cross_entropy(x.float(), target, reduction="sum", label_smoothing=eps), for a
    GPU: forward widens the logits to float32 for the log-sum-exp, the target's logit and the mean,
    and keeps only the logits (in their own dtype) and the (M,) log-sum-exps; backward builds the
    gradient softmax(x) - (1 - eps) one_hot - eps / V in float32 and returns it in the logits'
    dtype. Eager, each direction is several passes over (M, V) float32 values (the widening, the
    log-sum-exp, the mean; the softmax, the one-hot terms, the narrowing); only under torch.compile
    (train.compile) does each direction fuse into one or two kernels.
    """

    @staticmethod
    def forward(ctx, logits: torch.Tensor, target: torch.Tensor, smoothing: float) -> torch.Tensor:  # noqa: D102
        wide = logits.to(torch.promote_types(logits.dtype, torch.float32))  # (M, V)
        lse = torch.logsumexp(wide, dim=1)  # (M,)
        picked = wide.gather(1, target.unsqueeze(1)).squeeze(1)  # (M,)
        loss = lse - picked
        if smoothing:
            loss = loss + smoothing * (picked - wide.mean(dim=1))
        ctx.save_for_backward(logits, lse, target)
        ctx.smoothing = smoothing
        return loss.sum()

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> tuple[torch.Tensor, None, None]:  # noqa: D102
        logits, lse, target = ctx.saved_tensors
        eps = ctx.smoothing
        probs = (logits.to(lse.dtype) - lse.unsqueeze(1)).exp_()  # (M, V) softmax
        if eps:
            probs.sub_(eps / logits.shape[1])
        probs.scatter_add_(1, target.unsqueeze(1), probs.new_full((target.shape[0], 1), eps - 1.0))
        return (probs * grad.to(lse.dtype)).to(logits.dtype), None, None


def smoothed_cross_entropy_sum(
    logits: torch.Tensor, target: torch.Tensor, label_smoothing: float
) -> torch.Tensor:
    """Summed cross-entropy of `logits` (M, V) against `target` (M,), label-smoothed as torch's: float32."""
    return SmoothedCrossEntropySum.apply(logits, target, float(label_smoothing))
