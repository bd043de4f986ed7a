"""Where translate and eval get their model: a run directory, an export file (optionally int8) or an
exported CTranslate2 folder."""

from __future__ import annotations

from pathlib import Path

import torch

from attn_mt.errors import UserError
from attn_mt.run.ctranslate2_folder import is_ctranslate2_folder, load_ctranslate2_folder
from attn_mt.run.run_dir import LoadedRun, load_run
from attn_mt.shipping.export import load_export
from attn_mt.shipping.quantize import quantize_model


def load_model(
    source: Path, checkpoint: str = "best", device: torch.device | str = "cpu", quantize: str | None = None
) -> LoadedRun:
    """A run directory's `checkpoint`, an export file or a CTranslate2 folder on `device`; int8 when asked."""
    source = Path(source)
    if is_ctranslate2_folder(source):
        if checkpoint != "best":
            raise UserError(f"--checkpoint {checkpoint}: {source} is a CTranslate2 folder, which holds one "
                            "model")
        return load_ctranslate2_folder(source, torch.device(device).type, torch.get_num_threads(), quantize)
    if source.is_file():
        if checkpoint != "best":
            raise UserError(f"--checkpoint {checkpoint}: {source} is an export file, which holds one model")
        run = load_export(source, device)
    else:
        run = load_run(source, checkpoint, device)
    if quantize is not None:
        run.model = quantize_model(run.model, quantize, torch.device(device))
    return run
