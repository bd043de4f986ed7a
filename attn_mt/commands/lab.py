"""`attn-mt lab`: open the given runs (torch models only) and serve the lab page over them."""

from __future__ import annotations

from pathlib import Path

from attn_mt.errors import UserError
from attn_mt.lab.server import run_lab_server
from attn_mt.run.open import open_model
from attn_mt.run.opened import LoadedRun
from attn_mt.web.guard import split_names


def run_names(run_dirs: list[Path]) -> list[str]:
    """A short unique name per run: its folder's name, numbered when two folders share one."""
    names: list[str] = []
    for path in run_dirs:
        name = Path(path).resolve().name or "run"
        names.append(name if name not in names else f"{name}-{len(names) + 1}")
    return names


def run_lab(
    run_dirs: list[Path],
    host: str = "127.0.0.1",
    port: int = 8001,
    checkpoint: str = "best",
    device: str = "cpu",
    allowed_hosts: str | None = None,
) -> None:
    """Serve the lab page, with step-through decoding and heads of each run, until interrupted."""
    if not 0 <= port <= 65535:
        raise UserError(f"--port must be between 0 and 65535, got {port}")
    runs: dict[str, LoadedRun] = {}
    for name, path in zip(run_names(run_dirs), run_dirs, strict=True):
        run = open_model(path, checkpoint, device)
        if run.kind.engine != "torch":
            raise UserError(f"{path}: the lab steps through torch models; give the run directory instead")
        runs[name] = run
    run_lab_server(runs, host, port, split_names(allowed_hosts))
