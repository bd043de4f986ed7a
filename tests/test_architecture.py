"""docs/architecture.md's examples run: a scoring function and model, decoded by both searches; a key."""

from __future__ import annotations

import re
from pathlib import Path

ARCHITECTURE = Path(__file__).resolve().parent.parent / "docs" / "architecture.md"


def blocks(heading: str, language: str) -> list[str]:
    """The fenced blocks in `language` of the docs/architecture.md section titled `heading`."""
    text = ARCHITECTURE.read_text(encoding="utf-8")
    section = text.split(f"\n## {heading}\n", 1)[1].split("\n## ", 1)[0]
    return re.findall(rf"```{language}\n(.*?)```", section, flags=re.S)


def example_code() -> str:
    """The one Python block of the section on adding a model."""
    (code,) = blocks("Adding a model or a scoring function", "python")
    return code


def test_the_architecture_example_runs_and_decodes_two_sentences(capsys):
    namespace: dict = {"__name__": "architecture_example"}
    exec(compile(example_code(), str(ARCHITECTURE), "exec"), namespace)
    greedy = namespace["greedy"]
    assert len(greedy) == 2
    assert [h.attention.shape[-1] for h in greedy] == [4, 3]  # each sentence's own source length
    rows = greedy[0].attention.sum(-1)  # each step's weights over the source sum to one
    assert rows.sub(1).abs().max() < 1e-5
    assert capsys.readouterr().out.strip() == str([h.tokens for h in greedy])


def test_the_architecture_page_stays_short():
    assert len(ARCHITECTURE.read_text(encoding="utf-8").splitlines()) < 175


def test_the_config_key_example_is_config_py_and_its_commands_print_what_it_shows(run_cli):
    """The declaration shown is the one in config.py; --explain and a bad value print the lines shown."""
    (declaration,) = blocks("Adding a config key", "python")
    config_py = ARCHITECTURE.parent.parent / "attn_mt" / "config.py"
    assert declaration in config_py.read_text(encoding="utf-8")
    (session,) = blocks("Adding a config key", "text")
    commands = re.findall(r"^\$ attn-mt (.*)\n((?:[^$].*\n)+)", session, flags=re.M)
    assert len(commands) == 2
    for command, shown in commands:
        result = run_cli(*command.split())
        assert result.stdout + result.stderr == shown
