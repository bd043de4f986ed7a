"""Lab panels of the book section "Attention Scoring Functions": the masked softmax, additive and scaled
dot-product attention on editable toy tensors, and what the 1/sqrt(d) scale does as the key size d grows.

Shapes: B batch, Q queries, K key-value pairs, q query size, k key size, d = q = k for dot products,
v value size, H the additive attention's hidden size.
"""

from __future__ import annotations

from typing import Any

import torch

from attn_mt.models.attention import (
    AttentionMask,
    masked_softmax,
    softmax_with_mask,
)
from attn_mt.serving.lab.inputs import LabError, tensor
from attn_mt.serving.lab.shown import answer, code, line_of, shown

DEFAULT_SCORES = (
    "[[[0.5, 0.1, 0.9, 0.3], [0.2, 0.8, 0.4, 0.6]], [[0.7, 0.3, 0.1, 0.5], [0.6, 0.2, 0.9, 0.4]]]"
)
DEFAULT_VALID_LENS = "[2, 3]"
DEFAULT_QUERIES = "[[[1, 0], [0, 2]]]"
DEFAULT_KEYS = "[[[1, 0], [0, 1], [1, 1], [-1, 0.5]]]"
DEFAULT_VALUES = "[[[1, 0], [0, 1], [2, 2], [0, -1]]]"
MAX_KEY_SIZE = 1024
KEY_SIZES = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)  # the sweep of the key-size plot
SWEEP_KEYS = 8  # keys per query in the key-size experiment
SWEEP_QUERIES = 64  # queries averaged over at each key size of the plot


def valid_lens_of(state: dict[str, Any], scores_shape: tuple[int, ...], default: str) -> torch.Tensor | None:
    """`valid_lens` as (B,) or (B, Q) whole numbers from 0 to K; None when the field is blank (no mask)."""
    if state.get("valid_lens", default) in ("", None):
        return None
    raw = tensor(state, "valid_lens", default, (1, 2))
    batch, queries, keys = scores_shape
    if raw.shape not in ((batch,), (batch, queries)):
        raise LabError(
            f"valid_lens: expected shape ({batch},) (one per batch element) or ({batch}, {queries}) "
            f"(one per query), got {tuple(raw.shape)}"
        )
    if not torch.equal(raw, raw.round()) or raw.min() < 0:
        raise LabError("valid_lens: expected whole numbers of valid keys, 0 or more")
    if raw.max() > keys:
        raise LabError(f"valid_lens: {int(raw.max())} is past the number of keys K = {keys}")
    return raw.long()


def blocked_keys(valid_lens: torch.Tensor | None, shape: tuple[int, ...]) -> torch.Tensor | None:
    """bool (B, Q, K): the keys the mask sets aside, the rows of queries without a valid key included."""
    if valid_lens is None:
        return None
    mask = AttentionMask.from_valid_lens(valid_lens, shape[1], shape[2])
    blocked = mask.blocked.expand(shape)  # (B, Q, K)
    return blocked if mask.empty is None else blocked | mask.empty.expand(shape)


def masked_softmax_panel(state: dict[str, Any]) -> dict[str, Any]:
    """Scores (B, Q, K) and valid_lens (B,) or (B, Q) -> the mask and the masked softmax's weights."""
    scores = tensor(state, "scores", DEFAULT_SCORES, (3,))  # (B, Q, K)
    valid_lens = valid_lens_of(state, tuple(scores.shape), DEFAULT_VALID_LENS)
    weights = masked_softmax(scores, valid_lens)  # (B, Q, K)
    blocked = blocked_keys(valid_lens, tuple(scores.shape))  # (B, Q, K) or None
    tensors = [shown("X (scores)", scores, ["B", "Q", "K"], mask=blocked)]
    if valid_lens is not None:
        tensors.append(
            shown("valid_lens", valid_lens.float(), ["B"] if valid_lens.dim() == 1 else ["B", "Q"])
        )
    tensors.append(shown("masked_softmax(X, valid_lens)", weights, ["B", "Q", "K"], mask=blocked))
    notes = [
        "Masked keys (struck through) are filled with -inf before the softmax, so they get weight exactly 0 "
        "and each row's weights over its valid keys sum to 1.",
        "1-D valid_lens give one length per batch element (its queries share it); 2-D give one per query.",
    ]
    if valid_lens is not None and bool((valid_lens == 0).any()):
        notes.append("A query with valid length 0 has no key to attend to: attn-mt gives it a row of zeros.")
    lines = [
        code(masked_softmax),
        code(AttentionMask.from_valid_lens, "AttentionMask.from_valid_lens"),
        line_of(softmax_with_mask, "masked_fill(mask.blocked", "softmax_with_mask"),
    ]
    return answer(tensors, lines, notes)
