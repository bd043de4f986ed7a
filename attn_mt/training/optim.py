"""Weight initialisation, optimiser and learning-rate schedule from the config."""

from __future__ import annotations

import torch
from torch import nn

from attn_mt.config import TrainConfig


def xavier_init_(model: nn.Module) -> None:
    """The book's init: Xavier-uniform weights for every Linear layer and every GRU weight matrix."""
    for module in model.modules():
        if isinstance(module, nn.Linear):
            nn.init.xavier_uniform_(module.weight)
        elif isinstance(module, nn.GRU):
            for name, param in module.named_parameters():
                if name.startswith("weight"):
                    nn.init.xavier_uniform_(param)


def build_optimizer(model: nn.Module, cfg: TrainConfig) -> torch.optim.Optimizer:
    """Adam (the book's) or AdamW over the trainable parameters.

    On CPU and CUDA the fused kernel updates every tensor in one call (a book-size model has ~60
    small tensors, and a per-tensor update costs several times the fused one); elsewhere foreach.
    """
    params = [p for p in model.parameters() if p.requires_grad]
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


class Schedule:
    """One interface over the per-step (constant, inverse_sqrt) and per-validation (plateau) schedules."""

    def __init__(self, optimizer: torch.optim.Optimizer, cfg: TrainConfig):
        self.kind = cfg.schedule
        self.optimizer = optimizer
        warmup = cfg.warmup_steps
        if self.kind == "plateau":
            self.sched = torch.optim.lr_scheduler.ReduceLROnPlateau(
                optimizer, mode="min", factor=cfg.plateau_factor, patience=cfg.plateau_patience
            )
        elif self.kind == "inverse_sqrt":
            self.sched = torch.optim.lr_scheduler.LambdaLR(
                optimizer, lambda s: inverse_sqrt_factor(s, warmup)
            )
        else:
            self.sched = torch.optim.lr_scheduler.LambdaLR(
                optimizer, lambda s: min(1.0, max(s, 1) / warmup) if warmup else 1.0
            )

    def after_step(self) -> None:
        """Advance a per-step schedule by one optimiser step."""
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
