"""Rich display in Jupyter: the HTML and PNG that `Translation` and `SentenceAttention` show inline.

Every text that came from a user or a vocabulary (sources, tokens, outputs, warnings) is escaped.
No torch and no matplotlib at import: heatmaps.py is imported only when a picture is asked for, so
a translation shows itself, and outputs.py loads, without either.
"""

from __future__ import annotations

import base64
import html
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from attn_mt.decoding.attention import SentenceAttention
    from attn_mt.decoding.outputs import Translation

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


def translation_html(translation: Translation) -> str:
    """The source, its tokens, each n-best output with its scores, and any warnings."""
    rows = [
        [str(rank), html.escape(text), f"{hyp.score:.4f}", f"{hyp.norm_score:.4f}", str(len(hyp.tokens))]
        for rank, (text, hyp) in enumerate(
            zip(translation.outputs, translation.hypotheses, strict=True), start=1
        )
    ]
    parts = [
        f"<p><b>source</b> {html.escape(translation.source)}</p>",
        f"<p><b>source tokens</b> {tokens_html(translation.source_tokens)}</p>",
        table_html(["rank", "output", "log-prob", "length-normalised", "tokens"], rows)
        if rows
        else "<p>(no output: a blank input)</p>",
    ]
    parts += [f"<p><b>warning</b> {html.escape(warning)}</p>" for warning in translation.warnings]
    return f"<div>{''.join(parts)}</div>"


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


def main_map(attention: SentenceAttention) -> str:
    """The map a single picture shows: the cross-attention when there is one, else the first."""
    return "cross" if "cross" in attention.maps else next(iter(attention.maps))


def attention_png(attention: SentenceAttention, name: str | None = None) -> bytes:
    """PNG heatmaps of one map (every layer and head), tokens on both axes; the main map by default."""
    from attn_mt.decoding.attention import TITLES

    name = main_map(attention) if name is None else name
    rows, cols = attention.labels(name)
    return heatmap_png(attention.maps[name], rows, cols, TITLES[name])


def attention_html(attention: SentenceAttention, pictures: dict[str, bytes] | None = None) -> str:
    """Every map as a heatmap under its title, shape and the tokens of both sides.

    `pictures` holds maps already drawn (name -> PNG), so that none is drawn twice.
    """
    from attn_mt.decoding.attention import TITLES

    pictures = pictures or {}
    parts = [
        f"<p><b>source</b> {tokens_html(attention.source_tokens)}</p>",
        f"<p><b>output</b> {tokens_html(attention.output_tokens)}</p>",
    ]
    for name, weights in attention.maps.items():
        shape = " x ".join(str(size) for size in weights.shape)
        png = pictures[name] if name in pictures else attention_png(attention, name)
        parts.append(f"<p><b>{html.escape(TITLES[name])}</b> <code>{name}</code> ({shape})</p>")
        parts.append(image_tag(png, f"{TITLES[name]} heatmap"))
    return f"<div>{''.join(parts)}</div>"


def attention_bundle(attention: SentenceAttention) -> dict[str, Any]:
    """Jupyter's whole view of the maps at once, HTML and the main map's PNG, each map drawn once."""
    pictures = {name: attention_png(attention, name) for name in attention.maps}
    return {"text/html": attention_html(attention, pictures), "image/png": pictures[main_map(attention)]}
