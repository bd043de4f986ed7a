"""Split mode batches: length-sorted buckets under a token budget, batch order shuffled every epoch.

The budget counts padded cells: rows x the longest side (source or target, <eos> included), the
way fairseq's `max_tokens` bounds a batch (Ott et al. 2019). Sorting by length keeps padding low;
a random tie-break inside each length gives different batches every epoch.

Shapes: N pairs, B batch, S source steps, T target steps.
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from attn_mt.data.batch import Batch
from attn_mt.data.trainset import TokenSequences, epoch_rng


def token_budget_batches(src_lens: np.ndarray, tgt_lens: np.ndarray, max_tokens: int,
                         rng: np.random.Generator) -> list[list[int]]:
    """Group indices into batches with rows x longest side <= max_tokens, in shuffled batch order.

    Lengths include <eos>. A single pair longer than the budget still gets a batch of its own.
    """
    longest = np.maximum(src_lens, tgt_lens)  # (N,)
    order = np.lexsort((rng.random(len(longest)), tgt_lens, src_lens, longest))  # (N,) shortest first
    batches: list[list[int]] = []
    current: list[int] = []
    for index, width in zip(order.tolist(), longest[order].tolist(), strict=True):
        if current and (len(current) + 1) * width > max_tokens:
            batches.append(current)
            current = []
        current.append(index)
    if current:
        batches.append(current)
    return [batches[i] for i in rng.permutation(len(batches))]


class BucketTrainSet:
    """The encoded training pairs (stored once) with token-budget batches padded to the batch's longest."""

    def __init__(self, src: TokenSequences, tgt: TokenSequences, max_tokens: int, pad_id: int, eos_id: int):
        if len(src) != len(tgt):
            raise ValueError(f"source and target counts differ: {len(src)} vs {len(tgt)}")
        self.src, self.tgt = src, tgt
        self.max_tokens = max_tokens
        self.pad_id, self.eos_id = pad_id, eos_id

    @property
    def num_examples(self) -> int:
        """Number of training pairs."""
        return len(self.src)

    def plan(self, epoch: int, seed: int) -> list[list[int]]:
        """This epoch's batches; the same (epoch, seed) always gives the same plan."""
        return token_budget_batches(self.src.lengths + 1, self.tgt.lengths + 1, self.max_tokens,
                                    epoch_rng(seed, epoch))

    def collate(self, indices: Sequence[int]) -> Batch:
        """Source and target with <eos>, each padded to its longest row in the batch."""
        src, src_lens = self.src.padded_with_eos(indices, self.pad_id, self.eos_id)  # (B, S), (B,)
        tgt, tgt_lens = self.tgt.padded_with_eos(indices, self.pad_id, self.eos_id)  # (B, T), (B,)
        return Batch(src, src_lens, tgt, tgt_lens)
