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


def token_budget_batches(
    src_lens: np.ndarray, tgt_lens: np.ndarray, max_tokens: int, rng: np.random.Generator
) -> list[np.ndarray]:
    """Group indices into batches with rows x longest side <= max_tokens, in shuffled batch order.

    Lengths include <eos>. A single pair longer than the budget still gets a batch of its own.
    Each batch is an int64 index array (a view of one sorted order), so a plan of millions of
    pairs holds no Python list of them.
    """
    longest = np.maximum(src_lens, tgt_lens)  # (N,)
    order = np.lexsort((rng.random(len(longest)), tgt_lens, src_lens, longest))  # (N,) shortest first
    batches = np.split(order, batch_ends(longest[order], max_tokens)[:-1]) if len(order) else []
    return [batches[i] for i in rng.permutation(len(batches))]


def batch_ends(widths: np.ndarray, max_tokens: int) -> np.ndarray:
    """Where each batch ends in `widths` (sorted ascending): greedy packing, one run of equal widths at once.

    Walking the sorted pairs, a pair joins the open batch while (rows + 1) x its width <= max_tokens
    (an empty batch takes any pair). Within a run of one width w a batch holds at most
    cap = max(max_tokens // w, 1) rows, so the ends inside the run are every cap rows.
    """
    change = np.flatnonzero(np.diff(widths)) + 1  # first position of each new width
    run_starts = np.concatenate(([0], change)).tolist()
    run_ends = [*change.tolist(), len(widths)]
    ends: list[int] = []
    start = 0  # first row of the open batch
    for run_start, run_end in zip(run_starts, run_ends, strict=True):
        cap = max(max_tokens // int(widths[run_start]), 1)
        if run_start - start >= cap:  # the open batch has no room for this wider pair
            ends.append(run_start)
            start = run_start
        inside = list(range(start + cap, run_end, cap))  # full batches closed inside this run
        ends.extend(inside)
        start = inside[-1] if inside else start
    ends.append(len(widths))
    return np.asarray(ends, dtype=np.int64)


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

    def plan(self, epoch: int, seed: int) -> list[np.ndarray]:
        """This epoch's batches; the same (epoch, seed) always gives the same plan."""
        return token_budget_batches(
            self.src.lengths + 1, self.tgt.lengths + 1, self.max_tokens, epoch_rng(seed, epoch)
        )

    def collate(self, indices: Sequence[int]) -> Batch:
        """Source and target with <eos>, each padded to its longest row in the batch."""
        src, src_lens = self.src.padded_with_eos(indices, self.pad_id, self.eos_id)  # (B, S), (B,)
        tgt, tgt_lens = self.tgt.padded_with_eos(indices, self.pad_id, self.eos_id)  # (B, T), (B,)
        return Batch(src, src_lens, tgt, tgt_lens)
