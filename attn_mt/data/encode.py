"""Encode sentences a user types for translation, with the corpus's own preprocessing.

Each sentence is preprocessed and tokenized like the corpus (or taken as already-prepared tokens),
mapped to ids, followed by <eos> and, if `max_len` is given, cut to `max_len` ids the way training
truncated (the book's truncate_pad: a long sentence loses its tail and its <eos>). `SourceInfo`
tells the caller what to warn about: unknown tokens, truncation, an empty sentence.

Shapes: B sentences, S longest source (with <eos>).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, NamedTuple

from attn_mt.data.preprocess import preprocess, tokenize
from attn_mt.data.vocab import Vocab

if TYPE_CHECKING:
    import torch

UNKNOWN_SOURCE = "unknown source tokens, read as <unk>"  # a warning's kind; its words follow ": "


@dataclass
class SourceInfo:
    """What happened to one input sentence on its way to ids."""

    tokens: list[str]
    oov: list[str] = field(default_factory=list)
    truncated: int = 0  # ids cut off by max_len, the <eos> included
    max_len: int | None = None

    @property
    def empty(self) -> bool:
        """True when the sentence had no tokens (only <eos> is fed to the model)."""
        return not self.tokens

    @property
    def warnings(self) -> list[str]:
        """One line per problem, ready to print."""
        out = []
        if self.empty:
            out.append("empty sentence")
        if self.oov:
            out.append(f"{UNKNOWN_SOURCE}: {' '.join(self.oov)}")
        if self.truncated:
            out.append(
                f"source cut to {self.max_len} tokens incl. <eos> ({self.truncated} dropped: the end "
                "of the sentence is not translated; split it into shorter sentences)"
            )
        return out


class EncodedSources(NamedTuple):
    """Padded source ids, their lengths and per-sentence info; unpacks as (src, src_lens, info)."""

    src: torch.Tensor  # (B, S) long
    src_lens: torch.Tensor  # (B,) long, counts the <eos>
    info: list[SourceInfo]

    @property
    def warnings(self) -> list[list[str]]:
        """Each sentence's warnings."""
        return [i.warnings for i in self.info]


def source_rows(
    sentences: Sequence[str | Sequence[str]],
    vocab: Vocab,
    normalize_apostrophes: bool = False,
    max_len: int | None = None,
) -> tuple[list[list[int]], list[SourceInfo]]:
    """Each sentence's ids (<eos> last, cut to `max_len`) and its SourceInfo, unpadded; no torch needed.

    A sentence is raw text (preprocessed here) or a list of tokens already from `tokenize(preprocess(...))`.
    """
    rows: list[list[int]] = []
    infos: list[SourceInfo] = []
    for sentence in sentences:
        if isinstance(sentence, str):
            tokens = tokenize(preprocess(sentence, normalize_apostrophes))
        else:
            tokens = list(sentence)
        ids = [*vocab.encode(tokens), vocab.eos_id]
        oov = list(dict.fromkeys(t for t, i in zip(tokens, ids, strict=False) if i == vocab.unk_id))
        cut = max(len(ids) - max_len, 0) if max_len else 0
        rows.append(ids[: len(ids) - cut])
        infos.append(SourceInfo(tokens, oov, cut, max_len))
    return rows, infos


def encode_sources(
    sentences: Sequence[str | Sequence[str]],
    vocab: Vocab,
    normalize_apostrophes: bool = False,
    max_len: int | None = None,
) -> EncodedSources:
    """Ids (B, S) padded with <pad>, lengths (B,) counting <eos>, and the SourceInfo of each sentence."""
    import torch  # here, not at the top: the CTranslate2 engine reads `source_rows` and runs without torch

    rows, infos = source_rows(sentences, vocab, normalize_apostrophes, max_len)
    width = max((len(r) for r in rows), default=1)
    src = torch.full((len(rows), width), vocab.pad_id, dtype=torch.long)  # (B, S)
    for i, row in enumerate(rows):
        src[i, : len(row)] = torch.tensor(row, dtype=torch.long)
    src_lens = torch.tensor([len(r) for r in rows], dtype=torch.long)  # (B,)
    return EncodedSources(src, src_lens, infos)
