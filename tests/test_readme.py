"""The README keeps its promises: at most 150 lines, the two `make` commands first, every command and option
it shows exists, and its quick start runs as written. The docs link every benchmark folder they keep."""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from support.helpers import ROOT
from typer.main import get_command

from attn_mt.cli import app

README = ROOT / "README.md"
COMMANDS = get_command(app).commands
OPTION = re.compile(r"(?<![\w-])(--[a-z][a-z0-9-]*|-[a-z])\b")


def readme_code_lines(prefix: str) -> list[str]:
    """The README's indented code lines that start with `prefix`, without their trailing comments."""
    lines = []
    for line in README.read_text(encoding="utf-8").splitlines():
        if line.startswith("    ") and line.strip().startswith(prefix):
            lines.append(re.split(r"\s{2,}#", line.strip(), maxsplit=1)[0])
    return lines


def options_of(command: str) -> set[str]:
    """Every option name the CLI command accepts (long and short forms)."""
    return {name for param in COMMANDS[command].params for name in (*param.opts, *param.secondary_opts)}


def test_readme_is_short_and_starts_with_the_two_commands_that_work_on_a_fresh_machine():
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 150, len(lines)
    firsts = [line.split()[:2] for line in lines[:5] if line.startswith("    make ")]
    assert firsts == [["make", "train"], ["make", "test"]]


def test_commands_list_names_every_cli_command():
    text = README.read_text(encoding="utf-8")
    section = text.split("## Commands", 1)[1].split("\n## ", 1)[0]
    listed = {line.split()[1] for line in section.splitlines() if line.strip().startswith("attn-mt ")}
    assert listed == set(COMMANDS)


def test_every_readme_command_and_option_exists():
    lines = readme_code_lines("attn-mt ")
    assert len(lines) > 12
    for line in lines:
        command = line.split()[1]
        assert command in COMMANDS, line
        unknown = set(OPTION.findall(re.sub(r"\"[^\"]*\"", "", line))) - options_of(command)
        assert not unknown, (line, unknown)


def test_every_make_target_the_readme_names_exists():
    targets = set(re.findall(r"^([\w-]+):", (ROOT / "Makefile").read_text(encoding="utf-8"), re.M))
    named = {line.split()[1] for line in readme_code_lines("make ")}
    assert named and named <= targets, named - targets


def test_every_benchmark_folder_is_linked_from_a_docs_page():
    pages = "".join(p.read_text(encoding="utf-8") for p in [README, *sorted((ROOT / "docs").glob("*.md"))])
    for folder in sorted(p for p in (ROOT / "docs" / "bench").iterdir() if p.is_dir()):
        assert re.search(rf"bench/{re.escape(folder.name)}(/|\)|`|\b)", pages), folder.name


@pytest.mark.corpus
@pytest.mark.slow
def test_the_quick_start_runs_as_written(corpus_path, tmp_path):
    """train, translate, eval and report of the quick start, in a fresh folder (the book's run, ~1 minute)."""
    attn_mt = shutil.which("attn-mt", path=str(Path(sys.executable).parent)) or "attn-mt"
    quick = README.read_text(encoding="utf-8").split("## Quick start", 1)[1].split("\n## ", 1)[0]
    steps = [line for line in readme_code_lines("attn-mt ") if line in quick]
    assert [s.split()[1] for s in steps] == ["train", "translate", "eval", "report"]
    outputs = []
    for step in steps:
        data = ["--data", str(corpus_path)] if step.split()[1] == "train" else []
        done = subprocess.run(
            [attn_mt, *shlex.split(step)[1:], *data],
            capture_output=True,
            text=True,
            cwd=tmp_path,
            timeout=600,
        )
        assert done.returncode == 0, (step, done.stderr[-2000:])
        outputs.append(done.stdout)
    assert len(outputs[1].splitlines()) == 4 and "BLEU" in outputs[2]
    assert (tmp_path / "runs" / "d2l_bahdanau" / "report.html").is_file()
