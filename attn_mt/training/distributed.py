"""Multi-process training with torch.distributed, as launched by torchrun (NCCL on CUDA, Gloo on CPU).

    torchrun --nproc_per_node 2 -m attn_mt train configs/transformer.yaml

Every rank runs the same loop on its own share of each step's batches; rank 0 alone writes files.
"""

from __future__ import annotations

import logging
import os
import sys
from dataclasses import dataclass
from typing import Any, NoReturn

import torch
import torch.distributed as dist

from attn_mt.errors import UserError
from attn_mt.run.device import pick_device


@dataclass(frozen=True)
class DistContext:
    """This process's place in the job (world_size 1 when not launched by torchrun)."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0

    @property
    def is_main(self) -> bool:
        """Rank 0 writes checkpoints, metrics, logs and progress bars."""
        return self.rank == 0

    @property
    def enabled(self) -> bool:
        """True when there is more than one process."""
        return self.world_size > 1

    def barrier(self) -> None:
        """Wait for every rank."""
        if self.enabled:
            dist.barrier()

    def sum(self, values: list[float]) -> list[float]:
        """Element-wise sum of `values` over all ranks (float64 on the CPU side)."""
        if not self.enabled:
            return values
        device = (
            torch.device("cuda", self.local_rank) if dist.get_backend() == "nccl" else torch.device("cpu")
        )
        tensor = torch.tensor(values, dtype=torch.float64, device=device)
        dist.all_reduce(tensor, op=dist.ReduceOp.SUM)
        return tensor.cpu().tolist()

    def rank_batches(self, plan: list[list[int]], position: int, per_rank: int) -> list[list[int]]:
        """This rank's `per_rank` batches of the step starting at `position` in an epoch's plan.

        A step takes per_rank x world_size consecutive batches (wrapping round to the start of the
        plan at the end of an epoch, so every rank makes the same number of steps); rank r takes
        its per_rank-long slice, so N ranks see what one process accumulating them would.
        """
        group = plan[position : position + per_rank * self.world_size]
        while len(group) < per_rank * self.world_size:
            group = group + plan[: per_rank * self.world_size - len(group)]
        return group[self.rank * per_rank : (self.rank + 1) * per_rank]

    def broadcast(self, obj: Any) -> Any:
        """Rank 0's `obj` on every rank."""
        if not self.enabled:
            return obj
        box = [obj]
        dist.broadcast_object_list(box, src=0)
        return box[0]


def init_distributed(device_name: str) -> DistContext:
    """Join the process group torchrun describes in the environment, if any."""
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    if world_size <= 1:
        return DistContext()
    rank, local_rank = int(os.environ["RANK"]), int(os.environ.get("LOCAL_RANK", "0"))
    if device_name == "mps":
        raise UserError("distributed training supports cuda (NCCL) and cpu (Gloo), not mps")
    use_cuda = pick_device(device_name).type == "cuda"
    if use_cuda:
        torch.cuda.set_device(local_rank)
    if not dist.is_initialized():
        dist.init_process_group(backend="nccl" if use_cuda else "gloo")
    return DistContext(rank, world_size, local_rank)


def rank_device(device_name: str, ctx: DistContext) -> torch.device:
    """This process's device: `--device` chosen as in one process; under torchrun CUDA is cuda:LOCAL_RANK."""
    device = pick_device(device_name)
    if ctx.enabled and device.type == "cuda":
        return torch.device("cuda", ctx.local_rank)
    return device


def shutdown_distributed() -> None:
    """Leave the process group."""
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


def end_worker_process(code: int) -> NoReturn:
    """End a torchrun worker with `code` once its output is flushed, skipping interpreter teardown.

    DDP keeps references to the process group that outlive it (torch 2.13), so
    destroy_process_group cannot free the Gloo group and its worker threads keep running. When
    one of them lets go of a finished collective's tensors while the interpreter is being torn
    down, it takes the GIL of a dying interpreter and aborts the process ("terminate called
    without an active exception", about one two-process run in ten on 2 cores). Every file of the
    run is written and closed before this is called.
    """
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    os._exit(code)
