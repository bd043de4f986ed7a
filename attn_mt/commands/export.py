"""`attn-mt export`: a run as one file (model, config, vocabularies), ONNX graphs, a CTranslate2 folder or a
Hugging Face (Marian) folder."""

from __future__ import annotations

from pathlib import Path

import typer

from attn_mt.errors import UserError
from attn_mt.run.run_dir import load_run
from attn_mt.shipping.ctranslate2_export import export_ctranslate2
from attn_mt.shipping.export import write_export
from attn_mt.shipping.huggingface_export import export_huggingface
from attn_mt.shipping.onnx_graphs import write_onnx

FORMATS = ("pt", "onnx", "ctranslate2", "huggingface")


def run_export(
    run_dir: Path, out: Path, checkpoint: str = "best", fmt: str = "pt", quantize: str | None = None
) -> Path:
    """Write the run's `checkpoint` as one file (pt), ONNX graphs, a CTranslate2 or Hugging Face folder."""
    if fmt not in FORMATS:
        raise UserError(f"--format {fmt!r}: choose pt, onnx, ctranslate2 or huggingface")
    if fmt == "ctranslate2":
        folder = export_ctranslate2(run_dir, out, checkpoint, quantize)
        typer.echo(f"CTranslate2 folder written to {folder}")
        return folder
    if fmt == "huggingface" and quantize is None:
        folder = export_huggingface(run_dir, out, checkpoint)
        typer.echo(f"Hugging Face (Marian) folder written to {folder}")
        return folder
    if quantize is not None:
        raise UserError(
            f"--quantize {quantize} applies to --format ctranslate2 only (translate, eval and serve take "
            "--quantize int8 for a run or export file)"
        )
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
