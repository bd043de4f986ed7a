"""Multi-process training with torch.distributed, as launched by torchrun (NCCL on CUDA, Gloo on CPU).

    torchrun --nproc_per_node 2 -m attn_mt train configs/transformer.yaml

Every rank runs the same loop on its own share of each step's batches; rank 0 alone writes files.
Rank 0 also validates alone: the other ranks wait for it in a barrier of a Gloo group with a long
timeout (`wait_for_main`), not inside an NCCL collective, which NCCL's watchdog would abort after
its default 10 minutes; a slow validation (a big valid split, beam search on a busy GPU) then
costs time, never the job.
"""

from __future__ import annotations

import inspect
import logging
import os
import re
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, NoReturn

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from attn_mt.errors import UserError
from attn_mt.models.positional import PositionalEncoding
from attn_mt.run.device import pick_device

MAIN_RANK_WAIT = timedelta(hours=2)  # how long the other ranks wait for rank 0 to validate and save
# what torch's RuntimeErrors say when a peer process is gone: gloo's transport, NCCL, the store
PEER_LOST_MARKERS = (
    "/gloo/",
    "gloo::",
    "NCCL",
    "Connection reset",
    "Connection closed",
    "Connection refused",
)


@dataclass(frozen=True)
class DistContext:
    """This process's place in the job (world_size 1 when not launched by torchrun)."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    waiting_group: Any = field(default=None, compare=False, repr=False)  # Gloo, timeout MAIN_RANK_WAIT

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

    def wait_for_main(self) -> None:
        """Every rank waits here until rank 0 arrives, on the Gloo group whose timeout is MAIN_RANK_WAIT."""
        if self.enabled:
            dist.barrier(group=self.waiting_group)

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

    def step_batches(self, plan: list[list[int]], start: int, per_rank: int) -> Iterator[list[list[int]]]:
        """This rank's batches for each step from position `start` of an epoch's plan to its end."""
        for position in range(start, len(plan), per_rank * self.world_size):
            yield self.rank_batches(plan, position, per_rank)

    def from_main(self, compute: Callable[[], Any]) -> Any:
        """Rank 0's `compute()` on every rank: the others wait in `wait_for_main`, then receive it."""
        value = compute() if self.is_main else None
        self.wait_for_main()
        return self.broadcast(value)

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
        backend = "nccl" if use_cuda else "gloo"
        store = attempt_store(rank, world_size)
        if store is None:
            dist.init_process_group(backend=backend)
        else:
            dist.init_process_group(backend=backend, store=store, rank=rank, world_size=world_size)
    waiting_group = dist.new_group(backend="gloo", timeout=MAIN_RANK_WAIT)
    return DistContext(rank, world_size, local_rank, waiting_group)


def attempt_store(rank: int, world_size: int) -> dist.Store | None:
    """The store of this attempt of a torchrun job that shares its launcher's store, else None (env://).

    torchrun (torch 2.13) hands its workers the store its rendezvous runs on, the same server for
    every restart of the group (TORCHELASTIC_USE_AGENT_STORE), and the process group keeps its
    peers' addresses there under names that do not change. A restarted group then reads the
    addresses of the processes it replaces and fails ("Connection refused" in connectFullMesh) or
    hangs. The keys of each attempt go under their own prefix here: the restart count, which the
    launcher gives every process of a machine alike. Launchers on several machines count their
    restarts apart, so there `TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1` (docs/distributed.md) gives
    every attempt a new store instead.
    """
    if os.environ.get("TORCHELASTIC_USE_AGENT_STORE") != "True":
        return None
    attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
    server = dist.TCPStore(
        os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), world_size, is_master=False
    )
    return dist.PrefixStore(f"attn_mt/{os.environ.get('TORCHELASTIC_RUN_ID', '')}/attempt_{attempt}", server)


def only_fixed_tables(net: nn.Module) -> bool:
    """Whether every buffer of `net` is a sinusoidal positional table, the same on every rank.

        PositionalEncoding.P is a function of the position and the width alone (models/positional.py),
        never trained, and grows the same way wherever a longer batch arrives; no other module of
        the book's models registers a buffer (`model.norm: batch`'s BatchNorm does, and its running
        statistics are then broadcast from rank 0). Broadcasting such tables from rank 0 before every
        forward only costs time (and would fail the step a rank's table has grown but rank 0's has not), so
    DDP is built with broadcast_buffers (torch 2.13: forward_sync_buffers) off.
    """
    for module in net.modules():
        if any(True for _ in module.buffers(recurse=False)) and not isinstance(module, PositionalEncoding):
            return False
    return True


def ddp_options(net: nn.Module, device: torch.device) -> dict[str, Any]:
    """DistributedDataParallel's arguments for `net` on `device`: broadcast buffers only where needed."""
    # torch 2.13 renamed broadcast_buffers (which also skipped the sync at construction, harmless here)
    known = inspect.signature(DistributedDataParallel).parameters
    sync_key = "forward_sync_buffers" if "forward_sync_buffers" in known else "broadcast_buffers"
    return {
        "device_ids": [device.index] if device.type == "cuda" else None,
        sync_key: not only_fixed_tables(net),
    }


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


def lost_peer_message(exc: BaseException) -> str | None:
    """One line for an error of a collective, the store or a connection to a peer process; None for others.

    When one process of a torchrun job dies, the others fail in their next collective (gloo:
    "Connection reset by peer"; a restarted group can meet "Connection refused"). Such an error
    says nothing about this process, so it ends with this line instead of a traceback and torchrun
    restarts the whole group (--max-restarts) or ends the job.
    """
    text = str(exc).strip()
    peer_error = isinstance(exc, dist.DistError) or (
        isinstance(exc, RuntimeError) and any(marker in text for marker in PEER_LOST_MARKERS)
    )
    if not peer_error:
        return None
    first = re.sub(r"^\[[^\]]*\]\s*", "", text.splitlines()[0] if text else type(exc).__name__)
    first = first.split(". This is typically caused")[0]
    rank, world_size = os.environ.get("RANK", "?"), os.environ.get("WORLD_SIZE", "?")
    return (
        f"rank {rank} of {world_size} stops: lost contact with another process of the job ({first[:200]}); "
        "torchrun restarts the group when --max-restarts allows (--auto-resume continues from last.pt)"
    )


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
