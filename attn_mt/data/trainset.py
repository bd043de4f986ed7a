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
from attn_mt.data.splits import SEED_MODULUS
from attn_mt.data.vocab import Vocab


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
    """Many id sequences over one flat id array: sequence i is ids[starts[i]: starts[i] + lengths[i]].

    The flat array may be memory-mapped from the prepared-corpus cache (see `prepared.py`); a
    selection of sequences (`select`) shares it and copies only the starts and lengths, as
    fairseq's indexed datasets keep sizes and pointers beside one flat buffer.
    """

    def __init__(self, ids: np.ndarray, starts: np.ndarray, lengths: np.ndarray):
        if starts.shape != lengths.shape or starts.ndim != 1:
            raise ValueError(f"starts {starts.shape} and lengths {lengths.shape} must be equal 1-d shapes")
        self.ids = ids  # (total,) int32 or uint16
        self.starts = starts  # (N,) int64
        self.lengths = lengths  # (N,) int32, without <eos>

    @classmethod
    def from_offsets(cls, ids: np.ndarray, offsets: np.ndarray) -> TokenSequences:
        """Sequences laid end to end: sequence i is ids[offsets[i]: offsets[i + 1]]."""
        if offsets.ndim != 1 or not len(offsets) or offsets[0] != 0 or offsets[-1] != len(ids):
            raise ValueError(f"offsets must run from 0 to {len(ids)}, got {offsets[:1]}..{offsets[-1:]}")
        return cls(ids, offsets[:-1], np.diff(offsets).astype(np.int32))

    @classmethod
    def from_lists(cls, sequences: Sequence[Sequence[int]], dtype: type = np.int32) -> TokenSequences:
        """Pack a list of id lists."""
        lengths = np.fromiter((len(s) for s in sequences), dtype=np.int64, count=len(sequences))
        offsets = np.zeros(len(sequences) + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        ids = np.fromiter(itertools.chain.from_iterable(sequences), dtype=dtype, count=int(offsets[-1]))
        return cls.from_offsets(ids, offsets)

    @classmethod
    def from_texts(cls, texts: Sequence[str], vocab: Vocab) -> TokenSequences:
        """Tokenize and encode preprocessed sentences straight into the flat arrays."""
        return cls.from_lists(vocab.encode_texts(texts))

    def select(self, indices: np.ndarray) -> TokenSequences:
        """The sequences `indices`, in that order, over the same flat array."""
        return TokenSequences(self.ids, self.starts[indices], self.lengths[indices])

    def __len__(self) -> int:
        return len(self.lengths)

    def __getitem__(self, index: int) -> list[int]:
        start = int(self.starts[index])
        return self.ids[start : start + int(self.lengths[index])].tolist()

    def padded_with_eos(
        self, indices: Sequence[int], pad_id: int, eos_id: int
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Rows `indices` with <eos> appended, padded to the longest: ids (B, L) long and lengths (B,)."""
        index = np.asarray(indices, dtype=np.int64)  # (B,)
        lens = self.lengths[index].astype(np.int64)  # (B,) without <eos>
        width = int(lens.max()) + 1 if len(index) else 1
        steps = np.arange(width)  # (L,)
        inside = steps[None, :] < lens[:, None]  # (B, L)
        last = max(len(self.ids) - 1, 0)
        gather = np.minimum(self.starts[index][:, None] + steps[None, :], last)  # (B, L)
        tokens = self.ids[gather] if len(self.ids) else np.zeros_like(gather)  # (B, L)
        out = np.where(inside, tokens, pad_id).astype(np.int64)  # (B, L)
        out[np.arange(len(index)), lens] = eos_id
        return torch.from_numpy(out), torch.from_numpy(lens + 1)
