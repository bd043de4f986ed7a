"""Encode many sentences in fixed chunks spread over worker processes, results in chunk order.

The chunks are the same whatever the number of workers and each sentence's ids depend on it alone,
so the flat ids are identical for 1 worker or 32. Sentencepiece text is encoded a distinct word at
a time (word_pieces.py) when the model allows it, each worker keeping the words it has seen.
Workers are forked where the platform allows (they inherit the sentences without copying them)
and spawned elsewhere.

Shapes: N sentences, total = the sum of their lengths.
"""

from __future__ import annotations

import itertools
import multiprocessing
from collections.abc import Iterator, Sequence

import numpy as np

from attn_mt.data.subword import SubwordVocab
from attn_mt.data.trainset import TokenSequences
from attn_mt.data.vocab import Vocab
from attn_mt.data.word_pieces import WordPieces, splits_at_spaces
from attn_mt.progress_bars import progress_bar

CHUNK = 20_000  # sentences per task: small enough for a steady progress bar, large enough to amortise a task
UINT16_IDS = 1 << 16  # vocabularies up to this size store ids as uint16 (half the memory of int32)


def id_dtype(vocab: Vocab) -> np.dtype:
    """The smallest id type that holds every id of `vocab`."""
    return np.dtype(np.uint16 if len(vocab) <= UINT16_IDS else np.int32)


class SentenceEncoder:
    """The plain path: the vocabulary encodes one sentence at a time."""

    def __init__(self, vocab: Vocab, dtype: np.dtype):
        self.vocab = vocab
        self.dtype = dtype

    def encode(self, texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        """Flat ids (total,) and lengths (n,) of `texts`."""
        rows = self.vocab.encode_texts(texts, threads=1)
        lengths = np.fromiter(map(len, rows), dtype=np.int64, count=len(rows))  # (n,)
        ids = np.fromiter(itertools.chain.from_iterable(rows), dtype=self.dtype, count=int(lengths.sum()))
        return ids, lengths  # (total,), (n,)


ChunkEncoder = SentenceEncoder | WordPieces
_WORK: tuple[ChunkEncoder, Sequence[str]] | None = None  # set in each worker by _start_worker


def chunk_encoder(vocab: Vocab, fast: bool = True) -> ChunkEncoder:
    """WordPieces for a sentencepiece model that splits at spaces (when `fast`), else SentenceEncoder."""
    dtype = id_dtype(vocab)
    if fast and isinstance(vocab, SubwordVocab) and splits_at_spaces(vocab):
        return WordPieces(vocab, dtype)
    return SentenceEncoder(vocab, dtype)


def _start_worker(encoder: ChunkEncoder, texts: Sequence[str]) -> None:
    """Keep what every task of this worker reads (its WordPieces fill up from task to task)."""
    global _WORK
    _WORK = (encoder, texts)


def _encode_range(bounds: tuple[int, int]) -> tuple[np.ndarray, np.ndarray]:
    """A worker's task: the ids and lengths of sentences [start, stop) of the texts it was started with."""
    assert _WORK is not None, "worker not started"
    encoder, texts = _WORK
    return encoder.encode(texts[bounds[0] : bounds[1]])


def _context() -> multiprocessing.context.BaseContext:
    """Fork where available (no copy of the sentences), else spawn."""
    methods = multiprocessing.get_all_start_methods()
    return multiprocessing.get_context("fork" if "fork" in methods else "spawn")


def _chunks(
    encoder: ChunkEncoder, texts: Sequence[str], workers: int
) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """Each chunk's (ids, lengths), in order, from `workers` processes (this one when 1)."""
    bounds = [(start, min(start + CHUNK, len(texts))) for start in range(0, len(texts), CHUNK)]
    if workers <= 1 or len(bounds) <= 1:
        yield from (encoder.encode(texts[start:stop]) for start, stop in bounds)
        return
    with _context().Pool(min(workers, len(bounds)), _start_worker, (encoder, texts)) as pool:
        yield from pool.imap(_encode_range, bounds)


def encode_parallel(
    vocab: Vocab,
    texts: Sequence[str],
    workers: int,
    desc: str = "encoding",
    progress: bool = False,
    fast: bool = True,
) -> TokenSequences:
    """Ids of every text (without <eos>) as one flat store, encoded CHUNK sentences at a time by `workers`.

    `fast` encodes sentencepiece text word by word where that gives the same ids (word_pieces.py).
    """
    encoder = chunk_encoder(vocab, fast)
    parts_ids, parts_lengths = [], []
    with progress_bar(len(texts), desc, " sentences", enabled=progress, unit_scale=True) as bar:
        for ids, lengths in _chunks(encoder, texts, workers):
            parts_ids.append(ids)
            parts_lengths.append(lengths)
            bar.update(len(lengths))
    ids = np.concatenate(parts_ids) if parts_ids else np.zeros(0, dtype=encoder.dtype)  # (total,)
    offsets = np.zeros(len(texts) + 1, dtype=np.int64)  # (N + 1,)
    if parts_lengths:
        np.cumsum(np.concatenate(parts_lengths), out=offsets[1:])
    return TokenSequences.from_offsets(ids, offsets)
