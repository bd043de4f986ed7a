"""`attn-mt runs`: a table of runs, with notes about runs it could not read on stderr."""

from __future__ import annotations

from pathlib import Path

import typer

from attn_mt.report.runs import list_runs


def run_runs(folders: list[Path], sort: str | None, as_json: bool) -> None:
    """Print the table (or JSON rows) of the runs under `folders` (default runs/); notes go to stderr."""
    text, notes = list_runs(folders or [Path("runs")], sort, as_json)
    for note in notes:
        typer.echo(note, err=True)
    typer.echo(text)
