"""Checkpoint averaging: the elementwise mean of the weights of several checkpoints of one run.

Averaging the last few checkpoints of a run usually gains a little BLEU for free (Vaswani et al.
2017, sec. 6.1, averaged the last 5 or 20); fairseq, OpenNMT-py and Joey NMT offer it. Only
checkpoints of the same model, vocabularies and data can be averaged.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from attn_mt.config import load_config
from attn_mt.errors import UserError
from attn_mt.run.checkpoint import load_checkpoint
from attn_mt.run.kept_checkpoints import kept_checkpoints
from attn_mt.run.run_dir import check_run_dir
from attn_mt.training.best_metric import HIGHER_IS_BETTER

COMPARED_SECTIONS = ("data", "model")  # train.* and decode.* may differ (a resumed run's --set)


def _first_difference(name: str, first: list, other: list) -> str | None:
    """Where two vocabularies (token lists) differ, or None when they are equal."""
    if first == other:
        return None
    if len(first) != len(other):
        return f"{name} has {len(first)} tokens in one and {len(other)} in the other"
    index = next(i for i, (a, b) in enumerate(zip(first, other, strict=True)) if a != b)
    return f"{name} token {index} is {first[index]!r} in one and {other[index]!r} in the other"


def _config_difference(first: dict, other: dict) -> str | None:
    """The first key of the data or model section whose value differs, or None."""
    for section in COMPARED_SECTIONS:
        a, b = first.get(section, {}), other.get(section, {})
        for key in sorted(set(a) | set(b)):
            if a.get(key) != b.get(key):
                return f"{section}.{key} is {a.get(key)!r} in one and {b.get(key)!r} in the other"
    return None


def _weights_difference(first: dict[str, torch.Tensor], other: dict[str, torch.Tensor]) -> str | None:
    """The first weight that one state lacks or holds with another shape or dtype, or None."""
    if set(first) != set(other):
        name = sorted(set(first) ^ set(other))[0]
        return f"weight {name} is in only one of them"
    for name, tensor in first.items():
        if tensor.shape != other[name].shape or tensor.dtype != other[name].dtype:
            return (
                f"weight {name} is {tuple(tensor.shape)} {tensor.dtype} in one and "
                f"{tuple(other[name].shape)} {other[name].dtype} in the other"
            )
    return None


def check_compatible(states: list[dict[str, Any]], paths: list[Path]) -> None:
    """Refuse checkpoints of different models, vocabularies or data settings, naming the difference."""
    first = states[0]
    for state, path in zip(states[1:], paths[1:], strict=True):
        difference = (
            _config_difference(first.get("config") or {}, state.get("config") or {})
            or _first_difference("src_vocab", first.get("src_vocab") or [], state.get("src_vocab") or [])
            or _first_difference("tgt_vocab", first.get("tgt_vocab") or [], state.get("tgt_vocab") or [])
            or _weights_difference(first["model"], state["model"])
        )
        if difference:
            raise UserError(f"cannot average {paths[0].name} with {path.name}: {difference}")


def average_weights(models: list[dict[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
    """The elementwise mean of floating-point weights (summed in float64); other tensors must agree."""
    averaged = {}
    for name, tensor in models[0].items():
        if name.endswith("num_batches_tracked"):  # BatchNorm's step count (model.norm: batch): the latest
            averaged[name] = torch.stack([model[name] for model in models]).max()
        elif tensor.is_floating_point():
            total = torch.zeros(tensor.shape, dtype=torch.float64)
            for model in models:
                total += model[name].to(torch.float64)
            averaged[name] = (total / len(models)).to(tensor.dtype)
        else:
            if any(not torch.equal(model[name], tensor) for model in models[1:]):
                raise UserError(f"cannot average: the integer tensor {name} differs between checkpoints")
            averaged[name] = tensor.clone()
    return averaged


def average_checkpoints(paths: list[Path]) -> dict[str, Any]:
    """One checkpoint whose weights are the mean of `paths`' (config and vocabularies of the first)."""
    states = [load_checkpoint(path) for path in paths]
    check_compatible(states, paths)
    first = states[0]
    return {
        "model": average_weights([state["model"] for state in states]),
        "step": max(int(state.get("step", 0)) for state in states),
        "epoch": max(int(state.get("epoch", 0)) for state in states),
        "config": first.get("config"),
        "src_vocab": first.get("src_vocab"),
        "tgt_vocab": first.get("tgt_vocab"),
        "averaged": [path.name for path in paths],
    }


def choose_checkpoints(run_dir: Path, last: int | None, best: int | None) -> list[Path]:
    """The run's kept checkpoints to average: the newest `last`, or the `best` by train.best_metric."""
    paths = check_run_dir(run_dir)
    if (last is None) == (best is None):
        raise UserError("give one of --last N or --best N")
    count = last if last is not None else best
    assert count is not None
    if count < 2:
        raise UserError(f"averaging needs at least 2 checkpoints, got {count}")
    kept = kept_checkpoints(paths.checkpoints)
    if len(kept) < count:
        raise UserError(
            f"{paths.checkpoints} holds {len(kept)} kept checkpoints (step-*.pt), fewer than {count}; "
            "train with train.keep_checkpoints set to at least that"
        )
    if last is not None:
        return kept[-count:]
    metric = load_config(paths.config, saved=True).train.best_metric
    scored = []
    for path in kept:
        value = load_checkpoint(path).get("scores", {}).get(metric)
        if value is None:
            raise UserError(f"{path} has no {metric} score to rank by; use --last")
        scored.append((-value if HIGHER_IS_BETTER[metric] else value, path))
    chosen = {path for _, path in sorted(scored)[:count]}
    return [path for path in kept if path in chosen]
