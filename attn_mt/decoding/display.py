"""Rich display in Jupyter: the HTML pieces and PNG heatmaps that `Translation` (outputs.py) and
`SentenceAttention` (attention.py) build their inline views from, and `Heatmap` for any weights.

It knows neither class (they import it, not the other way round). The helpers here escape every text
that came from a user or a vocabulary (sources, tokens, outputs, warnings). No torch
and no matplotlib at import: heatmaps.py is imported only when a picture is asked for, so a
translation shows itself, and outputs.py loads, without either.
"""

from __future__ import annotations

import base64
import html
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

TABLE_STYLE = "border-collapse: collapse; text-align: left"
CELL_STYLE = "padding: 2px 8px; text-align: left"


def image_tag(png: bytes, alt: str) -> str:
    """An <img> holding `png` as a data URI, with `alt` escaped."""
    data = base64.b64encode(png).decode("ascii")
    return f'<img src="data:image/png;base64,{data}" alt="{html.escape(alt)}"/>'


def tokens_html(tokens: Sequence[str]) -> str:
    """Tokens escaped and set apart as <code> spans."""
    return " ".join(f"<code>{html.escape(token)}</code>" for token in tokens)


def table_html(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """A plain HTML table; header cells are escaped, row cells are HTML already."""
    head = "".join(f'<th style="{CELL_STYLE}">{html.escape(cell)}</th>' for cell in header)
    body = "".join(
        "<tr>" + "".join(f'<td style="{CELL_STYLE}">{cell}</td>' for cell in row) + "</tr>" for row in rows
    )
    return f'<table style="{TABLE_STYLE}"><tr>{head}</tr>{body}</table>'


def heatmap_png(
    weights: np.ndarray, row_labels: Sequence[str] | None, col_labels: Sequence[str] | None, title: str = ""
) -> bytes:
    """PNG bytes of `heatmaps.attention_figure` (matplotlib is imported here, on the first call)."""
    from attn_mt.decoding.heatmaps import attention_figure, png_bytes

    return png_bytes(attention_figure(weights, row_labels, col_labels, title))


@dataclass
class Heatmap:
    """Any (Q, K) or (L, h, Q, K) weights shown inline as the book's heatmaps, e.g. `Heatmap(torch.eye(10))`.

    `weights`: a NumPy array, nested lists or a tensor (detached and copied to the CPU here); without
    labels the axes show positions.
    """

    weights: Any
    row_labels: Sequence[str] | None = None  # Q query labels
    col_labels: Sequence[str] | None = None  # K key labels
    title: str = ""

    def __post_init__(self) -> None:
        if hasattr(self.weights, "detach"):  # a torch tensor, without importing torch here
            self.weights = self.weights.detach().cpu()
        self.weights = np.asarray(self.weights, dtype=np.float32)
        if self.weights.ndim not in (2, 4):
            raise ValueError(
                f"heatmap weights must be (Q, K) or (L, h, Q, K), got shape {self.weights.shape}"
            )

    def _repr_png_(self) -> bytes:
        """Jupyter's picture: one panel per layer and head, labels on the axes."""
        return heatmap_png(self.weights, self.row_labels, self.col_labels, self.title)
