"""Masked softmax cross-entropy over padded targets.

Shapes: B batch, T target steps, V target vocabulary.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def valid_mask(lengths: torch.Tensor, steps: int) -> torch.Tensor:
    """(B,) lengths -> (B, T) bool mask, True on the first lengths[b] steps."""
    return torch.arange(steps, device=lengths.device)[None, :] < lengths[:, None]  # (B, T)


def masked_cross_entropy(
    logits: torch.Tensor,
    target: torch.Tensor,
    target_lens: torch.Tensor,
    average: str = "book",
    label_smoothing: float = 0.0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Cross-entropy of `logits` (B, T, V) against `target` (B, T), ignoring steps past `target_lens`.

    Returns (objective, summed token loss). `average="book"` is the book's MaskedSoftmaxCELoss:
    each sentence's loss is averaged over all T steps (padding counting as zero), then summed over
    the batch. `average="token"` is the mean over real target tokens.
    """
    B, T, V = logits.shape
    per_token = F.cross_entropy(
        logits.reshape(B * T, V).float(),
        target.reshape(B * T),
        reduction="none",
        label_smoothing=label_smoothing,
    ).reshape(B, T)  # (B, T)
    per_token = per_token * valid_mask(target_lens, T)
    total = per_token.sum()
    if average == "book":
        return total / T, total
    return total / target_lens.sum().clamp(min=1), total
