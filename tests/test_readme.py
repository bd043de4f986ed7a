"""The README's Commands list names every command of the CLI."""

from __future__ import annotations

from pathlib import Path

from typer.main import get_command

from attn_mt.cli import app

README = Path(__file__).resolve().parent.parent / "README.md"


def test_commands_list_names_every_cli_command():
    text = README.read_text(encoding="utf-8")
    section = text.split("## Commands", 1)[1].split("\n## ", 1)[0]
    listed = {line.split()[1] for line in section.splitlines() if line.strip().startswith("attn-mt ")}
    assert listed == set(get_command(app).commands)
