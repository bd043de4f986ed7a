"""`train.kernels`: plain torch (`reference`), the CPU kernels (`cpu`) or the GPU path (`gpu`).

Shapes: B batch, T target steps.
A training step asks its speed object for six things: how a collated batch is shaped on the host
(`prepare`), the module to run (`wrap`) and how to compile it (`compile_options`), the tensors the
optimiser updates (`parameters`), the summed loss of a batch (`loss`) and a moment between
training phases to tidy the heap (`tidy_heap`). `PlainTorch` answers with the batch and the book
model themselves, torch.compile's defaults, one tensor per parameter, torch's cross-entropy and
nothing; attn_mt.kernels.cpu's `CpuSpeedups` answers with the CPU kernels and `GpuPath` with
kernels/gpu/transformer_pass.py. attn_mt/kernels is imported only when its kernels apply, so a
`reference` run never loads a module of it.
"""

from __future__ import annotations

import logging
from typing import Protocol

import torch
from torch import nn

from attn_mt.data.batch import Batch
from attn_mt.errors import UserError
from attn_mt.models.base import EncoderDecoder
from attn_mt.training.compiling import prepare_compile
from attn_mt.training.loss import masked_cross_entropy

log = logging.getLogger("attn_mt")

VERIFIED_ON_CARDS: dict[str, tuple[str, ...]] = {
    "reference": ("cuda",),  # the check-up on an H200 (docs/benchmarks.md, "One GPU: the check-up")
    "gpu": (),  # passed gpu_check on an H200 but trained slower there than the reference: not auto's
}
"""The accelerator device types on which `auto` may take each `train.kernels` path.

A path is listed for a device type once `gpu_check --quick` has passed on a card of that type and
the check-up's targets are met there (docs/gpu.md), with its table in docs/benchmarks.md. The CPU
paths are verified by the test suite.
"""

GPU_PATH_RAN_ON: dict[str, str] = {"cuda": "an H200"}
"""Device types where the GPU path passed `gpu_check --quick` without meeting its targets, and the card."""


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

    name: str  # "reference", "cpu" or "gpu", as run_summary.json records it
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


class GpuPath(PlainTorch):
    """`train.kernels: gpu` (`auto` once VERIFIED_ON_CARDS lists a card): kernels/gpu/transformer_pass.py.

    Other models train as with `reference`. With one process the output layer and the loss see
    the real target tokens only (DDP goes through the forward). Under train.compile the step is
    compiled once with dynamic shapes, so batches keep their own shapes and padding; a compile
    mode with CUDA graphs (`reduce-overhead`, `max-autotune`) needs static shapes, so there the
    batches are padded to a few shapes (`bucket_shape`) and compiled once per shape.
    """

    name = "gpu"

    def __init__(
        self, processes: int, compile: bool, compile_mode: str | None = None, pad_id: int | None = None
    ):
        from attn_mt.kernels.gpu.smoothed_loss import smoothed_cross_entropy_sum

        self.processes = processes
        self.bucket = compile and compile_mode in GRAPH_MODES
        if self.bucket and pad_id is None:
            raise ValueError("bucketing pads batches with the vocabulary's <pad>: give its pad_id")
        self.pad_id = pad_id  # used only to pad bucketed batches
        if compile:
            prepare_compile()  # before the first torch.compile, which fixes inductor's cache folder
        # compiled, the loss's float32 passes over the (M, V) logits fuse into one kernel each way; M
        # (the batch's real tokens) changes every step, so it is dynamic, and no CUDA graph is taken
        self.cross_entropy = (
            torch.compile(smoothed_cross_entropy_sum, dynamic=True) if compile else smoothed_cross_entropy_sum
        )
        self.applies = False  # whether the model has a GPU pass; wrap() decides
        self.compile_options = {"dynamic": False, "mode": compile_mode} if self.bucket else {"dynamic": True}

    def wrap(self, model: EncoderDecoder) -> EncoderDecoder:
        """The model behind its GPU pass (kernels/gpu/transformer_pass.py), sharing its parameters."""
        from attn_mt.kernels.gpu.transformer_pass import GPU_MODELS

        wrapper = GPU_MODELS.get(type(model))
        self.applies = wrapper is not None
        return model if wrapper is None else wrapper(model)

    def prepare(self, batch: Batch, trim_source: bool) -> Batch:
        """Trimmed, bucketed under compile, with the real target positions listed (prepare_batch)."""
        if not self.applies:
            return batch
        from attn_mt.kernels.gpu.transformer_pass import prepare_batch

        return prepare_batch(batch, self.pad_id, trim_source, self.bucket)

    def loss(
        self, net: nn.Module, batch: Batch, tgt_in: torch.Tensor, label_smoothing: float
    ) -> torch.Tensor:
        """The real-tokens-only loss, summed (transformer_pass.token_loss; fused when compiled)."""
        if not self.applies:
            return super().loss(net, batch, tgt_in, label_smoothing)
        from attn_mt.kernels.gpu.transformer_pass import PreparedBatch, prepare_batch, token_loss

        if not isinstance(batch, PreparedBatch):  # not collated by the trainer (tests, the profile)
            batch = prepare_batch(batch, self.pad_id, trim_source=False, bucket=False)
        return token_loss(
            net, batch, tgt_in, label_smoothing, self.processes == 1, cross_entropy=self.cross_entropy
        )


