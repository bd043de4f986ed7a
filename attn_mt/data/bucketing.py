"""Split mode batches: length-sorted buckets under a token budget, batch order shuffled every epoch.

The budget counts padded cells: rows x the longest side (source or target, <eos> included), the
way fairseq's `max_tokens` bounds a batch (Ott et al. 2019). Sorting by length keeps padding low;
a random tie-break inside each length gives different batches every epoch.

With `data.batch_shapes: K` every batch is padded instead to one of at most K fixed shapes
(`fit_shapes`), so a compiled or CUDA-graph-captured step meets a few known shapes and never a new
one: on configs/transformer-gpu.yaml's training pairs 16 shapes keep about 94% of the target cells
and 86% of the source cells real (tests/test_bucketing.py measures it on the whole corpus).

Shapes: N pairs, B batch, S source steps, T target steps.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch.nn.functional as F

from attn_mt.data.batch import Batch, ShapedBatch
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


SOURCE_CELL_COST = 0.6
"""What a padded source cell costs against a padded target cell when `fit_shapes` places the shapes.

A source token passes the encoder blocks (6 FLOPs a weight: ~57 MFLOP at configs/transformer-gpu.yaml's
sizes), a target token the decoder blocks and the output layer (~100 MFLOP), docs/gpu.md.
"""


@dataclass(frozen=True)
class BatchShape:
    """One fixed batch shape: `rows` sentences, `src` source and `tgt` target steps (with <eos>)."""

    rows: int
    src: int
    tgt: int

    @property
    def cells(self) -> int:
        """Source and target cells of a batch of this shape."""
        return self.rows * (self.src + self.tgt)

    def holds(self, src_width: int, tgt_width: int) -> bool:
        """Whether a pair (or a batch) this long on each side fits the shape's widths."""
        return src_width <= self.src and tgt_width <= self.tgt


def candidate_widths(lengths: np.ndarray, most: int = 48) -> np.ndarray:
    """The widths a shape may take on one side: every length that occurs, or `most` of its quantiles."""
    widths = np.unique(lengths)
    if len(widths) > most:
        widths = np.unique(np.quantile(lengths, np.linspace(0, 1, most), method="higher"))
    return widths.astype(np.int64)


