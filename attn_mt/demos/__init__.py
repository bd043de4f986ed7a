"""The chapter demos behind `attn-mt demo NAME` (registry.py), and `show(NAME)` for Jupyter (inline.py)."""

from __future__ import annotations

from attn_mt.demos.inline import DemoFigures, show
from attn_mt.demos.registry import DEMOS

__all__ = ["DEMOS", "DemoFigures", "show"]
