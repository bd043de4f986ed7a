"""`train.kernels`: plain torch (`reference`) or the CPU kernels (`cpu`).

Shapes: B batch, T target steps.
A training step asks its speed object for six things: how a collated batch is shaped on the host
(`prepare`), the module to run (`wrap`) and how to compile it (`compile_options`), the tensors the
optimiser updates (`parameters`), the summed loss of a batch (`loss`) and a moment between
training phases to tidy the heap (`tidy_heap`). `PlainTorch` answers with the batch and the book
model themselves, torch.compile's defaults, one tensor per parameter, torch's cross-entropy and
nothing; attn_mt.kernels.cpu's `CpuSpeedups` answers with the CPU kernels. attn_mt/kernels is
imported only when its kernels apply, so a `reference` run never loads a module of it. On a GPU
every run takes the reference path: the book's modules, whose attention hands torch's fused kernels
every mask as an aligned bias (models/attention.py), and `train.compile_scope: step` with
`data.batch_shapes` for fewer launches (training/whole_step.py). The GPU path that trained the
Transformer through a pass of its own (`train.kernels: gpu`) was removed (issue 70): it trained
slower than the reference path on an H200, and its loss's variable-length index could not be
captured in a CUDA graph.
"""

from __future__ import annotations

from typing import Protocol

import torch
from torch import nn

from attn_mt.data.batch import Batch
from attn_mt.errors import UserError
from attn_mt.models.base import EncoderDecoder
from attn_mt.training.loss import masked_cross_entropy


class ParameterLayout(Protocol):
    """How the trainable parameters are laid out for the optimiser."""

    @property
    def tensors(self) -> list[torch.Tensor]:
        """What the optimiser updates and gradient clipping measures."""
        ...

    def zero_grad(self) -> None:
        """Forget the gradients before a step's first backward."""

    def gather_grads(self) -> None:
        """After the step's last backward: put the gradients where `tensors` sees them."""

    def to_checkpoint(self, state: dict) -> dict:
        """The optimiser's state_dict in the per-parameter layout checkpoints hold."""
        ...

    def from_checkpoint(self, state: dict) -> dict:
        """A checkpoint's per-parameter optimiser state in this layout."""
        ...


class Speed(Protocol):
    """What `train.kernels` decides for a training step."""

    name: str  # "reference" or "cpu", as run_summary.json records it
    compile_options: dict  # keyword arguments of torch.compile under train.compile

    def prepare(self, batch: Batch, trim_source: bool) -> Batch:
        """A collated batch (B, S), (B, T) as the step wants it, made on the host before the copy."""
        ...

    def wrap(self, model: EncoderDecoder) -> EncoderDecoder:
        """The module a training step runs for `model`, sharing its parameters."""
        ...

    def parameters(self, model: nn.Module) -> ParameterLayout:
        """`model`'s trainable parameters, laid out for the optimiser."""
        ...

    def loss(
        self, net: nn.Module, batch: Batch, tgt_in: torch.Tensor, label_smoothing: float
    ) -> torch.Tensor:
        """`net`'s teacher-forced cross-entropy of `batch.tgt` (B, T) from `tgt_in` (B, T), summed."""
        ...

    def tidy_heap(self) -> None:
        """Between training phases (after a validation)."""


class SeparateParameters:
    """The trainable parameters as they are: the optimiser updates one tensor per parameter."""

    def __init__(self, model: nn.Module):
        self.tensors = [p for p in model.parameters() if p.requires_grad]

    def zero_grad(self) -> None:
        """Forget the parameters' gradients, so the next backward writes them afresh."""
        for param in self.tensors:
            param.grad = None

    def gather_grads(self) -> None:
        """Nothing to gather: each parameter holds its own gradient."""

    def to_checkpoint(self, state: dict) -> dict:
        """The state as it is: already per parameter."""
        return state

    def from_checkpoint(self, state: dict) -> dict:
        """The state as it is: already per parameter."""
        return state


class PlainTorch:
    """`train.kernels: reference`: the book's modules, torch's cross-entropy, one tensor per parameter."""

    name = "reference"
    compile_options: dict = {}  # torch.compile's defaults

    def prepare(self, batch: Batch, trim_source: bool) -> Batch:
        """The batch as collated: the trainer trims it on its way to the device."""
        return batch

    def wrap(self, model: EncoderDecoder) -> EncoderDecoder:
        """The model itself."""
        return model

    def parameters(self, model: nn.Module) -> SeparateParameters:
        """The model's trainable parameters, each its own tensor."""
        return SeparateParameters(model)

    def loss(
        self, net: nn.Module, batch: Batch, tgt_in: torch.Tensor, label_smoothing: float
    ) -> torch.Tensor:
        """torch's cross-entropy of `net`'s logits (B, T, V), summed over the real target tokens."""
        logits = net(batch.src, batch.src_lens, tgt_in)  # (B, T, V)
        return masked_cross_entropy(logits, batch.tgt, batch.tgt_lens, label_smoothing)

    def tidy_heap(self) -> None:
        """Nothing: the heap is glibc's as it comes."""


def kernels_apply(choice: str, device: torch.device, compile: bool) -> bool:
    """Whether a run on `device` uses the CPU kernels: `auto` and `cpu` on the CPU, never with compile.

    torch.compile traces the book modules and fuses them itself; the kernels are tested on the CPU
    only, so on any other device `cpu` is an error and `auto` is the reference path.
    """
    if choice == "reference" or compile:
        return False
    if device.type != "cpu":
        if choice == "cpu":
            raise UserError(f"train.kernels: cpu runs on the CPU only, but the device is {device.type}")
        return False
    return True


def choose_speed(choice: str, device: torch.device, compile: bool, processes: int) -> Speed:
    """`train.kernels` for a run of `processes` processes on `device`: PlainTorch or the CPU kernels."""
    if not kernels_apply(choice, device, compile):
        return PlainTorch()
    from attn_mt.kernels.cpu import for_training  # here only: a reference run never imports the kernels

    return for_training(processes)
