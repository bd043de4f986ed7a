"""Where translate and eval get their model: a run directory or an export file, optionally int8."""

from __future__ import annotations

from pathlib import Path

import torch

from attn_mt.errors import UserError
from attn_mt.run.run_dir import LoadedRun, load_run
from attn_mt.shipping.export import load_export
from attn_mt.shipping.quantize import quantize_model


def load_model(
    source: Path, checkpoint: str = "best", device: torch.device | str = "cpu", quantize: str | None = None
) -> LoadedRun:
    """A run directory's `checkpoint` or an export file, on `device`, int8-quantised when asked."""
    source = Path(source)
    if source.is_file():
        if checkpoint != "best":
            raise UserError(f"--checkpoint {checkpoint}: {source} is an export file, which holds one model")
        run = load_export(source, device)
    else:
        run = load_run(source, checkpoint, device)
    if quantize is not None:
        run.model = quantize_model(run.model, quantize, torch.device(device))
    return run
