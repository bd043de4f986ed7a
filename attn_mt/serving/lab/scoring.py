"""Lab panels of the book section "Attention Scoring Functions": the masked softmax, additive and scaled
dot-product attention on editable toy tensors, and what the 1/sqrt(d) scale does as the key size d grows.

Shapes: B batch, Q queries, K key-value pairs, q query size, k key size, d = q = k for dot products,
v value size, H the additive attention's hidden size.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from attn_mt.models.attention import (
    AdditiveAttention,
    AttentionMask,
    DotProductAttention,
    masked_softmax,
    softmax_with_mask,
)
from attn_mt.serving.lab.inputs import MAX_ELEMENTS, LabError, limit_elements, limit_work, tensor, whole
from attn_mt.serving.lab.shown import answer, code, line_of, plot, shown

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


def seeded_additive(key_size: int, query_size: int, num_hiddens: int, seed: int) -> AdditiveAttention:
    """AdditiveAttention(key_size, query_size, num_hiddens, dropout 0) as manual_seed(seed) starts it."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        attention = AdditiveAttention(key_size, query_size, num_hiddens, dropout=0.0)
    return attention.eval()


def dot_product_terms(queries: torch.Tensor, keys: torch.Tensor) -> list:
    """(B, Q, K) nested texts: each q . k written out as its products and their sum, for hovering."""
    terms = queries.unsqueeze(2) * keys.unsqueeze(1)  # (B, Q, K, d)
    return [
        [
            [
                " + ".join(f"{a:g}×{b:g}" for a, b in zip(q.tolist(), k.tolist(), strict=True))
                + f" = {t.sum():g}"
                for k, t in zip(batch_keys, row_terms, strict=True)
            ]
            for q, row_terms in zip(batch_queries, batch_terms, strict=True)
        ]
        for batch_queries, batch_keys, batch_terms in zip(queries, keys, terms, strict=True)
    ]


def scoring_panel(state: dict[str, Any]) -> dict[str, Any]:
    """Toy queries, keys and values -> additive and scaled dot-product weights side by side, and Q K^T."""
    queries = tensor(state, "queries", DEFAULT_QUERIES, (3,))  # (B, Q, q)
    keys = tensor(state, "keys", DEFAULT_KEYS, (3,))  # (B, K, k)
    values = tensor(state, "values", DEFAULT_VALUES, (3,))  # (B, K, v)
    hiddens = whole(state, "num_hiddens", 8, 1, 64)
    seed = whole(state, "seed", 0, 0, 2**31 - 1)
    if queries.shape[0] != keys.shape[0] or keys.shape[:2] != values.shape[:2]:
        raise LabError(
            f"queries {tuple(queries.shape)}, keys {tuple(keys.shape)} and values {tuple(values.shape)} "
            "must share the batch size B, and keys and values the number of pairs K"
        )
    batch, num_queries, num_keys = queries.shape[0], queries.shape[1], keys.shape[1]
    limit_elements("the attention weights (B, Q, K)", batch, num_queries, num_keys)
    limit_elements("the outputs (B, Q, v)", batch, num_queries, values.shape[2])
    limit_work("additive attention's features (B, Q, K, H)", batch, num_queries, num_keys, hiddens)
    valid_lens = valid_lens_of(state, (queries.shape[0], queries.shape[1], keys.shape[1]), "")
    blocked = blocked_keys(valid_lens, (queries.shape[0], queries.shape[1], keys.shape[1]))
    additive = seeded_additive(keys.shape[2], queries.shape[2], hiddens, seed)
    with torch.no_grad():
        additive_output = additive(queries, keys, values, valid_lens)  # (B, Q, v)
    tensors = [
        shown("queries", queries, ["B", "Q", "q"]),
        shown("keys", keys, ["B", "K", "k"]),
        shown("values", values, ["B", "K", "v"]),
        shown("additive: attention_weights", additive.attention_weights, ["B", "Q", "K"], mask=blocked),
    ]
    lines = [
        line_of(AdditiveAttention.attend, "torch.tanh(self.W_q(queries)", "AdditiveAttention.attend"),
        line_of(AdditiveAttention.attend, "scores = self.w_v", "AdditiveAttention.attend"),
    ]
    notes = [
        f"Additive attention learns W_q (q -> {hiddens}), W_k (k -> {hiddens}) and w_v; here they hold "
        f"torch's initial values after manual_seed({seed}), so queries and keys may have different sizes.",
    ]
    if queries.shape[2] == keys.shape[2]:
        dot = DotProductAttention(dropout=0.0).eval()
        with torch.no_grad():
            dot_output = dot(queries, keys, values, valid_lens)  # (B, Q, v)
        products = torch.matmul(queries, keys.transpose(1, 2))  # (B, Q, K)
        written = batch * num_queries * num_keys * queries.shape[2] <= MAX_ELEMENTS  # products to write out
        tensors += [
            shown(
                "scaled dot-product: attention_weights", dot.attention_weights, ["B", "Q", "K"], mask=blocked
            ),
            shown(
                "Q Kᵀ",
                products,
                ["B", "Q", "K"],
                hover=dot_product_terms(queries, keys) if written else None,
                note="Point at a cell to see its dot product written out."
                if written
                else f"Over {MAX_ELEMENTS} products in all: not written out on hover.",
            ),
            shown("Q Kᵀ / √d", products / math.sqrt(queries.shape[2]), ["B", "Q", "K"], mask=blocked),
            shown("additive: output", additive_output, ["B", "Q", "v"]),
            shown("scaled dot-product: output", dot_output, ["B", "Q", "v"]),
        ]
        lines.append(
            line_of(
                DotProductAttention.attend,
                "torch.matmul(queries, keys.transpose",
                "DotProductAttention.attend",
            )
        )
        notes.append(
            "Each output row is the attention-weighted average of the values: "
            "weights (B, Q, K) times values (B, K, v)."
        )
    else:
        tensors.append(shown("additive: output", additive_output, ["B", "Q", "v"]))
        notes.append(
            f"Scaled dot-product attention needs queries and keys of one size d; these are "
            f"q = {queries.shape[2]} and k = {keys.shape[2]}, so only additive attention applies."
        )
    return answer(tensors, lines, notes)


