"""Which way each `train.best_metric` improves: the rule training, the report and `average` share."""

from __future__ import annotations

# one entry per choice of train.best_metric (tests/test_config.py checks they agree)
HIGHER_IS_BETTER = {"valid_bleu": True, "valid_loss": False, "train_loss": False}


def improves(metric: str, value: float, best: float | None) -> bool:
    """Whether `value` of `metric` (a train.best_metric choice) beats `best`; anything beats None."""
    if best is None:
        return True
    return value > best if HIGHER_IS_BETTER[metric] else value < best
