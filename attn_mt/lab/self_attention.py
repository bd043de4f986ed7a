"""Lab panel of the book section "Self-Attention and Positional Encoding": self-attention on a toy
sentence, with made-up embeddings, and what happens to word order with and without positions.

Each word of a made-up vocabulary gets an embedding drawn from a seed of its own (the same word, the
same vector), X (n, d). Self-attention takes X as queries, keys and values: every token attends to
every token. The panel runs it on the sentence and on the same words in another order (the learner's
second sentence), with and without the sinusoidal positional encoding added, and compares each word's
output between the two orders.

Shapes: n tokens, d dimensions.
"""

from __future__ import annotations

import zlib
from typing import Any

import torch

from attn_mt.i18n import _
from attn_mt.lab.inputs import LabError, text, whole
from attn_mt.lab.shown import answer, code, number, shown
from attn_mt.models.attention import DotProductAttention
from attn_mt.models.positional import sinusoid_table

MAX_WORDS = 16


def embedding(word: str, d: int, seed: int) -> torch.Tensor:
    """A made-up embedding (d,) for `word`, the same every time for the same word and seed."""
    generator = torch.Generator().manual_seed(seed * 1_000_003 + zlib.crc32(word.encode("utf-8")))
    return torch.randn(d, generator=generator)


def where_moved(first: list[str], second: list[str]) -> list[int]:
    """For each word of `first`, where it stands in `second` (the same words in another order; a word
    met twice takes its places in turn)."""
    unused = list(range(len(second)))
    moved = []
    for word in first:
        j = next(j for j in unused if second[j] == word)
        unused.remove(j)
        moved.append(j)
    return moved


def self_attend(X: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """X (n, d) as queries, keys and values -> outputs (n, d) and weights (n, n)."""
    attention = DotProductAttention(dropout=0.0).eval()
    with torch.no_grad():
        output = attention(X.unsqueeze(0), X.unsqueeze(0), X.unsqueeze(0))  # (1, n, d)
    return output[0], attention.attention_weights[0]


def words_of(state: dict[str, Any], key: str, default: str) -> list[str]:
    """The sentence `key` as lower-case words, at most MAX_WORDS."""
    words = text(state, key, default, 300).lower().split()
    if not words:
        raise LabError(_("{key}: type a sentence").format(key=key))
    if len(words) > MAX_WORDS:
        raise LabError(
            _("{key}: at most {limit} words, got {count}").format(key=key, limit=MAX_WORDS, count=len(words))
        )
    return words


def self_attention_panel(state: dict[str, Any]) -> dict[str, Any]:
    """A toy sentence's self-attention weights and outputs, with or without positions, and how each
    word's output differs in a second order of the same words."""
    first = words_of(state, "sentence", "the dog bit the man")
    second = words_of(state, "reordered", "the man bit the dog")
    if sorted(first) != sorted(second):
        raise LabError(_("reordered: use the same words as the sentence, in another order"))
    d = whole(state, "d", 8, 2, 64)
    if d % 2:
        raise LabError(
            _("d: the positional encoding pairs sines with cosines, so d must be even, got {value}").format(
                value=d
            )
        )
    seed = whole(state, "seed", 0, 0, 2**31 - 1)
    positions = str(state.get("positions", "false")).lower() == "true"
    moved = where_moved(first, second)
    gaps = []
    for with_positions in (False, True):
        outputs = []
        for words in (first, second):
            X = torch.stack([embedding(w, d, seed) for w in words])  # (n, d)
            if with_positions:
                X = X + sinusoid_table(len(words), d)  # (n, d)
            outputs.append(self_attend(X))
        gaps.append(float((outputs[0][0] - outputs[1][0][moved]).abs().max()))
        if with_positions == positions:
            (out1, weights1), (out2, weights2) = outputs
    n = len(first)
    tensors = [
        shown(
            _("self-attention weights, first order"),
            weights1,
            ["Q", "K"],
            rows=first,
            columns=first,
            tokens=True,
        ),
        shown(
            _("self-attention weights, second order"),
            weights2,
            ["Q", "K"],
            rows=second,
            columns=second,
            tokens=True,
        ),
        shown(_("outputs, first order"), out1, ["N", "d"], rows=first, tokens=True),
        shown(
            _("outputs, second order, rows put back in the first order"),
            out2[moved],
            ["N", "d"],
            rows=first,
            tokens=True,
        ),
        shown(
            _("largest difference of a word's output between the two orders"),
            torch.tensor(gaps, dtype=torch.float64),
            ["encoding"],
            columns=[_("no positions"), _("sinusoidal positions added")],
            scale="sequential",
        ),
    ]
    notes = [
        _(
            "Self-attention: the {n} tokens' made-up embeddings X ({n}, {d}) are the queries, the keys and "
            "the values at once; each row of the weights says how much one token attends to every token."
        ).format(n=n, d=d),
        _(
            "Without positions, each word's output is the same in both orders (they differ by at most "
            "{gap}): self-attention sees a set of words, so your two sentences give the same vectors, only "
            "reordered, and nothing after it can tell who did what. With the positional encoding added, a "
            "word's output changes with its place (by up to {moved})."
        ).format(gap=number(gaps[0], ".1e"), moved=number(gaps[1], ".3f")),
        _("The panel shows the orders with positions added.")
        if positions
        else _("The panel shows the orders without positions."),
    ]
    lines = [
        code(DotProductAttention.attend),
        code(sinusoid_table),
        code(embedding, _("embedding (the lab's)")),
    ]
    return answer(tensors, lines, notes)
