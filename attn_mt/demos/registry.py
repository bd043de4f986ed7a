"""The chapter demos by the name `attn-mt demo NAME` takes: each run(out_dir, seed) writes PNGs and a JSON."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from attn_mt.demos import nadaraya_watson, positional_encoding, scoring

DEMOS: dict[str, Callable[[Path, int], dict[str, Any]]] = {
    nadaraya_watson.NAME: nadaraya_watson.run,
    scoring.NAME: scoring.run,
    positional_encoding.NAME: positional_encoding.run,
}
