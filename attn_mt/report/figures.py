"""The report's pictures as PNG `data:` URIs, so the HTML file needs nothing beside itself.

Figures are drawn on matplotlib's Agg canvas through the object API, as in evaluation/plots.py.
"""

from __future__ import annotations

import base64
import io
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from attn_mt.evaluation.plots import CURVE_PANEL_SIZE, DPI, training_curves_figure
from attn_mt.i18n import N_, _
from attn_mt.i18n.fonts import with_plot_fonts

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
COMPARISON_PANELS = (  # metrics.jsonl key -> y-axis label of the runs-side-by-side figure
    ("valid_loss", N_("valid loss (nats per token)")),
    ("valid_bleu", N_("valid BLEU")),
    ("epoch_loss", N_("train loss per epoch")),
)


def png_data_uri(png: bytes) -> str:
    """A `data:image/png;base64,...` URI of PNG bytes; refuses bytes that are not a PNG."""
    if not png.startswith(PNG_SIGNATURE):
        raise ValueError("not a PNG image (wrong file signature)")
    return "data:image/png;base64," + base64.b64encode(png).decode("ascii")


def file_data_uri(path: Path) -> str:
    """The PNG file at `path` as a data URI."""
    return png_data_uri(Path(path).read_bytes())


def figure_data_uri(fig: Figure) -> str:
    """A matplotlib figure rendered to PNG (its text in fonts for every language), as a data URI."""
    buffer = io.BytesIO()
    with_plot_fonts(fig).savefig(buffer, dpi=DPI, format="png")
    return png_data_uri(buffer.getvalue())


def curves_data_uri(metrics: Sequence[dict[str, Any]]) -> str:
    """Loss, valid BLEU and learning rate against the step (the run's metrics.jsonl records)."""
    return figure_data_uri(training_curves_figure(metrics))


def _points(records: Sequence[dict[str, Any]], key: str) -> tuple[list[float], list[float]]:
    """(steps, values) of the records holding a number under `key`."""
    pairs = [
        (r["step"], r[key])
        for r in records
        if isinstance(r.get(key), (int, float)) and isinstance(r.get("step"), (int, float))
    ]
    return [p[0] for p in pairs], [p[1] for p in pairs]


def comparison_data_uri(runs: dict[str, Sequence[dict[str, Any]]]) -> str | None:
    """Valid loss, valid BLEU and epoch loss of several runs on shared axes (None if no run has any)."""
    present = [
        (key, label) for key, label in COMPARISON_PANELS if any(_points(m, key)[0] for m in runs.values())
    ]
    if not present:
        return None
    fig = Figure(figsize=(CURVE_PANEL_SIZE[0] * len(present), CURVE_PANEL_SIZE[1]), layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(1, len(present), squeeze=False)[0]
    for ax, (key, label) in zip(axes, present, strict=True):
        for name, records in runs.items():
            steps, values = _points(records, key)
            if steps:
                ax.plot(steps, values, marker="." if len(steps) < 30 else None, label=name)
        ax.set_xlabel(_("step"))
        ax.set_ylabel(_(label))
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize="small")
    return figure_data_uri(fig)
