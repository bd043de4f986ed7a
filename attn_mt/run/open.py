"""The one way in: tell which kind of model a path holds, and open it with that kind's opener.

    a folder with CTranslate2's model.bin or attn-mt's attn_mt_ctranslate2.json  run/open_ctranslate2.py
    a file (written by `attn-mt export`)                                           run/open_export.py
    any other folder (a run directory)                                            run/open_run_dir.py

Each opener resolves `--device` and threads for its engine and returns a `LoadedRun` that says its
kind and device, so translate, eval, serve and `attn_mt.load` open a model the same way. Only the
torch openers import torch: a CTranslate2 folder translates without it (importing torch alone takes
1-3 s).
"""

from __future__ import annotations

from pathlib import Path

from attn_mt.run.ctranslate2_folder import META_FILE, MODEL_FILE
from attn_mt.run.opened import LoadedRun, ModelKind


def is_ctranslate2_folder(path: Path) -> bool:
    """Whether `path` is a folder holding a CTranslate2 model (attn-mt's or another converter's)."""
    path = Path(path)
    return path.is_dir() and ((path / META_FILE).is_file() or (path / MODEL_FILE).is_file())


def model_kind(source: Path) -> ModelKind:
    """Which kind of model `source` holds (a missing path counts as a run directory, whose opener says so)."""
    source = Path(source)
    if is_ctranslate2_folder(source):
        return ModelKind.CTRANSLATE2_FOLDER
    return ModelKind.EXPORT_FILE if source.is_file() else ModelKind.RUN_DIR


def open_model(
    source: Path, checkpoint: str = "best", device: str = "auto", quantize: str | None = None
) -> LoadedRun:
    """Open a run directory's `checkpoint`, an export file or a CTranslate2 folder on `device`."""
    kind = model_kind(source)
    if kind is ModelKind.CTRANSLATE2_FOLDER:
        from attn_mt.run.open_ctranslate2 import open_ctranslate2_folder

        return open_ctranslate2_folder(Path(source), checkpoint, device, quantize)
    if kind is ModelKind.EXPORT_FILE:
        from attn_mt.run.open_export import open_export_file  # torch

        return open_export_file(Path(source), checkpoint, device, quantize)
    from attn_mt.run.open_run_dir import open_run_dir  # torch

    return open_run_dir(Path(source), checkpoint, device, quantize)
