"""Figures: attention heatmaps in the book's style and training curves, written as PNG.

Shapes: L layers, h heads, Q query positions, K key positions.
Heatmaps follow the book's `show_heatmaps` (d2l.ai section 11.1): rows are queries, columns are
keys, a "Reds" colour map, one panel per head in a grid of layers x heads, one shared colour bar;
ours also label both axes with the tokens. Figures are drawn on matplotlib's Agg canvas through
the object API (no pyplot), so nothing global is touched.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

CMAP = "Reds"
DPI = 100
PANEL_INCHES = 2.5  # the book's figsize per panel
INCHES_PER_TOKEN = 0.22  # panels grow so every token label stays readable
LABEL_FONT_SIZE = 7
CURVE_PANEL_SIZE = (5.0, 3.0)
LOSS_KEYS = {
    "loss": "train (window)",
    "epoch_loss": "train (epoch)",
    "train_loss": "train",
    "valid_loss": "valid",
}


def _new_figure(width: float, height: float) -> Figure:
    """A Figure attached to an Agg canvas."""
    fig = Figure(figsize=(width, height), layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def save_png(fig: Figure, path: Path) -> Path:
    """Write `fig` as a PNG at `path` (parent directories created); returns the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=DPI, format="png")
    return path


def attention_figure(
    weights: np.ndarray, row_labels: Sequence[str], col_labels: Sequence[str], title: str = ""
) -> Figure:
    """Heatmaps of (Q, K) or (L, h, Q, K) attention weights: one panel per head, tokens on both axes."""
    weights = np.asarray(weights, dtype=np.float32)
    if weights.ndim == 2:
        grid = weights[None, None]  # (1, 1, Q, K)
    elif weights.ndim == 4:
        grid = weights
    else:
        raise ValueError(f"attention weights must be (Q, K) or (L, h, Q, K), got shape {weights.shape}")
    layers, heads, queries, keys = grid.shape
    if (len(row_labels), len(col_labels)) != (queries, keys):
        labels = f"{len(row_labels)} row and {len(col_labels)} column labels"
        raise ValueError(f"{labels} for {queries} x {keys} attention weights")
    panel_w = max(PANEL_INCHES, INCHES_PER_TOKEN * keys + 1.0)
    panel_h = max(PANEL_INCHES, INCHES_PER_TOKEN * queries + 1.0)
    fig = _new_figure(panel_w * heads + 1.0, panel_h * layers + (0.4 if title else 0.0))
    axes = fig.subplots(layers, heads, squeeze=False)
    vmax = float(grid.max()) if grid.size else 1.0
    image = None
    for layer in range(layers):
        for head in range(heads):
            ax = axes[layer, head]
            image = ax.imshow(
                grid[layer, head], cmap=CMAP, vmin=0.0, vmax=vmax, aspect="auto", interpolation="nearest"
            )
            ax.set_xticks(range(keys), labels=list(col_labels), rotation=90, fontsize=LABEL_FONT_SIZE)
            ax.set_yticks(range(queries), labels=list(row_labels), fontsize=LABEL_FONT_SIZE)
            if layer == layers - 1:
                ax.set_xlabel("Key positions")
            if head == 0:
                ax.set_ylabel("Query positions")
            if weights.ndim == 4:
                ax.set_title(f"layer {layer + 1}, head {head + 1}", fontsize="medium")
    fig.colorbar(image, ax=axes, shrink=0.6)
    if title:
        fig.suptitle(title)
    return fig


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
    """Loss, valid BLEU and learning rate against the step, one panel each (panels without data left out)."""
    panels: list[tuple[str, dict[str, str]]] = [
        ("loss (nats per token)", LOSS_KEYS),
        ("valid BLEU", {"valid_bleu": "valid BLEU"}),
        ("learning rate", {"lr": "learning rate"}),
    ]
    present = [(ylabel, keys) for ylabel, keys in panels if any(_series(metrics, k)[0] for k in keys)]
    fig = _new_figure(CURVE_PANEL_SIZE[0], CURVE_PANEL_SIZE[1] * max(len(present), 1))
    if not present:
        ax = fig.subplots()
        ax.text(0.5, 0.5, "no metrics logged yet", ha="center", va="center", transform=ax.transAxes)
        ax.set_axis_off()
        return fig
    axes = fig.subplots(len(present), 1, squeeze=False, sharex=True)[:, 0]
    for ax, (ylabel, keys) in zip(axes, present, strict=True):
        for key, label in keys.items():
            steps, values = _series(metrics, key)
            if steps:
                ax.plot(steps, values, marker="." if len(steps) < 30 else None, label=label)
        ax.set_ylabel(ylabel)
        ax.grid(True, alpha=0.3)
        if len(ax.get_lines()) > 1:
            ax.legend(fontsize="small")
    axes[-1].set_xlabel("step")
    return fig


def plot_training_curves(metrics: list[dict], path: Path) -> Path:
    """Write loss, valid BLEU and learning rate vs step (records of metrics.jsonl) as a PNG at `path`."""
    return save_png(training_curves_figure(metrics), path)