GRAPH_MODES = ("reduce-overhead", "max-autotune")  # torch.compile modes that capture CUDA graphs


def kernels_apply(choice: str, device: torch.device, compile: bool) -> bool:
    """Whether a run on `device` uses the CPU kernels: `auto` and `cpu` on the CPU, never with compile.

    torch.compile traces the book modules and fuses them itself; the kernels are tested on the CPU
    only, so on any other device `cpu` is an error (and `auto` is the GPU path where
    VERIFIED_ON_CARDS lists the device, see gpu_path_applies, and the reference path elsewhere).
    """
    if choice in ("reference", "gpu") or compile:
        return False
    if device.type != "cpu":
        if choice == "cpu":
            raise UserError(f"train.kernels: cpu runs on the CPU only, but the device is {device.type}")
        return False
    return True


def gpu_path_applies(choice: str, device: torch.device) -> bool:
    """Whether a run takes the GPU path: `gpu` on any device, `auto` where VERIFIED_ON_CARDS lists it."""
    return choice == "gpu" or (choice == "auto" and device.type in VERIFIED_ON_CARDS["gpu"])


def explain_choice(choice: str, device: torch.device) -> str | None:
    """The one log line a run's kernels choice calls for on `device`, or None.

    `auto` on a card not listed for the GPU path takes the reference path and says why; `gpu` there
    runs as asked and says once how it fared on a card of that type, or that it has not run on one.
    """
    if device.type == "cpu" or device.type in VERIFIED_ON_CARDS["gpu"]:
        return None
    card = GPU_PATH_RAN_ON.get(device.type)
    if choice == "auto" and device.type in VERIFIED_ON_CARDS["reference"]:
        why = (
            f"it trained faster than the GPU path on {card}"
            if card
            else "the GPU path has not yet passed gpu_check on a GPU"
        )
        return (
            f"train.kernels: auto takes the reference path on {device.type}: {why} (train.kernels: gpu "
            "opts in; docs/gpu.md)"
        )
    if choice == "gpu" and card:
        return (
            f"train.kernels: gpu on {device.type}: it passed gpu_check on {card} but trained slower there "
            "than the reference path, which auto takes (docs/benchmarks.md)"
        )
    if choice == "gpu":
        return (
            f"train.kernels: gpu has not yet been run on a {device.type} device; it is proven equal to the "
            "reference path on the CPU only (docs/gpu.md)"
        )
    return None


def choose_speed(
    choice: str,
    device: torch.device,
    compile: bool,
    processes: int,
    compile_mode: str | None = None,
    pad_id: int | None = None,
) -> Speed:
    """`train.kernels` for a run of `processes` processes on `device`: PlainTorch, the CPU or the GPU path.

    `pad_id` is the vocabulary's <pad>, which the GPU path pads bucketed batches with (needed then).
    """
    notice = explain_choice(choice, device)
    if notice:
        log.log(logging.WARNING if choice == "gpu" else logging.INFO, notice)
    if gpu_path_applies(choice, device):
        return GpuPath(processes, compile, compile_mode, pad_id)
    if not kernels_apply(choice, device, compile):
        return PlainTorch()
    from attn_mt.kernels.cpu import for_training  # here only: a reference run never imports the kernels

    return for_training(processes)
