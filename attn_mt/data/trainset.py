"""The training-set contract and the compact store the encoded sentences live in.

A TrainSet plans each epoch as lists of example indices, a pure function of (epoch, seed), so a
resumed run can skip the batches it already did and DDP ranks can shard the same plan; `collate`
turns one index list into a Batch.

Shapes: B batch, L longest sentence in the batch (with <eos>), N sentences.
"""
from __future__ import annotations

import itertools
from collections.abc import Iterator, Sequence
from typing import Protocol

import numpy as np
import torch

from attn_mt.data.batch import Batch
from attn_mt.data.preprocess import tokenize
from attn_mt.data.vocab import Vocab

SEED_MODULUS = 1 << 64  # numpy seeds must be non-negative; negative seeds wrap around


class TrainSet(Protocol):
    """What the trainer needs from the training data."""

    @property
    def num_examples(self) -> int:
        """Number of training pairs."""

    def plan(self, epoch: int, seed: int) -> list[list[int]]:
        """The batches of `epoch` as example-index lists, deterministic in (epoch, seed)."""

    def collate(self, indices: Sequence[int]) -> Batch:
        """The padded Batch of these examples."""


def epoch_seed(seed: int, epoch: int) -> int:
    """A well-mixed 63-bit seed for one epoch of one run (the same on every platform)."""
    state = np.random.SeedSequence([seed % SEED_MODULUS, epoch]).generate_state(2, dtype=np.uint32)
    return (int(state[0]) << 31) ^ int(state[1])


def epoch_rng(seed: int, epoch: int) -> np.random.Generator:
    """A numpy generator for one epoch of one run."""
    return np.random.default_rng(epoch_seed(seed, epoch))


def iter_batches(train: TrainSet, epoch: int, seed: int, start: int = 0) -> Iterator[Batch]:
    """Collated batches of `epoch`, skipping the first `start` (already done before a resume)."""
    for indices in train.plan(epoch, seed)[start:]:
        yield train.collate(indices)


class TokenSequences:
    """Many id sequences stored once: one flat int32 array and an offsets array (N + 1,)."""

    def __init__(self, ids: np.ndarray, offsets: np.ndarray):
        if offsets.ndim != 1 or offsets[0] != 0 or offsets[-1] != len(ids):
            raise ValueError(f"offsets must run from 0 to {len(ids)}, got {offsets[:1]}..{offsets[-1:]}")
        self.ids = ids
        self.offsets = offsets
        self.lengths = np.diff(offsets).astype(np.int32)  # (N,)

    @classmethod
    def from_lists(cls, sequences: Sequence[Sequence[int]]) -> TokenSequences:
        """Pack a list of id lists."""
        lengths = np.fromiter((len(s) for s in sequences), dtype=np.int64, count=len(sequences))
        offsets = np.zeros(len(sequences) + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        total = int(offsets[-1])
        ids = np.fromiter(itertools.chain.from_iterable(sequences), dtype=np.int32, count=total)
        return cls(ids, offsets)

    @classmethod
    def from_texts(cls, texts: Sequence[str], vocab: Vocab) -> TokenSequences:
        """Tokenize and encode preprocessed sentences straight into the flat arrays."""
        lengths = np.fromiter((len(tokenize(t)) for t in texts), dtype=np.int64, count=len(texts))
        offsets = np.zeros(len(texts) + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        ids = np.fromiter(itertools.chain.from_iterable(vocab.encode(tokenize(t)) for t in texts),
                          dtype=np.int32, count=int(offsets[-1]))
        return cls(ids, offsets)

    def select(self, indices: np.ndarray) -> TokenSequences:
        """A new store holding only the sequences `indices`, in that order."""
        lengths = self.lengths[indices].astype(np.int64)  # (K,)
        offsets = np.zeros(len(indices) + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        starts = np.repeat(self.offsets[indices] - offsets[:-1], lengths)  # (total,) shift of each new slot
        return TokenSequences(self.ids[starts + np.arange(offsets[-1])], offsets)

    def __len__(self) -> int:
        return len(self.lengths)

    def __getitem__(self, index: int) -> list[int]:
        return self.ids[self.offsets[index]: self.offsets[index + 1]].tolist()

    @property
    def nbytes(self) -> int:
        """Memory held by the arrays."""
        return self.ids.nbytes + self.offsets.nbytes + self.lengths.nbytes

    def padded_with_eos(self, indices: Sequence[int], pad_id: int,
                        eos_id: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Rows `indices` with <eos> appended, padded to the longest: ids (B, L) long and lengths (B,)."""
        index = np.asarray(indices, dtype=np.int64)  # (B,)
        lens = self.lengths[index].astype(np.int64)  # (B,) without <eos>
        width = int(lens.max()) + 1 if len(index) else 1
        steps = np.arange(width)  # (L,)
        inside = steps[None, :] < lens[:, None]  # (B, L)
        last = max(len(self.ids) - 1, 0)
        gather = np.minimum(self.offsets[index][:, None] + steps[None, :], last)  # (B, L)
        tokens = self.ids[gather] if len(self.ids) else np.zeros_like(gather)  # (B, L)
        out = np.where(inside, tokens, pad_id).astype(np.int64)  # (B, L)
        out[np.arange(len(index)), lens] = eos_id
        return torch.from_numpy(out), torch.from_numpy(lens + 1)
