"""Hard word alignments from the encoder-decoder attention, as Pharaoh `i-j` pairs (no torch).

For one translated sentence the engine's attention of its best output is taken at the word level
(`Engine.attention(translation, words=True)`: a word's source pieces' weights summed, its target
pieces' rows averaged, decoding/attention.py's `merge_words`). Of the cross-attention the last
decoder layer's map averaged over its heads is used by default (the Bahdanau model has one map; a
CTranslate2 folder returns exactly that one); `layer` picks another layer, or None the mean of every
layer's head averages (torch engine only: the others have one map). Each target word j is aligned
to the source word i it attends to most, the source <eos> left out: one pair `i-j` per target
word, source index first, both counted from 0. Words are what the training data's preprocessing
makes of the text: for subword runs the space-separated words (pieces joined), for book-tokenized
runs the book's tokens (punctuation on its own).

Over a line of several sentences the pairs of each sentence are shifted by the words of the
sentences before it, on both sides, so they index the line's words.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from attn_mt.data.vocab import EOS

if TYPE_CHECKING:
    from attn_mt.decoding.attention import SentenceAttention
    from attn_mt.decoding.engine import Engine
    from attn_mt.decoding.outputs import Translation


@dataclass
class WordAlignment:
    """The words of a source and its output, and which source word each output word comes from."""

    source_words: list[str] = field(default_factory=list)
    target_words: list[str] = field(default_factory=list)
    pairs: list[tuple[int, int]] = field(default_factory=list)  # (source index, target index)

    def pharaoh(self) -> str:
        """The pairs as Pharaoh text: `0-0 1-2 ...`."""
        return " ".join(f"{i}-{j}" for i, j in self.pairs)


def cross_map(weights: np.ndarray, layer: int | None = -1) -> np.ndarray:
    """A (T, S) cross-attention map: a Transformer's (L, h, T, S) as layer `layer` (None: every layer)
    averaged over its heads."""
    if weights.ndim == 4:
        chosen = weights.mean(axis=0) if layer is None else weights[layer]  # (h, T, S)
        return chosen.mean(axis=0)  # (T, S)
    if weights.ndim != 2:
        raise ValueError(f"cross-attention must be (T, S) or (L, h, T, S), got shape {weights.shape}")
    return weights


def align_words(attention: SentenceAttention, layer: int | None = -1) -> WordAlignment:
    """Each target word of a word-level `SentenceAttention` aligned to its most attended source word
    (`layer` as in `cross_map`)."""
    weights = cross_map(np.asarray(attention.maps["cross"], dtype=np.float64), layer)  # (T, S)
    sources = list(attention.source_tokens)
    if attention.source_ends_with_eos and sources and sources[-1] == EOS:
        sources = sources[:-1]
    targets = list(attention.output_tokens[:-1])  # the closing <eos> is no word
    if not sources or not targets:
        return WordAlignment(sources, targets, [])
    best = weights[: len(targets), : len(sources)].argmax(axis=1)  # (T',)
    return WordAlignment(sources, targets, [(int(i), j) for j, i in enumerate(best)])


def alignment_of(engine: Engine, translation: Translation, layer: int | None = -1) -> WordAlignment:
    """The word alignment of a translated sentence's best output (none for a blank sentence)."""
    if not translation.hypotheses:
        return WordAlignment()
    return align_words(engine.attention(translation, words=True), layer)


def joined(parts: list[WordAlignment]) -> WordAlignment:
    """Sentences' alignments as one line's: words concatenated, each part's pairs shifted past the earlier."""
    line = WordAlignment()
    for part in parts:
        shift_i, shift_j = len(line.source_words), len(line.target_words)
        line.pairs += [(i + shift_i, j + shift_j) for i, j in part.pairs]
        line.source_words += part.source_words
        line.target_words += part.target_words
    return line
