"""The chapter demos shown inline in Jupyter: `show("scoring")` runs one and keeps its figures in memory."""

from __future__ import annotations

import html
import json
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from attn_mt.decoding.display import image_tag
from attn_mt.demos.registry import demo_named
from attn_mt.i18n import _


def scalars_only(tree: dict) -> dict:
    """A nested dict without its lists: the headline numbers of a demo."""
    out = {}
    for key, value in tree.items():
        if isinstance(value, dict):
            value = scalars_only(value)
        if not isinstance(value, (list, tuple)) and value != {}:
            out[key] = value
    return out


@dataclass
class DemoFigures:
    """One demo's results (its JSON) and figures (file name -> PNG bytes), shown inline by Jupyter."""

    name: str
    results: dict[str, Any]
    figures: dict[str, bytes]

    def _repr_png_(self) -> bytes:
        """Jupyter's picture: the demo's first figure."""
        return next(iter(self.figures.values()))

    def _repr_html_(self) -> str:
        """Jupyter's view: the headline numbers, then every figure."""
        numbers = html.escape(json.dumps(scalars_only(self.results), indent=2, default=str), quote=False)
        images = "".join(image_tag(png, name) for name, png in self.figures.items())
        title = html.escape(_("demo {name}").format(name=self.name))
        return f"<div><p><b>{title}</b></p><pre>{numbers}</pre>{images}</div>"


def show(name: str, seed: int = 0) -> DemoFigures:
    """Run demo `name` (`attn-mt demo`'s names) in a temporary folder; its numbers and figures in memory."""
    demo = demo_named(name)
    with tempfile.TemporaryDirectory(prefix="attn-mt-demo-") as folder:
        results = demo(Path(folder), seed)
        figures = {file: (Path(folder) / file).read_bytes() for file in results["figures"]}
    return DemoFigures(name, results, figures)
