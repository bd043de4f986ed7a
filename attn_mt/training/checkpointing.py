"""A trainer's checkpoint: what last.pt and best.pt hold, writing them, and continuing from one.

A checkpoint holds everything needed to continue exactly: the weights, the optimiser's state per
parameter (whichever layout trains), the schedule, the gradient scaler, the random state, where
the run stands, the config and the vocabularies.
"""

from __future__ import annotations

import time
from typing import Any, Protocol

import torch

from attn_mt.config import Config
from attn_mt.data.dataset import NMTData
from attn_mt.run.checkpoint import save_checkpoint
from attn_mt.run.run_dir import RunPaths
from attn_mt.training.distributed import DistContext
from attn_mt.training.loss_totals import LossTotals, loss_totals
from attn_mt.training.optim import Schedule
from attn_mt.training.precision import restore_scaler
from attn_mt.training.random_state import restore_rng, rng_state
from attn_mt.training.run_state import Progress


class Checkpointed(Protocol):
    """What a checkpoint reads and restores of a Trainer (training/trainer.py)."""

    cfg: Config
    data: NMTData
    paths: RunPaths
    dist: DistContext
    device: torch.device
    model: torch.nn.Module
    params: Any  # the speed path's parameter layout (training/speed.py)
    optimizer: torch.optim.Optimizer
    schedule: Schedule
    scaler: torch.amp.GradScaler
    progress: Progress
    totals: LossTotals
    best_state: dict[str, Any] | None
    last_save: float

    def read_totals(self) -> None: ...


def trainer_state(trainer: Checkpointed) -> dict[str, Any]:
    """Everything needed to continue exactly: weights, optimiser, schedule, RNG, position."""
    trainer.read_totals()
    return {
        "model": trainer.model.state_dict(),
        "optimizer": trainer.params.to_checkpoint(trainer.optimizer.state_dict()),  # per parameter
        "scheduler": trainer.schedule.state_dict(),
        "scaler": trainer.scaler.state_dict(),
        "rng": rng_state(trainer.device),
        "progress": vars(trainer.progress).copy(),
        "step": trainer.progress.step,
        "epoch": trainer.progress.epoch,
        "config": trainer.cfg.to_dict(),
        "src_vocab": list(trainer.data.src_vocab.idx_to_token),
        "tgt_vocab": list(trainer.data.tgt_vocab.idx_to_token),
    }


def restore_trainer(trainer: Checkpointed, state: dict[str, Any]) -> None:
    """Continue from a checkpoint trainer_state wrote (loaded and checked to fit by run/run_dir_rules.py)."""
    trainer.model.load_state_dict(state["model"])
    trainer.optimizer.load_state_dict(trainer.params.from_checkpoint(state["optimizer"]))
    for group in trainer.optimizer.param_groups:  # a captured run's flag: foreach Adam refuses it off CUDA;
        group["capturable"] = False  # a captured step sets it again (training/whole_step.py)
    trainer.schedule.load_state_dict(state["scheduler"])
    restore_scaler(trainer.scaler, state["scaler"])
    restore_rng(state["rng"], trainer.device)
    trainer.progress = Progress(**state["progress"])
    trainer.totals = loss_totals(trainer.device, trainer.dist.enabled, trainer.paths.last, trainer.progress)


def save_trainer(trainer: Checkpointed, force: bool = True) -> None:
    """Write last.pt (and a pending best.pt) on rank 0; unforced, at most every checkpoint_minutes."""
    now = time.monotonic()
    minutes = trainer.cfg.train.checkpoint_minutes
    if not trainer.dist.is_main:
        return
    if not force and minutes and now - trainer.last_save < minutes * 60:
        return
    save_checkpoint(trainer_state(trainer), trainer.paths.last)
    if trainer.best_state is not None:
        save_checkpoint(trainer.best_state, trainer.paths.best)
        trainer.best_state = None
    trainer.last_save = now
