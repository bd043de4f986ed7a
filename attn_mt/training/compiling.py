"""`train.compile`: torch.compile's options and caches, and the batches that compile every graph first.

Shapes: B batch rows, S source steps, T target steps.
A compiled step compiles (and, with `train.compile_mode: reduce-overhead`, captures a CUDA graph)
the first time it meets a shape. `warm_up_batches` picks the batches that meet every shape a run
will see (every fixed shape of data.batch_shapes; with dynamic shapes the batches of fewest and
most rows), so the trainer compiles them all before its first timed or logged step and
reports that time apart (`compile_s` in run_summary.json and the log). The FX graph cache keeps compiled
graphs on disk, so a restarted or resumed run loads them instead of compiling again.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Protocol

import torch

from attn_mt.config import Config
from attn_mt.data.batch import Batch
from attn_mt.data.dataset import NMTData
from attn_mt.training.random_state import restore_rng, rng_state
from attn_mt.training.run_state import Progress

log = logging.getLogger("attn_mt")

RECOMPILE_LIMIT = 64  # graphs dynamo may build for one frame: one per bucket shape, and DDP's splits


def inductor_cache_dir() -> Path:
    """Where compiled graphs persist across runs: $TORCHINDUCTOR_CACHE_DIR, else under attn-mt's cache."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(os.environ.get("TORCHINDUCTOR_CACHE_DIR") or Path(base) / "attn-mt" / "inductor")


def prepare_compile() -> None:
    """Before the first torch.compile of a process: the graph caches on, on disk; the recompile limit raised.

    torch.compile fixes inductor's cache folder the first time it is called, so this comes first.
    Sizes that are equal in one batch are kept apart (no duck shapes), so they guard nothing.
    Dynamo's recompile limit is raised for every compiled run, DDP included: past torch's default
    of 8 graphs a frame (the fixed shapes of data.batch_shapes, or the recompiles a new rank
    count or the last, smaller batch cause) dynamo falls back to eager mode without an error.
    """
    os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", str(inductor_cache_dir()))
    import torch._dynamo.config as dynamo_config
    import torch._functorch.config as functorch_config
    import torch._inductor.config as inductor_config
    import torch.fx.experimental._config as fx_config

    if hasattr(fx_config, "use_duck_shape"):
        # dynamic shapes: a batch whose source and target widths happen to be equal would otherwise
        # share one symbol and guard on S == T, and the next batch would recompile
        fx_config.use_duck_shape = False
    inductor_config.fx_graph_cache = True
    if hasattr(functorch_config, "enable_autograd_cache"):  # torch >= 2.5: the backward's graphs too
        functorch_config.enable_autograd_cache = True
    dynamo_config.recompile_limit = max(dynamo_config.recompile_limit, RECOMPILE_LIMIT)


def compile_options(speed_options: dict, mode: str) -> dict:
    """torch.compile's keyword arguments: the speed object's, with `train.compile_mode` unless it set one.

    `cuda-graphs` (the whole step's own capture, training/whole_step.py) compiles a module as `default`.
    """
    return {"mode": None if mode in ("default", "cuda-graphs") else mode, **speed_options}


def net_compile_options(speed_options: dict, batch_shapes: int) -> dict:
    """The speed object's compile options; with fixed batch shapes (data.batch_shapes) one static graph
    each, all compiled in the warm-up."""
    return {**speed_options, **({"dynamic": False} if batch_shapes else {})}


def compiled(net: torch.nn.Module, speed_options: dict, tc: Any) -> torch.nn.Module:
    """`net` compiled in train.compile_mode under train.compile (`tc`: the train section), else `net`.

    Under train.compile_scope: step the trainer compiles the whole step instead (training/whole_step.py),
    and the module alone only where the whole step is refused.
    """
    if not tc.compile or tc.compile_scope == "step":
        return net
    return torch.compile(net, **compile_options(speed_options, tc.compile_mode))


def warm_up_batches(
    plan: Sequence[Sequence[int]], collate: Callable[[Sequence[int]], Batch], bucketed: bool
) -> list[Batch]:
    """One collated batch of each shape the plan's batches take (`bucketed`), else a few extremes.

    `plan` is the batches (index lists) of the epochs to cover: a later epoch's shuffle can make a
    batch shape none of them had, which then compiles inside that epoch's step (and its log window).
    """
    if bucketed:
        by_shape: dict[tuple[int, ...], Batch] = {}
        for indices in plan:
            batch = collate(indices)
            by_shape.setdefault((*batch.src.shape, *batch.tgt.shape), batch)  # (B, S, B, T)
        return list(by_shape.values())
    # dynamic shapes: one graph serves every size but 0 and 1, which dynamo specialises; under a token
    # budget the batch of fewest rows is the widest and that of most rows the narrowest
    rows = [len(indices) for indices in plan]
    picks = sorted({rows.index(min(rows)), rows.index(max(rows))}) if plan else []
    return [collate(plan[i]) for i in picks]


def compile_shapes(passes: Callable[[], None], device: torch.device) -> float:
    """Run the warm-up `passes` (forward and backward, no update), restoring the RNG state: their seconds.

    The run's random stream is then that of a run without them, so compiling changes no result.
    """
    started = time.perf_counter()
    saved = rng_state(device)
    passes()
    restore_rng(saved, device)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return time.perf_counter() - started


class WarmedUp(Protocol):
    """What `warm_up` reads and writes of a Trainer (training/trainer.py)."""

    cfg: Config
    data: NMTData
    progress: Progress
    speed: Any
    amp: str
    device: torch.device
    compile_s: float
    whole_step: Any  # training/whole_step.py's WholeStep, or None

    def collate(self, indices: Sequence[int]) -> Batch: ...

    def untraced_passes(self, batches: list[Batch], amp: str) -> None: ...

    def on_device(self, batch: Batch) -> Batch: ...


def warm_up(trainer: WarmedUp, epochs: int = 3) -> None:
    """Under train.compile or a captured step: compile (and capture) every batch shape of the trainer's next
    `epochs` epochs before its clock starts, adding the time to `trainer.compile_s`."""
    tc = trainer.cfg.train
    if tc.compile or trainer.whole_step is not None:
        first = trainer.progress.epoch
        last = max(min(first + epochs, tc.epochs), first + 1)
        plan = [ix for e in range(first, last) for ix in trainer.data.train.plan(e, tc.seed)]
        shaped = bool(getattr(trainer.data.train, "shapes", None))  # data.batch_shapes
        batches = warm_up_batches(plan, trainer.collate, shaped)
        if trainer.whole_step is not None:
            on_device = [trainer.on_device(b) for b in batches]
            seconds = compile_shapes(lambda: trainer.whole_step.warm_up(on_device), trainer.device)
        else:
            seconds = compile_shapes(lambda: trainer.untraced_passes(batches, trainer.amp), trainer.device)
        trainer.compile_s += seconds
        done = "compiled" if tc.compile else "captured"
        log.info("%s %d batch shape(s) in %.1f s, outside the training time", done, len(batches), seconds)
