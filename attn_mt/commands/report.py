"""`attn-mt report`: read one or more run directories and write their HTML page."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import typer

from attn_mt.commands.language import set_language
from attn_mt.errors import UserError
from attn_mt.i18n import _
from attn_mt.report import check_run_folder, read_run, render_report

REPORT_NAME = "report.html"


def default_output(run_dirs: Sequence[Path]) -> Path:
    """RUN_DIR/report.html for one run, ./report.html for several."""
    return Path(run_dirs[0]) / REPORT_NAME if len(run_dirs) == 1 else Path(REPORT_NAME)


def run_report(run_dirs: list[Path], out: Path | None, lang: str | None = None) -> Path:
    """Read the runs, write the HTML page (to `out` or the default) in `lang` (--lang; None: $ATTN_MT_LANG,
    else the locale's), say so, and return its path."""
    set_language(lang, figures=True)
    if not run_dirs:
        raise UserError("give at least one run directory")
    for run_dir in run_dirs:
        check_run_folder(Path(run_dir))
    target = Path(out) if out is not None else default_output(run_dirs)
    if target.is_dir():
        raise UserError(f"--out {target} is a directory; give a file name such as {target / REPORT_NAME}")
    page = render_report([read_run(Path(d)) for d in run_dirs])
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(page, encoding="utf-8")
    typer.echo(_("report written to {file}").format(file=target))
    return target
