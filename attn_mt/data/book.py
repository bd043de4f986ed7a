"""Book mode: the book's `load_data_nmt` batches (d2l.ai section 10.5.4, Loading Sequences of Fixed Length).

The first `num_examples + 1` pairs (the book's loop keeps lines 0..num_examples, so 600 gives
601 pairs), every sentence followed by <eos> and truncated or padded to `num_steps`, valid lengths
counted as the non-padding ids, shuffled batches of `batch_size` with a smaller last batch, no
held-out split.

Shapes: N pairs, B batch, num_steps fixed width.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from attn_mt.data.batch import Batch
from attn_mt.data.trainset import epoch_seed


def book_subset(pairs: Sequence, num_examples: int) -> list:
    """The pairs the book reads: indices 0..num_examples inclusive (0 means all, as in the book)."""
    return list(pairs[: num_examples + 1]) if num_examples else list(pairs)


def truncate_pad(line: Sequence[int], num_steps: int, padding_token: int) -> list[int]:
    """Cut `line` to `num_steps` ids or pad it with `padding_token` (the book's truncate_pad)."""
    return list(line[:num_steps]) + [padding_token] * max(num_steps - len(line), 0)


def build_array(
    lines: Sequence[Sequence[int]], num_steps: int, pad_id: int, eos_id: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Append <eos> and truncate/pad: ids (N, num_steps), valid lengths (N,) (the book's build_array_nmt).

    A line longer than num_steps - 1 loses its tail and its <eos>, exactly as in the book.
    """
    rows = [truncate_pad([*line, eos_id], num_steps, pad_id) for line in lines]
    array = torch.tensor(rows, dtype=torch.int32).reshape(len(rows), num_steps)  # (N, num_steps)
    valid_len = torch.tensor([min(len(line) + 1, num_steps) for line in lines], dtype=torch.int32)  # (N,)
    return array, valid_len


class BookTrainSet:
    """Fixed-width book batches, reshuffled every epoch like `DataLoader(shuffle=True)` without drop_last."""

    def __init__(
        self,
        src: torch.Tensor,
        src_len: torch.Tensor,
        tgt: torch.Tensor,
        tgt_len: torch.Tensor,
        batch_size: int,
    ):
        if not len(src) == len(src_len) == len(tgt) == len(tgt_len):
            sizes = ", ".join(str(len(t)) for t in (src, src_len, tgt, tgt_len))
            raise ValueError(f"book arrays differ in length: {sizes}")
        self.src, self.src_len, self.tgt, self.tgt_len = src, src_len, tgt, tgt_len
        self.batch_size = batch_size

    @property
    def num_examples(self) -> int:
        """Number of training pairs."""
        return len(self.src)

    @property
    def num_steps(self) -> int:
        """The fixed width of every batch."""
        return self.src.shape[1]

    def plan(self, epoch: int, seed: int) -> list[list[int]]:
        """A fresh permutation per (seed, epoch) cut into batches of `batch_size`; the last may be smaller."""
        generator = torch.Generator().manual_seed(epoch_seed(seed, epoch))
        order = torch.randperm(self.num_examples, generator=generator).tolist()
        return [order[i : i + self.batch_size] for i in range(0, len(order), self.batch_size)]

    def collate(self, indices: Sequence[int]) -> Batch:
        """The rows `indices`, already num_steps wide."""
        index = torch.as_tensor(list(indices), dtype=torch.long)  # (B,)
        return Batch(
            self.src[index].long(),
            self.src_len[index].long(),
            self.tgt[index].long(),
            self.tgt_len[index].long(),
        )
