"""docs/architecture.md's example runs: a new scoring function and model, decoded by both searches."""

from __future__ import annotations

import re
from pathlib import Path

ARCHITECTURE = Path(__file__).resolve().parent.parent / "docs" / "architecture.md"


def example_code() -> str:
    """The one Python block of docs/architecture.md."""
    blocks = re.findall(r"```python\n(.*?)```", ARCHITECTURE.read_text(encoding="utf-8"), flags=re.S)
    assert len(blocks) == 1, f"docs/architecture.md should hold one python block, found {len(blocks)}"
    return blocks[0]


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
    assert len(ARCHITECTURE.read_text(encoding="utf-8").splitlines()) < 150
