"""The random state a checkpoint carries, so a resumed run draws the dropout masks it would have drawn.

A checkpoint holds torch's CPU generator and the generator of the one CUDA device the run trains
on (None on other devices). Checkpoints written before that held `torch.cuda.get_rng_state_all()`,
a list with one state per visible GPU: restoring the whole list where fewer GPUs are visible
(another node, CUDA_VISIBLE_DEVICES=1) indexes a generator that does not exist, so from such a list
only the entry of the device the run trained on is read. That is entry 0: a one-process run trains
on the current device, which is the first visible one, and under torchrun rank 0 (the only rank
that writes checkpoints) trains on cuda:0; the other ranks reseed after a resume (training/launch.py).
"""

from __future__ import annotations

from typing import Any

import torch


def rng_state(device: torch.device) -> dict[str, Any]:
    """torch's CPU generator state and, when training on CUDA, that one device's generator state."""
    cuda = torch.cuda.get_rng_state(device) if device.type == "cuda" else None
    return {"torch": torch.get_rng_state(), "cuda": cuda}


def saved_cuda_state(saved: Any) -> torch.Tensor | None:
    """The CUDA generator state in a checkpoint's rng["cuda"]: a state, the old per-GPU list, or none."""
    if isinstance(saved, torch.Tensor):
        return saved
    if isinstance(saved, (list, tuple)) and saved:
        return saved[0]  # the old get_rng_state_all() list: entry 0 is the device rank 0 trained on
    return None


def restore_rng(saved: dict[str, Any], device: torch.device) -> None:
    """Put back the generators `rng_state` saved; a CUDA state applies only to a run on CUDA."""
    torch.set_rng_state(saved["torch"])
    cuda = saved_cuda_state(saved.get("cuda"))
    if cuda is not None and device.type == "cuda":
        torch.cuda.set_rng_state(cuda, device)
