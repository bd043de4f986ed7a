"""Hand-written CPU kernels for the book's models, chosen in one place by `train.kernels`.

Each module names the book module it replaces; tests prove each equal to it (values, gradients and
dropout masks from the same seed):
- dropout.py: `Dropout` for torch.nn.Dropout (a cheaper way to draw the same Bernoulli mask).
- packed_attention.py: multi-head scaled dot-product attention without splitting the heads.
- transformer_blocks.py: EncoderBlock / DecoderBlock training passes as one autograd function each.
- recurrence.py: the unpacked GRU encoder and the teacher-forced Bahdanau decoder loop.
- models.py: the book's models with those kernels behind their training passes.
At the book's sizes a CPU training step is bound by the cost of each small operation and of
autograd's bookkeeping, not by arithmetic; these kernels do the same maths in fewer, larger steps.
"""

from __future__ import annotations

import torch

from attn_mt.config import KERNEL_CHOICES
from attn_mt.errors import UserError
from attn_mt.kernels.dropout import install_dropout
from attn_mt.kernels.models import KERNEL_MODELS, KernelBacked
from attn_mt.models.base import EncoderDecoder


def kernels_apply(choice: str, device: torch.device, compile: bool) -> bool:
    """Whether a run on `device` uses the CPU kernels: `auto` and `cpu` on the CPU, never with compile.

    torch.compile traces the book modules and fuses them itself; the kernels are tested on the CPU
    only, so on any other device `auto` means the reference path and `cpu` is an error.
    """
    if choice == "reference" or compile:
        return False
    if device.type != "cpu":
        if choice == "cpu":
            raise UserError(f"train.kernels: cpu runs on the CPU only, but the device is {device.type}")
        return False
    return True


def with_kernels(model: EncoderDecoder, choice: str, device: torch.device, compile: bool) -> EncoderDecoder:
    """`model` itself on the reference path, or the model with its CPU kernels behind it.

    With kernels, every torch.nn.Dropout inside `model` becomes kernels.dropout.Dropout (in place;
    no parameter changes) and the result wraps `model`, sharing its parameters.
    """
    wrapper = KERNEL_MODELS.get(type(model))
    if wrapper is None or not kernels_apply(choice, device, compile):
        return model
    install_dropout(model)
    return wrapper(model)


def uses_kernels(model: EncoderDecoder) -> bool:
    """Whether `model` came out of `with_kernels` with kernels behind it."""
    return isinstance(model, KernelBacked)


__all__ = ["KERNEL_CHOICES", "kernels_apply", "uses_kernels", "with_kernels"]
