"""Figures written as PNG: attention heatmaps (drawn by decoding/heatmaps.py) and training curves.

Training curves are drawn on matplotlib's Agg canvas through the object API (no pyplot), so nothing
global is touched.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.figure import Figure

from attn_mt.decoding.heatmaps import DPI, attention_figure, new_figure
from attn_mt.i18n import N_, _

CURVE_PANEL_SIZE = (5.0, 3.0)
LOSS_KEYS = {
    "loss": N_("train (window)"),
    "epoch_loss": N_("train (epoch)"),
    "train_loss": N_("train"),
    "valid_loss": N_("valid"),
}


def save_png(fig: Figure, path: Path) -> Path:
    """Write `fig` as a PNG at `path` (parent directories created); returns the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=DPI, format="png")
    return path


def plot_attention(
    weights: np.ndarray, row_labels: Sequence[str], col_labels: Sequence[str], path: Path, title: str = ""
) -> Path:
    """Write the heatmaps of one attention map (see `attention_figure`) as a PNG at `path`."""
    return save_png(attention_figure(weights, row_labels, col_labels, title), path)


def _series(metrics: Sequence[dict[str, Any]], key: str) -> tuple[list[float], list[float]]:
    """(steps, values) of every record that has `key` and a step."""
    points = [(r["step"], r[key]) for r in metrics if key in r and "step" in r and r[key] is not None]
    return [p[0] for p in points], [p[1] for p in points]


def training_curves_figure(metrics: Sequence[dict[str, Any]]) -> Figure:
    """Loss, valid BLEU and learning rate against the step, one panel each (panels without data left out),
    labelled in the language in force."""
    panels: list[tuple[str, dict[str, str]]] = [
        (N_("loss (nats per token)"), LOSS_KEYS),
        (N_("valid BLEU"), {"valid_bleu": N_("valid BLEU")}),
        (N_("learning rate"), {"lr": N_("learning rate")}),
    ]
    present = [(ylabel, keys) for ylabel, keys in panels if any(_series(metrics, k)[0] for k in keys)]
    fig = new_figure(CURVE_PANEL_SIZE[0], CURVE_PANEL_SIZE[1] * max(len(present), 1))
    if not present:
        ax = fig.subplots()
        ax.text(0.5, 0.5, _("no metrics logged yet"), ha="center", va="center", transform=ax.transAxes)
        ax.set_axis_off()
        return fig
    axes = fig.subplots(len(present), 1, squeeze=False, sharex=True)[:, 0]
    for ax, (ylabel, keys) in zip(axes, present, strict=True):
        for key, label in keys.items():
            steps, values = _series(metrics, key)
            if steps:
                ax.plot(steps, values, marker="." if len(steps) < 30 else None, label=_(label))
        ax.set_ylabel(_(ylabel))
        ax.grid(True, alpha=0.3)
        if len(ax.get_lines()) > 1:
            ax.legend(fontsize="small")
    axes[-1].set_xlabel(_("step"))
    return fig


def plot_training_curves(metrics: list[dict], path: Path) -> Path:
    """Write loss, valid BLEU and learning rate vs step (records of metrics.jsonl) as a PNG at `path`."""
    return save_png(training_curves_figure(metrics), path)
