"""`attn-mt lab`: open the given runs (torch models only) and serve the lab page over them."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from attn_mt.errors import UserError
from attn_mt.i18n import resolve_language
from attn_mt.i18n.languages import ENV_VAR, UnknownLanguageError
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


def page_language(flag: str | None, environ: Mapping[str, str] | None = None) -> str | None:
    """The lab's default language: --lang, else $ATTN_MT_LANG; None leaves it to each browser's
    Accept-Language (the machine's locale says less about the reader than the browser does)."""
    environ = os.environ if environ is None else environ
    if not flag and not environ.get(ENV_VAR):
        return None
    try:
        return resolve_language(flag, environ)
    except UnknownLanguageError as exc:
        raise UserError(str(exc)) from None


def run_lab(
    run_dirs: list[Path],
    host: str = "127.0.0.1",
    port: int = 8001,
    checkpoint: str = "best",
    device: str = "cpu",
    allowed_hosts: str | None = None,
    lang: str | None = None,
) -> None:
    """Serve the lab page, with step-through decoding and heads of each run, until interrupted; the page
    speaks `lang` (else $ATTN_MT_LANG) until the reader switches, else the browser's language."""
    default = page_language(lang)
    if not 0 <= port <= 65535:
        raise UserError(f"--port must be between 0 and 65535, got {port}")
    runs: dict[str, LoadedRun] = {}
    for name, path in zip(run_names(run_dirs), run_dirs, strict=True):
        run = open_model(path, checkpoint, device)
        if run.kind.engine != "torch":
            raise UserError(f"{path}: the lab steps through torch models; give the run directory instead")
        runs[name] = run
    run_lab_server(runs, host, port, split_names(allowed_hosts), default)
