"""Every CPU speed measure of training, turned on together by `train.kernels: cpu` (`auto` on the CPU).

Each module names the torch or book code it replaces; tests prove each equal to it (values,
gradients and dropout masks from the same seed):
- kernel_models.py: the book's models with the kernels below behind their training passes.
- recurrence.py: the unpacked GRU encoder and the teacher-forced Bahdanau decoder loop.
- transformer_blocks.py: EncoderBlock / DecoderBlock training passes as one autograd function each.
- packed_attention.py: multi-head scaled dot-product attention without splitting the heads.
- dropout.py: `Dropout` for torch.nn.Dropout (a cheaper way to draw the same Bernoulli mask).
- chunked_loss.py: chunked cross-entropy, and the output layer's loss without its logits.
- flat_parameters.py: one flat tensor for the optimiser instead of one per parameter.
- heap.py: glibc keeps freed memory for reuse and hands the holes back between phases.
At the book's sizes a CPU training step is bound by the cost of each small operation and of
autograd's bookkeeping, not by arithmetic; these kernels do the same maths in fewer, larger steps.
The trainer reaches this package through `for_training` only, and only when the kernels apply
(training/speed.py), so a `train.kernels: reference` run never imports it.
"""

from __future__ import annotations

from torch import nn

from attn_mt.data.batch import Batch
from attn_mt.kernels.cpu.chunked_loss import CpuLoss
from attn_mt.kernels.cpu.dropout import install_dropout
from attn_mt.kernels.cpu.flat_parameters import FlatParameters
from attn_mt.kernels.cpu.heap import keep_freed_memory, release_freed_memory
from attn_mt.kernels.cpu.kernel_models import KERNEL_MODELS
from attn_mt.models.base import EncoderDecoder


class CpuSpeedups:
    """What a training step runs with `train.kernels: cpu`; training/speed.py's PlainTorch is the reference.

    With several processes (DDP) the loss goes through the model's forward, where DDP synchronises
    the gradients, and the heap is not trimmed (a collective's threads may allocate meanwhile).
    """

    name = "cpu"  # as run_summary.json records it
    compile_options: dict = {}  # never compiled: train.kernels cpu refuses train.compile

    def __init__(self, processes: int):
        self.processes = processes
        self.loss = CpuLoss(through_output_layer=processes == 1)

    def prepare(self, batch: Batch, trim_source: bool) -> Batch:
        """The batch as collated: the trainer trims it on its way to the device."""
        return batch

    def wrap(self, model: EncoderDecoder) -> EncoderDecoder:
        """The model with its CPU kernels behind it, sharing its parameters (the model itself if it has none).

        Every torch.nn.Dropout inside `model` becomes kernels.cpu.dropout.Dropout, in place: the book
        modules' own passes, where no kernel applies, then draw the masks the kernels draw.
        """
        wrapper = KERNEL_MODELS.get(type(model))
        if wrapper is None:
            return model
        install_dropout(model)
        return wrapper(model)

    def parameters(self, model: nn.Module) -> FlatParameters:
        """The model's trainable parameters as views of one flat tensor."""
        return FlatParameters(model)

    def tidy_heap(self) -> None:
        """Between training phases: return the heap's free holes, on a single process only."""
        if self.processes == 1:
            release_freed_memory()


def for_training(processes: int) -> CpuSpeedups:
    """Turn on the CPU speed measures of a training run of `processes` processes (the heap's now)."""
    keep_freed_memory()
    return CpuSpeedups(processes)


__all__ = ["CpuSpeedups", "for_training"]
