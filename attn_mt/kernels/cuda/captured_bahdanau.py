"""The GRU + Bahdanau model's training pass in a form one CUDA graph can hold (`train.capture_step`).

Shapes: B batch, S source steps, E embedding size, H hidden, L the encoder's GRU layers.

A captured graph replays the kernels of the batch it was captured on, with new numbers in the same
tensors. The book's packed encoder (`pack_padded: true`, models/bahdanau.py) does not fit: it reads
the source lengths on the host and packs every batch its own way, so a replay would pack the next
batch as the first. Here the encoder's GRU runs one layer at a time over the padded batch (cuDNN's
kernel on CUDA, as nn.GRU's), and each layer's final state is gathered at each sentence's last real
step. The padding comes after the real steps, so every real step's output and those final states are
the packed encoder's, and the outputs past each length are set to zero, as `pad_packed_sequence`
leaves them: the same numbers, the lengths read on the device. Dropout between the layers draws its
own mask (the packed GRU drops the same share of the same outputs, with other draws). The decoder,
its attention, the output layer and the loss are the book model's own, step loop and all: inside a
graph its launches cost nothing on the host.
"""

from __future__ import annotations

import contextlib
import warnings

import torch
from torch import nn
from torch.nn import functional as F

from attn_mt.kernels.kernel_backed import KernelBacked
from attn_mt.models.bahdanau import GRUBahdanau, gru_in_float32
from attn_mt.models.base import DecoderState, check_source


def gru_layer(rnn: nn.GRU, layer: int, inputs: torch.Tensor) -> torch.Tensor:
    """Layer `layer` of `rnn` alone over inputs (B, S, E or H) from a zero state: its outputs (B, S, H)."""
    weights = [getattr(rnn, f"{name}_l{layer}") for name in ("weight_ih", "weight_hh", "bias_ih", "bias_hh")]
    start = inputs.new_zeros(1, inputs.shape[0], rnn.hidden_size)  # (1, B, H)
    in_float32 = gru_in_float32(inputs.device.type)  # outside autocast, as models/bahdanau.py's run_gru
    precision = torch.autocast(inputs.device.type, enabled=False) if in_float32 else contextlib.nullcontext()
    with warnings.catch_warnings(), precision:
        # a layer's weights may not be one flat cuDNN buffer: cuDNN copies them, all that it warns of
        warnings.filterwarnings("ignore", message="RNN module weights are not part of single contiguous")
        if in_float32:
            inputs, start = inputs.float(), start.float()
        return torch.gru(inputs, start, weights, True, 1, 0.0, rnn.training, False, True)[0]


def layered_gru(rnn: nn.GRU, inputs: torch.Tensor, lens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """`rnn` over right-padded inputs (B, S, E) with `lens` (B,) on the device: what the packed GRU gives.

    The top layer's outputs (B, S, H), zero past each length, and each layer's state at its last real
    step (L, B, H). A length of 0 (an empty row of a fixed batch shape has 1) would read step 0.
    """
    last = (lens - 1).clamp(min=0).view(-1, 1, 1).expand(-1, 1, rnn.hidden_size)  # (B, 1, H)
    finals = []
    outputs = inputs
    for layer in range(rnn.num_layers):
        if layer > 0:
            outputs = F.dropout(outputs, rnn.dropout, rnn.training)
        outputs = gru_layer(rnn, layer, outputs)  # (B, S, H)
        finals.append(outputs.gather(1, last).squeeze(1))  # (B, H)
    steps = torch.arange(outputs.shape[1], device=outputs.device)  # (S,)
    padding = (steps >= lens.unsqueeze(1)).unsqueeze(-1)  # (B, S, 1)
    return outputs.masked_fill(padding, 0.0), torch.stack(finals)


class CapturedBahdanau(KernelBacked):
    """The book's packed GRUBahdanau with its encoder replaced by `layered_gru`; all else its own."""

    def __init__(self, model: GRUBahdanau):
        super().__init__(model)

    def encode(self, src: torch.Tensor, src_lens: torch.Tensor) -> DecoderState:
        """The book's encode: outputs (B, S, H), the decoder's start (L, B, H), the mask; no host read."""
        model = self.model
        check_source(src, src_lens)
        memory, hidden = layered_gru(model.encoder.rnn, model.encoder.embedding(src), src_lens)
        return model.encoded(memory, hidden, src_lens)


def for_capture(model: nn.Module) -> nn.Module:
    """The form of `model` a CUDA graph captures: the GRU model's `CapturedBahdanau`, any other as it is."""
    if isinstance(model, GRUBahdanau) and model.encoder.pack_padded:
        return CapturedBahdanau(model)
    return model