def fit_shapes(
    src_lens: np.ndarray,
    tgt_lens: np.ndarray,
    max_tokens: int,
    count: int,
    source_cost: float = SOURCE_CELL_COST,
) -> list[BatchShape]:
    """At most `count` batch shapes, widening on both sides, that waste the fewest padded cells on the pairs.

    A pair is padded to the first shape (narrowest first) that holds it on both sides, so the shapes
    are a chain of (S, T) widths, each at least the one before on either side, the last the longest
    pair's. The chain is the one with the least padding, `source_cost` x the padded source cells plus
    the padded target cells, found exactly by dynamic programming over the candidate widths: the
    cells a shape adds are those of the pairs it holds that the shape before it does not, and both
    regions are rectangles of the joint length histogram, so each cost is a difference of its
    cumulative sums. Rows are max_tokens // the longer side, rounded down to a multiple of 8 (at least
    1): every batch of a shape then costs at most max_tokens cells on either side, as the token
    budget of `token_budget_batches` does. Lengths include <eos>.
    """
    if not len(src_lens):
        return [BatchShape(1, 1, 1)]
    src_widths, tgt_widths = candidate_widths(src_lens), candidate_widths(tgt_lens)
    src_at = np.searchsorted(src_widths, src_lens)  # (N,) the narrowest candidate holding each pair
    tgt_at = np.searchsorted(tgt_widths, tgt_lens)  # (N,)
    grid = (len(src_widths) + 1, len(tgt_widths) + 1)  # row and column 0: the empty shape the chain starts at
    pairs, src_sum, tgt_sum = (np.zeros(grid) for _ in range(3))
    np.add.at(pairs, (src_at + 1, tgt_at + 1), 1)
    np.add.at(src_sum, (src_at + 1, tgt_at + 1), src_lens)
    np.add.at(tgt_sum, (src_at + 1, tgt_at + 1), tgt_lens)
    held, held_src, held_tgt = (m.cumsum(0).cumsum(1).ravel() for m in (pairs, src_sum, tgt_sum))  # (G,)
    src_w = np.concatenate(([0], src_widths))[:, None].repeat(grid[1], 1).ravel()  # (G,)
    tgt_w = np.concatenate(([0], tgt_widths))[None, :].repeat(grid[0], 0).ravel()  # (G,)
    added = held[:, None] - held[None, :]  # (G, G): pairs shape i holds and shape j (before it) does not
    cost = (
        tgt_w[:, None] * added
        - (held_tgt[:, None] - held_tgt[None, :])
        + source_cost * (src_w[:, None] * added - (held_src[:, None] - held_src[None, :]))
    )  # (G, G) padded cells shape i adds after shape j
    widening = (src_w[None, :] <= src_w[:, None]) & (tgt_w[None, :] <= tgt_w[:, None])
    cost = np.where(widening, cost, np.inf)
    best = np.full(len(held), np.inf)  # (G,) least padding of a chain ending at each shape
    best[0] = 0.0
    before = []  # per chain length: the shape before each shape on its best chain
    for _ in range(count):
        total = best[None, :] + cost  # (G, G)
        previous = total.argmin(1)  # (G,)
        best = total[np.arange(len(best)), previous]
        before.append(previous)
    shape, widths = len(held) - 1, set()  # the chain ends at the longest pair's widths
    for previous in reversed(before):
        widths.add((int(src_w[shape]), int(tgt_w[shape])))
        shape = int(previous[shape])
    shapes = sorted(
        (shape_for(max_tokens, src, tgt) for src, tgt in widths if src and tgt), key=lambda s: (s.src, s.tgt)
    )
    used = set(
        shape_index(shapes, src_lens, tgt_lens).tolist()
    )  # a shape that holds no pair first is dropped
    return [shape for k, shape in enumerate(shapes) if k in used]


