"""The base of every kernel-backed model: a book model whose methods stay its own unless a kernel overrides.

The CPU kernels subclass it (kernels/cpu/kernel_models.py). Shapes: B batch, S source steps,
T target steps, H hidden.
"""

from __future__ import annotations

import torch
from torch import nn

from attn_mt.models.base import DecoderState, EncoderDecoder


class KernelBacked(EncoderDecoder):
    """A book model whose methods are its own unless a subclass overrides them with a kernel."""

    def __init__(self, model: EncoderDecoder):
        super().__init__()
        self.model = model

    @property
    def reads_source_padding(self) -> bool:  # type: ignore[override]
        """The book model's answer."""
        return self.model.reads_source_padding

    @property
    def output_layer(self) -> nn.Linear:
        """The book model's output layer."""
        return self.model.output_layer

    def encode(self, src: torch.Tensor, src_lens: torch.Tensor) -> DecoderState:
        """The book model's encode."""
        return self.model.encode(src, src_lens)

    def decode_features(self, tgt_in: torch.Tensor, enc: DecoderState) -> torch.Tensor:
        """The book model's teacher-forced hidden states (B, T, H)."""
        return self.model.decode_features(tgt_in, enc)

    def init_state(self, enc: DecoderState) -> DecoderState:
        """The book model's initial decoder state."""
        return self.model.init_state(enc)

    def step(
        self, tokens: torch.Tensor, state: DecoderState, need_attention: bool = False
    ) -> tuple[torch.Tensor, DecoderState, dict[str, torch.Tensor]]:
        """The book model's decoder step."""
        return self.model.step(tokens, state, need_attention)

    def attention_maps(
        self, src: torch.Tensor, src_lens: torch.Tensor, tgt_in: torch.Tensor
    ) -> dict[str, torch.Tensor]:
        """The book model's attention maps."""
        return self.model.attention_maps(src, src_lens, tgt_in)

    def reorder_state(self, state: DecoderState, index: torch.Tensor) -> DecoderState:
        """The book model's state reordering."""
        return self.model.reorder_state(state, index)
