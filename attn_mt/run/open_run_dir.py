"""Open a run directory's checkpoint with torch: the device `--device` names, int8 layers when asked.

Threads are torch's own ($OMP_NUM_THREADS, else torch's default); a command that wants another
count sets it with torch before opening.
"""

from __future__ import annotations

from pathlib import Path

from attn_mt.run.device import avoid_cudnn_attention, pick_device
from attn_mt.run.opened import LoadedRun, ModelKind
from attn_mt.run.quantize import quantize_model
from attn_mt.run.run_dir import load_run


def open_run_dir(source: Path, checkpoint: str, device: str, quantize: str | None) -> LoadedRun:
    """The run's `checkpoint` (best, last, a name or a path) on `device`, int8 when `quantize` asks."""
    where = pick_device(device)
    avoid_cudnn_attention(where)
    run = load_run(source, checkpoint, where)
    if quantize is not None:
        run.model = quantize_model(run.model, quantize, where)
    run.kind, run.device = ModelKind.RUN_DIR, str(where)
    return run
