"""`attn-mt data-report`: load the corpus as a config says and print what training would see."""

from __future__ import annotations

import json
from pathlib import Path

import typer

from attn_mt.config import load_config
from attn_mt.data.dataset import load_data
from attn_mt.data.report import format_report


def run_data_report(
    config: Path | None, overrides: list[str], data: str | None, json_out: Path | None
) -> None:
    """Print pairs, lengths, vocabularies and split overlap; also write them as JSON to `json_out`."""
    cfg = load_config(config, overrides)
    loaded = load_data(cfg.data, data)
    typer.echo(format_report(loaded.report))
    if json_out is not None:
        json_out.write_text(json.dumps(loaded.report, indent=2), encoding="utf-8")
