"""Figure and result-file helpers shared by the chapter demos.

Figures are drawn on the Agg (PNG) canvas through matplotlib's object API, without pyplot, so the
demos never touch a global backend or a global figure registry.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import torch
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from attn_mt.errors import UserError
from attn_mt.i18n import _
from attn_mt.i18n.fonts import with_plot_fonts

DPI = 100
PANEL_SIZE = (3.2, 2.6)  # inches per subplot: small figures, as the book draws them
JSON_DECIMALS = 6


def prepare_out_dir(out_dir: Path) -> Path:
    """Create `out_dir` (and parents) if needed; raise UserError when it cannot hold files."""
    out_dir = Path(out_dir)
    if out_dir.exists() and not out_dir.is_dir():
        raise UserError(_("demo output path {path} exists and is not a directory").format(path=out_dir))
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        message = _("cannot create demo output directory {path}: {reason}")
        raise UserError(message.format(path=out_dir, reason=exc.strerror)) from exc
    return out_dir


def new_figure(
    ncols: int = 1, nrows: int = 1, panel_size: tuple[float, float] = PANEL_SIZE
) -> tuple[Figure, list[Axes]]:
    """A Figure on an Agg canvas with `nrows` x `ncols` panels, returned as a flat list of axes."""
    fig = Figure(figsize=(panel_size[0] * ncols, panel_size[1] * nrows), layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(nrows, ncols, squeeze=False)
    return fig, list(axes.flat)


def save_figure(fig: Figure, path: Path) -> str:
    """Write `fig` as a PNG at `path`, its text in fonts for every language; returns the file name."""
    with_plot_fonts(fig).savefig(path, dpi=DPI, format="png")
    return path.name


def draw_heatmap(
    fig: Figure,
    ax: Axes,
    matrix: torch.Tensor | np.ndarray,
    xlabel: str,
    ylabel: str,
    title: str = "",
    legend: str | None = None,
    centred: bool = False,
) -> None:
    """Draw a 2-D `matrix` (rows on the y axis) on `ax` with a colour bar labelled `legend` (by default
    "attention weight", in the language in force), as the book's
    show_heatmaps. Weights (the default) use a fixed 0-1 scale, so equal weights look equal in every
    figure; `centred` values use a blue-white-red scale with 0 at its centre."""
    values = matrix.detach().cpu().numpy() if isinstance(matrix, torch.Tensor) else np.asarray(matrix)
    if values.ndim != 2:
        raise ValueError(f"heatmap matrix must be 2-D, got shape {values.shape}")
    if centred:
        bound = float(np.abs(values).max()) or 1.0
        scale = {"cmap": "RdBu_r", "vmin": -bound, "vmax": bound}
    else:
        scale = {"cmap": "Reds", "vmin": 0.0, "vmax": 1.0}
    image = ax.imshow(values, aspect="auto", interpolation="nearest", **scale)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    if title:
        ax.set_title(title, fontsize="medium")
    fig.colorbar(image, ax=ax, shrink=0.8, label=_("attention weight") if legend is None else legend)


def to_lists(tensor: torch.Tensor) -> Any:
    """A tensor as nested Python lists, floats rounded for a readable JSON file."""
    if tensor.is_floating_point():
        return torch.round(tensor.detach().cpu().double(), decimals=JSON_DECIMALS).tolist()
    return tensor.detach().cpu().tolist()


def write_json(path: Path, payload: dict[str, Any]) -> None:
    """Write `payload` as indented JSON at `path`."""
    path.write_text(json.dumps(payload, indent=2) + "\n", encoding="utf-8")
