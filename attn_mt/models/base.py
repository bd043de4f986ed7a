"""The encoder-decoder contract every model implements, for decoding and for training.

Shapes: B batch, S source steps, T target steps, H hidden, V target vocabulary.
- Search (decoding/search.py) calls `encode`, `init_state`, `step` and `reorder_state` only, so
  greedy and beam search never ask which model they hold.
- Training calls `forward` (teacher-forced logits) and reads two more parts of the contract:
  `decode_features` and `output_layer`, the hidden states under the logits and the layer that
  turns them into logits (`decode` is the two together), so a loss may apply the layer itself
  (kernels/cpu/chunked_loss.py does for big batches, never holding the logits); and `reads_source_padding`,
  whether any output depends on a batch's all-padding source columns (if not, training cuts them).
- Attention dumps and heatmaps call `attention_maps`.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

DecoderState = dict[str, Any]


def check_source(src: torch.Tensor, src_lens: torch.Tensor) -> None:
    """Where a source batch enters an encoder: ids (B, S) and lengths (B,), else a ValueError naming both."""
    if src.dim() != 2 or src_lens.shape != (src.shape[0],):
        raise ValueError(
            f"expected src (B, S) and src_lens (B,), got {tuple(src.shape)} and {tuple(src_lens.shape)}"
        )


def split_layers(num_layers: int | tuple[int, int]) -> tuple[int, int]:
    """A model's `num_layers` argument, one count for both sides or (encoder, decoder), as a pair."""
    return (num_layers, num_layers) if isinstance(num_layers, int) else (num_layers[0], num_layers[1])


class EncoderDecoder(nn.Module):
    """Base class: subclasses implement encode, output_layer, decode_features, init_state, step,
    attention_maps and reorder_state, and set reads_source_padding."""

    reads_source_padding = True  # False when no output depends on the source's padding columns
    direct_weight_layers: tuple[str, ...] = ()  # nn.Linear layers int8 quantisation leaves in float32

    def encode(self, src: torch.Tensor, src_lens: torch.Tensor) -> DecoderState:
        """Run the encoder; returns what the decoder needs (memory, masks, valid lengths)."""
        raise NotImplementedError

    @property
    def output_layer(self) -> nn.Linear:
        """The dense layer that maps the decoder's hidden states (..., H) to logits (..., V)."""
        raise NotImplementedError

    def decode_features(self, tgt_in: torch.Tensor, enc: DecoderState) -> torch.Tensor:
        """Teacher-forced decoding of `tgt_in` (B, T) -> the hidden states (B, T, H) under the logits."""
        raise NotImplementedError

    def decode(self, tgt_in: torch.Tensor, enc: DecoderState) -> torch.Tensor:
        """Teacher-forced decoding of `tgt_in` (B, T) -> logits (B, T, V)."""
        return self.output_layer(self.decode_features(tgt_in, enc))

    def forward(self, src: torch.Tensor, src_lens: torch.Tensor, tgt_in: torch.Tensor) -> torch.Tensor:
        """Teacher-forced logits (B, T, V) for the decoder inputs `tgt_in` (B, T) given the source (B, S)."""
        return self.decode(tgt_in, self.encode(src, src_lens))

    def init_state(self, enc: DecoderState) -> DecoderState:
        """The incremental decoder state before the first target step."""
        raise NotImplementedError

    def step(
        self, tokens: torch.Tensor, state: DecoderState, need_attention: bool = False
    ) -> tuple[torch.Tensor, DecoderState, dict[str, torch.Tensor]]:
        """One decoder step: previous tokens (B,) -> logits (B, V), new state, attention maps.

        The attention dict is empty unless `need_attention`; otherwise it maps a name to this
        step's weights, e.g. Bahdanau "cross": (B, S); Transformer "cross": (B, L, h, S) and
        "self": (B, L, h, t) where t is the number of target steps so far.
        """
        raise NotImplementedError

    def attention_maps(
        self, src: torch.Tensor, src_lens: torch.Tensor, tgt_in: torch.Tensor
    ) -> dict[str, torch.Tensor]:
        """Every attention matrix of a teacher-forced pass, for dumps and heatmaps.

        Bahdanau: {"cross": (B, T, S)}. Transformer: {"encoder_self": (B, L, h, S, S),
        "decoder_self": (B, L, h, T, T), "cross": (B, L, h, T, S)}.
        """
        raise NotImplementedError

    def reorder_state(self, state: DecoderState, index: torch.Tensor) -> DecoderState:
        """Select (and repeat) batch rows of `state`: row i of the result is row index[i]."""
        raise NotImplementedError
