"""Open the model a command names, importing torch only for a torch model.

A CTranslate2 folder translates without torch, so `attn-mt translate` on one starts in a fraction
of the time (importing torch alone takes 1-3 s); a run directory or an export file goes through
`run/load.py` on the device `run/device.py` picks.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from attn_mt.run.ctranslate2_folder import (
    cpu_threads,
    ctranslate2_device,
    is_ctranslate2_folder,
    load_ctranslate2_folder,
)
from attn_mt.run.run_dir import LoadedRun

if TYPE_CHECKING:
    import torch


def open_model(
    source: Path, checkpoint: str, device: str, quantize: str | None
) -> tuple[LoadedRun, torch.device | str]:
    """(the loaded model of a run directory, export file or CTranslate2 folder, the device it runs on)."""
    if is_ctranslate2_folder(source):
        run = load_ctranslate2_folder(source, ctranslate2_device(device), cpu_threads(), quantize, checkpoint)
        return run, run.model.device
    from attn_mt.run.device import pick_device  # torch (see the module docstring)
    from attn_mt.run.load import load_model

    where = pick_device(device)
    return load_model(source, checkpoint, where, quantize), where
