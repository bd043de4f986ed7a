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

    def to(self, device: torch.device | str) -> Batch:
        """Move every tensor to `device`."""
        return Batch(
            *(t.to(device, non_blocking=True) for t in (self.src, self.src_lens, self.tgt, self.tgt_lens))
        )

    def pinned(self) -> Batch:
        """The same batch in page-locked host memory, so a copy to a GPU can run while the host goes on."""
        return Batch(*(t.pin_memory() for t in (self.src, self.src_lens, self.tgt, self.tgt_lens)))

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
