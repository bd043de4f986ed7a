"""`attn-mt check FILE`: run a learner's blocks of the chapter against attn-mt's and print what differs."""

from __future__ import annotations

from pathlib import Path

import typer

from attn_mt.check import BLOCK_NAMES, check_file
from attn_mt.check.process import check_timeout
from attn_mt.commands.language import set_language
from attn_mt.errors import UserError
from attn_mt.i18n import _


def run_check(path: Path, blocks: list[str], timeout_s: float, lang: str | None = None) -> None:
    """Check FILE in a child process within `timeout_s` and report in `lang` (--lang; None: $ATTN_MT_LANG,
    else the locale's); exit 1 when a block fails or the file stops early."""
    set_language(lang)
    unknown = [name for name in blocks if name not in BLOCK_NAMES]
    if unknown:
        raise UserError(
            _("--block {name}: not one of {names}").format(name=unknown[0], names=", ".join(BLOCK_NAMES))
        )
    check_timeout(timeout_s, "--timeout")
    report = check_file(path, tuple(blocks), timeout_s)
    typer.echo(report.text())
    if not report.passed:
        raise typer.Exit(1)
