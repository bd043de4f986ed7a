"""Attention heatmaps in the book's style, with the tokens on both axes (matplotlib, imported here only).

Shapes: L layers, h heads, Q query positions, K key positions.
Heatmaps follow the book's `show_heatmaps` (d2l.ai section 11.1): rows are queries, columns are
keys, a "Reds" colour map, one panel per head in a grid of layers x heads, one shared colour bar;
ours also label both axes with the tokens. Figures are drawn on matplotlib's Agg canvas through
the object API (no pyplot), so nothing global is touched. The report, the attention dumps,
TensorBoard and Jupyter's rich display (display.py) all draw through `attention_figure`; the
modules that show attention without drawing it never import this one at their top.
"""

from __future__ import annotations

import io
from collections.abc import Sequence

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

CMAP = "Reds"
DPI = 100
PANEL_INCHES = 2.5  # the book's figsize per panel
INCHES_PER_TOKEN = 0.22  # panels grow so every token label stays readable
LABEL_FONT_SIZE = 7


def new_figure(width: float, height: float) -> Figure:
    """A Figure of `width` x `height` inches attached to an Agg canvas."""
    fig = Figure(figsize=(width, height), layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def png_bytes(fig: Figure) -> bytes:
    """`fig` rendered as PNG bytes at the module's DPI."""
    buffer = io.BytesIO()
    fig.savefig(buffer, dpi=DPI, format="png")
    return buffer.getvalue()


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
    fig = new_figure(panel_w * heads + 1.0, panel_h * layers + (0.4 if title else 0.0))
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
