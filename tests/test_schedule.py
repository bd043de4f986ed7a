"""Learning-rate schedules: hand-computed factors, and the linear schedule ending at zero with the run."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from support.synthetic import write_corpus

from attn_mt.config import TrainConfig, load_config
from attn_mt.run.run_dir import read_metrics
from attn_mt.training.launch import train
from attn_mt.training.optim import Schedule, inverse_sqrt_factor, linear_factor

TINY = Path(__file__).resolve().parent.parent / "configs" / "tiny.yaml"


def lrs(schedule: Schedule, steps: int, time_used: list[float] | None = None) -> list[float]:
    """The lr after each of `steps` optimiser steps (time_used[i] passed with step i)."""
    out = []
    for i in range(steps):
        schedule.optimizer.step()
        schedule.after_step(time_used[i] if time_used else 0.0)
        out.append(schedule.lr)
    return out


def schedule(kind: str, warmup: int, total_steps: int = 0) -> Schedule:
    """A schedule over a one-parameter Adam with peak lr 1.0."""
    optimizer = torch.optim.Adam([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
    return Schedule(optimizer, TrainConfig(schedule=kind, warmup_steps=warmup, lr=1.0), total_steps)


def test_inverse_sqrt_factor_by_hand():
    assert [inverse_sqrt_factor(s, 4) for s in (0, 1, 2, 4, 16)] == [0.25, 0.25, 0.5, 1.0, 0.5]


def test_linear_factor_by_hand():
    assert linear_factor(1, 4, 0.0) == 0.25
    assert linear_factor(4, 4, 0.1) == pytest.approx(0.9)
    assert linear_factor(2, 4, 0.7) == pytest.approx(0.3)  # the decay line caps the warmup ramp
    assert linear_factor(9, 0, 1.2) == 0.0


def test_linear_schedule_reaches_zero_at_the_last_step():
    # warmup 2 of 10 steps: lr after step s is min(s / 2, 1 - s / 10)
    assert schedule("linear", 2, 10).lr == pytest.approx(0.5)
    expected = [0.5, 0.8, 0.7, 0.6, 0.5, 0.4, 0.3, 0.2, 0.1, 0.0]
    assert lrs(schedule("linear", 2, 10), 10) == pytest.approx(expected)


def test_linear_schedule_follows_the_time_limit_when_it_is_further_along():
    used = [0.1, 0.5, 0.9, 1.0]
    assert lrs(schedule("linear", 0, 100), 4, used) == pytest.approx([0.9, 0.5, 0.1, 0.0])
    # no time limit (time_used 0): the step bound alone
    assert lrs(schedule("linear", 0, 4), 4) == pytest.approx([0.75, 0.5, 0.25, 0.0])


def test_training_with_the_linear_schedule_ends_at_zero_and_is_validated_there(tmp_path):
    corpus = write_corpus(tmp_path / "reverse.txt", n=300)
    cfg = load_config(
        TINY,
        [
            "data.valid_size=10",
            "data.test_size=10",
            "data.max_tokens=200",
            "train.valid_max_sentences=10",
            "train.schedule=linear",
            "train.warmup_steps=3",
            "train.log_every=1",
            "train.max_steps=12",
            "train.valid_every=5",
        ],
    )
    train(cfg, tmp_path / "run", data_path=str(corpus), quiet=True, device="cpu")
    rates = [r["lr"] for r in read_metrics(tmp_path / "run" / "metrics.jsonl") if "loss" in r]
    peak = cfg.train.lr
    expected = [peak * min(s / 3, 1 - s / 12) for s in range(1, 13)]
    assert rates == pytest.approx(expected)
    assert rates[-1] == 0.0
    validated = [r["step"] for r in read_metrics(tmp_path / "run" / "metrics.jsonl") if "valid_bleu" in r]
    assert validated == [5, 10, 12]  # the final weights, trained at the smallest rates, are scored too
