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

    @property
    def num_tgt_tokens(self) -> int:
        """Target tokens as the book counts them: the sum of valid target lengths."""
        return int(self.tgt_lens.sum())
