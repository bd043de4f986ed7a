"""`attn-mt demo NAME`: run one of the attention chapter's demonstrations and print its numbers."""

from __future__ import annotations

import json
from pathlib import Path

import typer

from attn_mt.commands.language import set_language
from attn_mt.demos.inline import scalars_only
from attn_mt.demos.registry import demo_named
from attn_mt.i18n import _


def run_demo(name: str, out: Path, seed: int, lang: str | None = None) -> None:
    """Write the demo's figures and full JSON into OUT/NAME and print its headline numbers, in `lang`
    (--lang; None: $ATTN_MT_LANG, else the locale's)."""
    set_language(lang, figures=True)
    demo = demo_named(name)
    target = out / name
    target.mkdir(parents=True, exist_ok=True)
    numbers = demo(target, seed)
    typer.echo(json.dumps(scalars_only(numbers), indent=2, default=str))
    typer.echo(_("figures and the full JSON written to {folder}").format(folder=target))
