"""`attn-mt export`: one file holding a run's model, config and vocabularies, or its ONNX graphs."""

from __future__ import annotations

from pathlib import Path

import typer

from attn_mt.errors import UserError
from attn_mt.run.run_dir import load_run
from attn_mt.shipping.export import write_export
from attn_mt.shipping.onnx_graphs import write_onnx

FORMATS = ("pt", "onnx")


def run_export(run_dir: Path, out: Path, checkpoint: str = "best", fmt: str = "pt") -> Path:
    """Write the run's `checkpoint` as one file (`fmt` pt) or a folder of ONNX graphs (onnx) at `out`."""
    if fmt not in FORMATS:
        raise UserError(f"--format {fmt!r}: choose pt or onnx")
    if fmt == "onnx":
        if out.exists() and not out.is_dir():
            raise UserError(f"--format onnx writes a folder, but {out} is a file")
        write_onnx(load_run(run_dir, checkpoint, "cpu"), out)
        typer.echo(f"ONNX encoder and decoder step written to {out}")
        return out
    if out.is_dir():
        raise UserError(f"{out} is a directory; give a file path for the export")
    write_export(load_run(run_dir, checkpoint, "cpu"), out)
    typer.echo(f"export written to {out}")
    return out