def key_size_panel(state: dict[str, Any]) -> dict[str, Any]:
    """One random query over 8 random keys of size d, with or without the 1/sqrt(d) scale, and the spread
    of the scores and the largest weight as d goes from 1 to 1024, both ways."""
    d = whole(state, "d", 64, 1, MAX_KEY_SIZE)
    seed = whole(state, "seed", 0, 0, 2**31 - 1)
    scaled = str(state.get("scaled", "true")).lower() != "false"
    generator = torch.Generator().manual_seed(seed)
    queries = torch.randn(1, 1, d, generator=generator)  # (1, 1, d)
    keys = torch.randn(1, SWEEP_KEYS, d, generator=generator)  # (1, K, d)
    values = torch.arange(SWEEP_KEYS, dtype=torch.float32).reshape(1, SWEEP_KEYS, 1)  # (1, K, 1)
    factor = 1.0 if scaled else math.sqrt(d)  # unscaled: the same function on queries times sqrt(d)
    attention = DotProductAttention(dropout=0.0).eval()
    with torch.no_grad():
        output = attention(queries * factor, keys, values)  # (1, 1, 1)
    weights = attention.attention_weights  # (1, 1, K)
    scores = torch.matmul(queries * factor, keys.transpose(1, 2)) / math.sqrt(d)  # (1, 1, K)
    series: dict[str, list[float]] = {}
    sweep = torch.Generator().manual_seed(seed)
    for size in KEY_SIZES:
        q = torch.randn(SWEEP_QUERIES, 1, size, generator=sweep)  # (N, 1, d)
        k = torch.randn(SWEEP_QUERIES, SWEEP_KEYS, size, generator=sweep)  # (N, K, d)
        v = torch.zeros(SWEEP_QUERIES, SWEEP_KEYS, 1)  # (N, K, 1)
        for name, times in (("with √d", 1.0), ("without √d", math.sqrt(size))):
            with torch.no_grad():
                attention(q * times, k, v)
            raw = torch.matmul(q * times, k.transpose(1, 2)) / math.sqrt(size)  # (N, 1, K)
            series.setdefault(f"std of scores {name}", []).append(float(raw.std()))
            series.setdefault(f"largest weight {name}", []).append(
                float(attention.attention_weights.amax(-1).mean())
            )
    sizes = [math.log2(size) for size in KEY_SIZES]
    plots = [
        plot(
            "spread of the scores", "log2 d", "std", [(n, sizes, y) for n, y in series.items() if "std" in n]
        ),
        plot(
            "largest weight of 8 keys (mean)",
            "log2 d",
            "weight",
            [(n, sizes, y) for n, y in series.items() if "largest" in n],
        ),
    ]
    name = "q kᵀ / √d" if scaled else "q kᵀ (no scale)"
    tensors = [
        shown(f"scores {name}", scores, ["B", "Q", "K"]),
        shown("attention_weights", weights, ["B", "Q", "K"]),
        shown("output: weighted mean of the values 0..7", output, ["B", "Q", "v"]),
    ]
    notes = [
        f"q and the 8 keys have d = {d} entries drawn from N(0, 1), so q · k has variance d. "
        + (
            "Dividing by √d brings the scores back to unit variance whatever d is."
            if scaled
            else "Without the scale the scores spread like √d: the softmax puts nearly all weight on one "
            "key, and its gradients vanish."
        ),
    ]
    lines = [
        line_of(
            DotProductAttention.attend, "torch.matmul(queries, keys.transpose", "DotProductAttention.attend"
        )
    ]
    return answer(tensors, lines, notes, plots)
