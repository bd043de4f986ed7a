"""Attention heatmaps in the book's style, with the tokens on both axes (matplotlib, imported here only).

Shapes: L layers, h heads, Q query positions, K key positions.
Heatmaps follow the book's `show_heatmaps` (d2l.ai section 11.1): rows are queries, columns are
keys, a "Reds" colour map, one panel per head in a grid of layers x heads, one shared colour bar;
ours also label both axes with the tokens, and draw every map on the fixed scale 0 to 1 (the colour bar
labelled "attention weight"), so that equal weights look equal in every picture and three weights
near 1/3 never look like dark against white. Figures are drawn on matplotlib's Agg canvas through
the object API (no pyplot), so nothing global is touched. The report, the attention dumps,
TensorBoard and Jupyter's rich display (display.py) all draw through `attention_figure`; the
modules that show attention without drawing it never import this one at their top.
"""

from __future__ import annotations

import io
from collections.abc import Sequence

import numpy as np
from matplotlib.axis import Axis
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from attn_mt.i18n import _
from attn_mt.i18n.fonts import with_plot_fonts

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
    """`fig` rendered as PNG bytes at the module's DPI, its text in fonts for every language."""
    buffer = io.BytesIO()
    with_plot_fonts(fig).savefig(buffer, dpi=DPI, format="png")
    return buffer.getvalue()


def panel_inches(labels: Sequence[str] | None, count: int) -> float:
    """A panel's width or height: wide enough for every token label, the book's size without labels."""
    return PANEL_INCHES if labels is None else max(PANEL_INCHES, INCHES_PER_TOKEN * count + 1.0)


def label_axis(axis: Axis, labels: Sequence[str] | None, rotation: float = 0.0) -> None:
    """One tick per token label, or (no labels) a few integer positions."""
    if labels is None:
        axis.set_major_locator(MaxNLocator(integer=True))
    else:
        axis.set_ticks(range(len(labels)), labels=list(labels), rotation=rotation, fontsize=LABEL_FONT_SIZE)


def attention_figure(
    weights: np.ndarray,
    row_labels: Sequence[str] | None,
    col_labels: Sequence[str] | None,
    title: str = "",
) -> Figure:
    """Heatmaps of (Q, K) or (L, h, Q, K) attention weights: one panel per head, tokens on both axes.

    Without labels (None) the axes show positions, as the book's `show_heatmaps` does.
    """
    weights = np.asarray(weights, dtype=np.float32)
    if weights.ndim == 2:
        grid = weights[None, None]  # (1, 1, Q, K)
    elif weights.ndim == 4:
        grid = weights
    else:
        raise ValueError(f"attention weights must be (Q, K) or (L, h, Q, K), got shape {weights.shape}")
    layers, heads, queries, keys = grid.shape
    rows = queries if row_labels is None else len(row_labels)
    cols = keys if col_labels is None else len(col_labels)
    if (rows, cols) != (queries, keys):
        raise ValueError(f"{rows} row and {cols} column labels for {queries} x {keys} attention weights")
    panel_w, panel_h = panel_inches(col_labels, keys), panel_inches(row_labels, queries)
    fig = new_figure(panel_w * heads + 1.0, panel_h * layers + (0.4 if title else 0.0))
    axes = fig.subplots(layers, heads, squeeze=False)
    image = None
    for layer in range(layers):
        for head in range(heads):
            ax = axes[layer, head]
            image = ax.imshow(
                grid[layer, head], cmap=CMAP, vmin=0.0, vmax=1.0, aspect="auto", interpolation="nearest"
            )
            label_axis(ax.xaxis, col_labels, rotation=90)
            label_axis(ax.yaxis, row_labels)
            if layer == layers - 1:
                ax.set_xlabel(_("Key positions"))
            if head == 0:
                ax.set_ylabel(_("Query positions"))
            if weights.ndim == 4:
                ax.set_title(
                    _("layer {layer}, head {head}").format(layer=layer + 1, head=head + 1), fontsize="medium"
                )
    fig.colorbar(image, ax=axes, shrink=0.6, label=_("attention weight (0 to 1)"))
    if title:
        fig.suptitle(title)
    return fig
