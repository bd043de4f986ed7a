"""Weight initialisation, optimiser and learning-rate schedule from the config."""

from __future__ import annotations

import torch
from torch import nn

from attn_mt.config import TrainConfig


def xavier_init_(model: nn.Module) -> None:
    """The book's init: Xavier-uniform weights for every Linear layer and every GRU weight matrix.

    A Linear weight tied to an embedding keeps the embedding's own initialisation.
    """
    embeddings = {id(m.weight) for m in model.modules() if isinstance(m, nn.Embedding)}
    for module in model.modules():
        if isinstance(module, nn.Linear) and id(module.weight) not in embeddings:
            nn.init.xavier_uniform_(module.weight)
        elif isinstance(module, nn.GRU):
            for name, param in module.named_parameters():
                if name.startswith("weight"):
                    nn.init.xavier_uniform_(param)


def build_optimizer(params: list[nn.Parameter] | nn.Module, cfg: TrainConfig) -> torch.optim.Optimizer:
    """Adam (the book's) or AdamW over the trainable parameters (of a module, or a list).

    On CPU and CUDA the fused kernel updates every tensor in one call (a book-size model has ~60
    small tensors, and a per-tensor update costs several times the fused one); elsewhere foreach.
    """
    if isinstance(params, nn.Module):
        params = [p for p in params.parameters() if p.requires_grad]
    betas = (cfg.adam_betas[0], cfg.adam_betas[1])
    device_type = params[0].device.type if params else "cpu"
    kernel = {"fused": True} if device_type in ("cpu", "cuda") else {"foreach": True}
    optimizer = torch.optim.AdamW if cfg.optimizer == "adamw" else torch.optim.Adam
    return optimizer(params, lr=cfg.lr, betas=betas, weight_decay=cfg.weight_decay, **kernel)


def inverse_sqrt_factor(step: int, warmup_steps: int) -> float:
    """Linear warmup to the peak lr at `warmup_steps`, then decay with 1/sqrt(step) (Vaswani et al.)."""
    step = max(step, 1)
    if step < warmup_steps:
        return step / warmup_steps
    return (warmup_steps / step) ** 0.5


def linear_factor(step: int, warmup_steps: int, progress: float) -> float:
    """Linear warmup to the peak lr at `warmup_steps`, capped by a straight line to zero at progress 1.

    `progress` is the fraction of the run already done (steps or wall-clock, whichever is further):
    lr = peak * min(step / warmup, 1 - progress), the "decay to zero" schedule of budgeted training.
    """
    ramp = min(1.0, max(step, 1) / warmup_steps) if warmup_steps else 1.0
    return max(0.0, min(ramp, 1.0 - progress))


class Schedule:
    """One interface over per-step (constant, inverse_sqrt, linear) and per-validation (plateau) schedules.

    The linear schedule ends at zero when the run ends: after `total_steps` optimiser steps, or when
    the time limit is used up (`after_step(time_used)`), whichever comes first.
    """

    def __init__(self, optimizer: torch.optim.Optimizer, cfg: TrainConfig, total_steps: int = 0):
        self.kind = cfg.schedule
        self.optimizer = optimizer
        self.total_steps = total_steps  # 0 = no step bound for the linear schedule
        self.time_used = 0.0  # fraction of the wall-clock limit spent so far
        warmup = cfg.warmup_steps
        if self.kind == "plateau":
            self.sched = torch.optim.lr_scheduler.ReduceLROnPlateau(
                optimizer, mode="min", factor=cfg.plateau_factor, patience=cfg.plateau_patience
            )
        elif self.kind == "inverse_sqrt":
            self.sched = torch.optim.lr_scheduler.LambdaLR(
                optimizer, lambda s: inverse_sqrt_factor(s, warmup)
            )
        elif self.kind == "linear":
            self.sched = torch.optim.lr_scheduler.LambdaLR(
                optimizer, lambda s: linear_factor(s, warmup, self.progress(s))
            )
        else:
            self.sched = torch.optim.lr_scheduler.LambdaLR(
                optimizer, lambda s: min(1.0, max(s, 1) / warmup) if warmup else 1.0
            )

    def progress(self, step: int) -> float:
        """Fraction of the run done after `step` steps: of the step bound or of the time limit."""
        steps = step / self.total_steps if self.total_steps else 0.0
        return max(steps, self.time_used)

    def after_step(self, time_used: float = 0.0) -> None:
        """Advance a per-step schedule by one step; `time_used` is the spent fraction of the time limit."""
        self.time_used = time_used
        if self.kind != "plateau":
            self.sched.step()

    def after_validation(self, loss: float) -> None:
        """Let reduce-on-plateau see a validation loss (lower is better)."""
        if self.kind == "plateau":
            self.sched.step(loss)

    @property
    def lr(self) -> float:
        """The current learning rate of the first parameter group."""
        return float(self.optimizer.param_groups[0]["lr"])

    def state_dict(self) -> dict:
        """The wrapped scheduler's state."""
        return self.sched.state_dict()

    def load_state_dict(self, state: dict) -> None:
        """Restore the wrapped scheduler's state."""
        self.sched.load_state_dict(state)
