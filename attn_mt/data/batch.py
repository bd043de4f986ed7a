"""One mini-batch of padded source and target token ids.

Shapes: B batch, S source steps, T target steps.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class Batch:
    """Padded ids with valid lengths; `tgt` ends each sentence with `<eos>` (the book's layout)."""

    src: torch.Tensor  # (B, S) long
    src_lens: torch.Tensor  # (B,) long, counts the <eos>
    tgt: torch.Tensor  # (B, T) long
    tgt_lens: torch.Tensor  # (B,) long, counts the <eos>

    def tensors(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """(src, src_lens, tgt, tgt_lens)."""
        return self.src, self.src_lens, self.tgt, self.tgt_lens

    def to(self, device: torch.device | str) -> Batch:
        """Move every tensor to `device`."""
        return Batch(*(t.to(device, non_blocking=True) for t in self.tensors()))

    def pinned(self) -> Batch:
        """The same batch in page-locked host memory, so a copy to a GPU can run while the host goes on."""
        return Batch(*(t.pin_memory() for t in self.tensors()))

    def trimmed(self, source: bool = True) -> Batch:
        """The same batch without the all-padding columns at the end: target always, source if asked.

        Book mode pads every sentence to num_steps; a batch of short sentences then spends most of
        its work on padding. Cutting the target is exact for any teacher-forced decoder (a step sees
        only earlier steps, padded steps carry no loss); cutting the source is exact for an encoder
        that never reads its padding (attention masks it), but not for the book's GRU, whose final
        state has read the padding.
        """
        tgt_width = int(self.tgt_lens.max()) if self.tgt_lens.numel() else 0
        src_width = int(self.src_lens.max()) if source and self.src_lens.numel() else self.src.shape[1]
        return Batch(self.src[:, :src_width], self.src_lens, self.tgt[:, :tgt_width], self.tgt_lens)

    @property
    def num_tgt_tokens(self) -> int:
        """Target tokens as the book counts them: the sum of valid target lengths."""
        return int(self.tgt_lens.sum())


class ShapedBatch(Batch):
    """A batch padded to one of the training set's fixed shapes on purpose (data.batch_shapes).

    Trimming leaves it as it is, so every step of a shape sees the same tensor shapes, and a
    compiled or captured step meets no new one. The padding is exact for a model that never reads
    its source padding (the Transformer masks it) and a loss over the real target tokens.
    """

    def to(self, device: torch.device | str) -> ShapedBatch:
        """Move every tensor to `device`."""
        return ShapedBatch(*(t.to(device, non_blocking=True) for t in self.tensors()))

    def pinned(self) -> ShapedBatch:
        """The same batch in page-locked host memory."""
        return ShapedBatch(*(t.pin_memory() for t in self.tensors()))

    def trimmed(self, source: bool = True) -> ShapedBatch:
        """The batch itself, shape and all."""
        return self
