"""Which way each `train.best_metric` improves: the rule training, the report and `average` share."""

from __future__ import annotations

from attn_mt.training.run_state import Progress

# one entry per choice of train.best_metric (tests/test_config.py checks they agree)
HIGHER_IS_BETTER = {"valid_bleu": True, "valid_loss": False, "train_loss": False}


def improves(metric: str, value: float, best: float | None) -> bool:
    """Whether `value` of `metric` (a train.best_metric choice) beats `best`; anything beats None."""
    if best is None:
        return True
    return value > best if HIGHER_IS_BETTER[metric] else value < best


def note_validation(progress: Progress, metric: str, value: float, final: bool) -> bool:
    """Early stopping's bookkeeping for one validation's `value` of `metric`; True when it beats the best
    saved (best.pt is due). A `final` validation leaves the patience count as it was."""
    saved = (
        progress.best_value if progress.best_saved_value is None else progress.best_saved_value
    )  # older runs
    if not final:
        if improves(metric, value, progress.best_value):
            progress.best_value, progress.bad_validations = value, 0
        else:
            progress.bad_validations += 1
    if not improves(metric, value, saved):
        return False
    progress.best_saved_value = value
    return True