def shape_for(max_tokens: int, src: int, tgt: int) -> BatchShape:
    """The shape of widths (src, tgt) with as many rows as the token budget allows (a multiple of 8)."""
    rows = max_tokens // max(src, tgt)
    return BatchShape(rows // 8 * 8 if rows >= 8 else max(rows, 1), src, tgt)


def shape_index(shapes: Sequence[BatchShape], src_lens: np.ndarray, tgt_lens: np.ndarray) -> np.ndarray:
    """For each pair, the first of `shapes` (narrowest first) that holds it: (N,) int64."""
    src_fits = src_lens[:, None] <= np.array([s.src for s in shapes])[None, :]  # (N, K)
    tgt_fits = tgt_lens[:, None] <= np.array([s.tgt for s in shapes])[None, :]  # (N, K)
    return (src_fits & tgt_fits).argmax(1)


def fixed_shape_batches(
    src_lens: np.ndarray, tgt_lens: np.ndarray, shapes: Sequence[BatchShape], rng: np.random.Generator
) -> list[np.ndarray]:
    """Batches that each fill one of `shapes`, in shuffled batch order; the pairs shuffled in each shape.

    Each pair goes to the first shape that holds it; a shape's pairs are cut into batches of its
    rows, and what is left over (fewer than its rows) joins the next, wider shape, so only the
    widest shape has a batch with empty rows (`ShapedTrainSet.collate` pads them).
    """
    at = shape_index(shapes, src_lens, tgt_lens)  # (N,)
    order = rng.permutation(len(at))  # (N,)
    batches: list[np.ndarray] = []
    left = np.zeros(0, dtype=np.int64)
    for k, shape in enumerate(shapes):
        pairs = np.concatenate((left, order[at[order] == k]))
        full = len(pairs) // shape.rows * shape.rows
        batches.extend(np.split(pairs[:full], full // shape.rows) if full else [])
        left = pairs[full:]
    if len(left):
        batches.append(left)
    return [batches[i] for i in rng.permutation(len(batches))]


def smallest_holding(shapes: Sequence[BatchShape], rows: int, src_width: int, tgt_width: int) -> BatchShape:
    """Of `shapes`, the one of fewest cells with room for `rows` sentences of these widths."""
    holding = [s for s in shapes if rows <= s.rows and s.holds(src_width, tgt_width)]
    if not holding:
        raise ValueError(
            f"no batch shape holds {rows} rows of widths ({src_width}, {tgt_width}): {list(shapes)}"
        )
    return min(holding, key=lambda s: (s.cells, s.src, s.tgt))


class BucketTrainSet:
    """The encoded training pairs (stored once) with token-budget batches padded to the batch's longest.

    With `shapes` (fit_shapes) the batches fill those fixed shapes instead, and come collated as
    ShapedBatch, padded to their shape.
    """

    def __init__(
        self,
        src: TokenSequences,
        tgt: TokenSequences,
        max_tokens: int,
        pad_id: int,
        eos_id: int,
        shapes: Sequence[BatchShape] | None = None,
    ):
        if len(src) != len(tgt):
            raise ValueError(f"source and target counts differ: {len(src)} vs {len(tgt)}")
        self.src, self.tgt = src, tgt
        self.max_tokens = max_tokens
        self.pad_id, self.eos_id = pad_id, eos_id
        self.shapes = list(shapes) if shapes else None

    @property
    def num_examples(self) -> int:
        """Number of training pairs."""
        return len(self.src)

    def plan(self, epoch: int, seed: int) -> list[np.ndarray]:
        """This epoch's batches; the same (epoch, seed) always gives the same plan."""
        src_lens, tgt_lens, rng = self.src.lengths + 1, self.tgt.lengths + 1, epoch_rng(seed, epoch)
        if self.shapes:
            return fixed_shape_batches(src_lens, tgt_lens, self.shapes, rng)
        return token_budget_batches(src_lens, tgt_lens, self.max_tokens, rng)

    def collate(self, indices: Sequence[int]) -> Batch:
        """Source and target with <eos>, each padded to its longest row in the batch (or to its shape)."""
        src, src_lens = self.src.padded_with_eos(indices, self.pad_id, self.eos_id)  # (B, S), (B,)
        tgt, tgt_lens = self.tgt.padded_with_eos(indices, self.pad_id, self.eos_id)  # (B, T), (B,)
        if not self.shapes:
            return Batch(src, src_lens, tgt, tgt_lens)
        shape = smallest_holding(self.shapes, src.shape[0], src.shape[1], tgt.shape[1])
        return pad_to_shape(Batch(src, src_lens, tgt, tgt_lens), shape, self.pad_id)


def pad_to_shape(batch: Batch, shape: BatchShape, pad_id: int) -> ShapedBatch:
    """`batch` padded with `pad_id` to `shape`: (rows, src) and (rows, tgt).

    An added row has no target token (length 0: no loss) and one source token (length 1), so no
    attention query over the source is left without a key.
    """
    extra = shape.rows - batch.src.shape[0]
    src = F.pad(batch.src, (0, shape.src - batch.src.shape[1], 0, extra), value=pad_id)  # (rows, src)
    tgt = F.pad(batch.tgt, (0, shape.tgt - batch.tgt.shape[1], 0, extra), value=pad_id)  # (rows, tgt)
    src_lens = F.pad(batch.src_lens, (0, extra), value=1)  # (rows,)
    tgt_lens = F.pad(batch.tgt_lens, (0, extra), value=0)  # (rows,)
    return ShapedBatch(src, src_lens, tgt, tgt_lens)


def real_shares(batches: Sequence[Batch]) -> tuple[float, float]:
    """The shares of the batches' source and target cells that hold real tokens (<eos> counted)."""
    src_real = sum(int(b.src_lens[b.tgt_lens > 0].sum()) for b in batches)  # an added row holds no pair
    tgt_real = sum(int(b.tgt_lens.sum()) for b in batches)
    src_cells = sum(b.src.numel() for b in batches)
    tgt_cells = sum(b.tgt.numel() for b in batches)
    return src_real / max(src_cells, 1), tgt_real / max(tgt_cells, 1)
