"""`attn-mt average`: the mean of a run's kept checkpoints, written as checkpoints/NAME.pt."""

from __future__ import annotations

from pathlib import Path

import typer

from attn_mt.errors import UserError
from attn_mt.run.checkpoint import save_checkpoint
from attn_mt.run.run_dir import check_run_dir
from attn_mt.shipping.average import average_checkpoints, choose_checkpoints


def run_average(run_dir: Path, last: int | None, best: int | None, name: str) -> Path:
    """Average a run's kept checkpoints into checkpoints/NAME.pt, say so, and return its path."""
    if not name or "/" in name or name.startswith(".") or name in ("last", "best"):
        raise UserError(f"--out {name!r}: give a plain name other than last and best, e.g. average")
    chosen = choose_checkpoints(run_dir, last, best)
    out = check_run_dir(run_dir).checkpoints / f"{name}.pt"
    save_checkpoint(average_checkpoints(chosen), out)
    typer.echo(f"averaged checkpoint written to {out}")
    return out
