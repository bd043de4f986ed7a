"""`attn-mt prepare`: split, learn the vocabularies and encode a split-mode run's corpus once."""

from __future__ import annotations

from pathlib import Path

import typer

from attn_mt.config import load_config
from attn_mt.data.prepare import format_prepared, prepare
from attn_mt.training.logs import setup_logging


def run_prepare(config: Path, overrides: list[str], data: str | None, workers: int, quiet: bool) -> None:
    """Prepare the corpus the config names (into the shared store) and print what was prepared."""
    cfg = load_config(config, overrides)
    setup_logging(None, quiet)
    typer.echo(format_prepared(*prepare(cfg.data, data, workers or None, progress=not quiet)))
