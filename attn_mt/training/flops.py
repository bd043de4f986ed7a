"""MFU, defined once: the FLOPs of a step's real tokens over the card's dense bf16 peak, in the steady state.

Shapes: B batch rows. S and T are a sentence's source and target lengths (`<eos>` counted).
Training costs 6 FLOPs a weight a token the weight touches (2 forward, 4 backward): the encoder's
matrix weights for each source token, the decoder's and the output layer's for each target token
(embedding tables are looked up, not multiplied). The attention's scores and weighted sums add
12·H a query-key pair a layer (2·H forward for each, twice that for the backward, times two
products): S² pairs a sentence in each encoder layer, T² in each decoder self-attention and S·T in
each cross attention. Only real tokens count (`src_lens`, `tgt_lens`), never the padded cells of a
batch, and the whole causal square is counted (as the FLOPs a model needs, not what a kernel skips).
MFU is those FLOPs a second over the card's dense bf16 peak (attn_mt/machine.py, PEAK_TFLOPS), taken
over the steady state: the training steps after a session's first STEADY_AFTER (training/run_state.py),
so compiling and warming up are left out. run_summary.json's `steady_mfu` and scripts/gpu.py's
`profile` table use these functions; docs/gpu.md ("MFU") states the same definition.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import nn

from attn_mt.data.batch import Batch
from attn_mt.machine import gpu_peak_tflops


@dataclass(frozen=True)
class ModelFlops:
    """What a model's training FLOPs are counted from: its per-token weights, width and depths."""

    encoder: int  # matrix weights the encoder applies to each source token
    decoder: int  # matrix weights the decoder blocks apply to each target token
    output: int  # the output layer's weights
    hidden: int  # H
    encoder_layers: int
    decoder_layers: int

    @classmethod
    def of(cls, model: nn.Module) -> ModelFlops | None:
        """The counts of a Transformer (encoder.blks and decoder.blks), None for a model without blocks."""
        encoder, decoder = getattr(model, "encoder", None), getattr(model, "decoder", None)
        if not hasattr(encoder, "blks") or not hasattr(decoder, "blks"):
            return None
        output = model.output_layer.weight
        tables = [part.embedding.weight for part in (encoder, decoder)]  # looked up, not multiplied
        tables += [
            p for part in (encoder, decoder) for p in part.pos_encoding.parameters()
        ]  # learned positions
        skip = {id(output), *(id(table) for table in tables)}

        def count(part: nn.Module) -> int:
            return sum(p.numel() for p in part.parameters() if p.dim() == 2 and id(p) not in skip)

        return cls(
            count(encoder),
            count(decoder),
            output.numel(),
            decoder.num_hiddens,
            len(encoder.blks),
            len(decoder.blks),
        )

    def step(self, src_lens: torch.Tensor, tgt_lens: torch.Tensor) -> float:
        """Training FLOPs of a batch's real tokens: lengths (B,) on the host."""
        src, tgt = src_lens.double(), tgt_lens.double()  # (B,), (B,)
        dense = 6 * (self.encoder * float(src.sum()) + (self.decoder + self.output) * float(tgt.sum()))
        pairs = self.encoder_layers * float(src.dot(src)) + self.decoder_layers * float(
            tgt.dot(tgt) + src.dot(tgt)
        )
        return dense + 12 * self.hidden * pairs


def mfu(flops: float, seconds: float, peak_tflops: float | None) -> float | None:
    """Model FLOPs utilisation: `flops` done in `seconds` over a peak of `peak_tflops`; None without one."""
    if not peak_tflops or seconds <= 0:
        return None
    return flops / seconds / (peak_tflops * 1e12)


def step_flops(model_flops: ModelFlops | None, peak_tflops: float | None, batches: Sequence[Batch]) -> float:
    """This rank's training FLOPs of `batches`' real tokens (still on the host), where MFU is reported."""
    if peak_tflops is None or model_flops is None:
        return 0.0
    return sum(model_flops.step(batch.src_lens, batch.tgt_lens) for batch in batches)


def card_peak_tflops(device: torch.device) -> float | None:
    """The dense bf16 peak of the CUDA card `device` names, when attn_mt/machine.py lists it; else None."""
    return gpu_peak_tflops(torch.cuda.get_device_name(device)) if device.type == "cuda" else None
