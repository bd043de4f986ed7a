"""The book's masked softmax cross-entropy over padded targets (MaskedSoftmaxCELoss, section 10.7).

Shapes: B batch, T target steps, V target vocabulary.
torch's own cross-entropy, with optional label smoothing; `train.kernels: cpu` computes the same
sums with kernels/cpu/chunked_loss.py.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def masked_cross_entropy(
    logits: torch.Tensor, target: torch.Tensor, target_lens: torch.Tensor, label_smoothing: float = 0.0
) -> torch.Tensor:
    """Cross-entropy of `logits` (B, T, V) against `target` (B, T), summed over the real target steps.

    Float32 or wider: half-precision logits are scored in float32. How the sum is averaged (the
    book's per-sentence mean over the padded width, or a mean over real tokens) is the caller's.
    """
    B, T, V = logits.shape
    keep = torch.arange(T, device=target.device)[None, :] < target_lens[:, None]  # (B, T)
    scored = logits.to(torch.promote_types(logits.dtype, torch.float32))  # (B, T, V)
    per_token = F.cross_entropy(
        scored.reshape(B * T, V), target.reshape(B * T), reduction="none", label_smoothing=label_smoothing
    )  # (B * T,)
    return (per_token.reshape(B, T) * keep).sum()
