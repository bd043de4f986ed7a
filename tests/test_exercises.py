"""The exercise notebooks (notebooks/exercises/): cells to fill, each followed by a `check(...)` cell.

All six run in one kernel (one notebook made of theirs, in order), once with the book's solution filled
into every exercise cell (tests/check_solutions/d2l_blocks.py), where every check passes, and once with
a common mistake planted into each, where each check names its mistake. Their Chinese and Vietnamese copies
(notebooks/zh/exercises/, notebooks/vi/exercises/, built by `make notebooks`) run both ways too, one kernel
per language, and each check reports in the copy's language.
"""

from __future__ import annotations

import re
from pathlib import Path

import nbformat
import pytest
from support.helpers import ROOT
from support.notebook_kernel import execute_notebook, kernel_environment
from support.planted_mistakes import solution_source

from attn_mt.check.mistakes import BY_ID
from attn_mt.i18n import gettext, in_language, pgettext
from attn_mt.i18n.catalogues import translated_languages
from attn_mt.i18n.notebooks import copy_path

EXERCISES = sorted((ROOT / "notebooks" / "exercises").glob("*.ipynb"))

# exercise -> the mistake planted in it; None where a later exercise of its notebook builds on it (its
# mistakes are named by tests/test_check.py)
PLANTED_IN = {
    "masked_softmax": "mask-with-zero",
    "AdditiveAttention": "no-tanh",
    "DotProductAttention": "no-scaling",
    "MultiHeadAttention": "valid-lens-tiled",
    "PositionalEncoding": "sin-cos-swapped",
    "PositionWiseFFN": None,
    "AddNorm": None,
    "TransformerEncoderBlock": "block-residual-from-input",
    "Seq2SeqAttentionDecoder": "query-from-first-layer",
}


def exercise_name(cell: nbformat.NotebookNode) -> str:
    """The block an exercise cell asks for ('' for other cells)."""
    return cell.metadata.get("attn_mt", {}).get("exercise", "")


def filled(mistakes: bool, paths: list[Path] = EXERCISES) -> nbformat.NotebookNode:
    """Every exercise notebook's cells (those at `paths`: the English ones, or a language's copies) in one
    notebook, each exercise filled in (with its mistake)."""
    cells = []
    for path in paths:
        for cell in nbformat.read(path, as_version=4).cells:
            name = exercise_name(cell)
            if name:
                cell.source = solution_source(name, (PLANTED_IN[name] or "") if mistakes else "")
            cells.append(cell)
    notebook = nbformat.read(paths[0], as_version=4)  # their version and kernel, all their cells
    notebook.cells = cells
    return notebook


def check_outputs(notebook: nbformat.NotebookNode) -> list[tuple[str, str]]:
    """(the exercise before it, what it printed) for each check cell."""
    outputs, last = [], ""
    for cell in notebook.cells:
        last = exercise_name(cell) or last
        if cell.get("metadata", {}).get("attn_mt", {}).get("check"):
            outputs.append((last, "".join(output.get("text", "") for output in cell.outputs)))
    return outputs


def test_every_exercise_is_followed_by_its_check_and_stored_without_outputs() -> None:
    assert len(EXERCISES) == 6
    names = []
    for path in EXERCISES:
        notebook = nbformat.read(path, as_version=4)
        nbformat.validate(notebook)
        code = [cell for cell in notebook.cells if cell.cell_type == "code"]
        assert all(cell.outputs == [] and cell.execution_count is None for cell in code), path.name
        assert code[-1].metadata["attn_mt"]["check"], f"{path.name} ends in check(...)"
        for cell, after in zip(code, code[1:], strict=False):
            if exercise_name(cell):
                names.append(exercise_name(cell))
                assert after.metadata["attn_mt"]["check"] and f"check({exercise_name(cell)}" in after.source
    assert names == list(PLANTED_IN)
    assert all(
        path.name in (ROOT / "docs" / "notebooks.md").read_text(encoding="utf-8") for path in EXERCISES
    )


@pytest.fixture
def folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The folder a kernel importing this checkout runs in."""
    return kernel_environment(tmp_path, monkeypatch)


def test_the_books_solutions_pass_every_check(folder: Path) -> None:
    outputs = check_outputs(execute_notebook(filled(mistakes=False), folder))
    assert [name for name, _ in outputs] == list(PLANTED_IN)
    for name, printed in outputs:
        counts = re.findall(r"(\d+) of (\d+) cases passed", printed)
        assert counts and all(passed == total for passed, total in counts), printed
        assert "FAIL" not in printed, (name, printed)


def test_each_planted_mistake_is_named_by_its_check(folder: Path) -> None:
    outputs = check_outputs(execute_notebook(filled(mistakes=True), folder))
    assert [name for name, _ in outputs] == list(PLANTED_IN)
    for name, printed in outputs:
        mistake = PLANTED_IN[name]
        if mistake is None:
            assert "FAIL" not in printed, (name, printed)
        else:
            assert f"mistake [{mistake}]" in printed, (name, printed)


def summary_counts(printed: str) -> list[tuple[str, str]]:
    """(passed, total) of each block's summary line in `printed`, as the language in force writes it."""
    line = re.escape(gettext("{block}: {passed} of {total} cases passed"))
    for field, pattern in (("block", r"\w+"), ("passed", r"(?P<passed>\d+)"), ("total", r"(?P<total>\d+)")):
        line = line.replace(re.escape("{" + field + "}"), pattern)
    return [(found["passed"], found["total"]) for found in re.finditer(line, printed)]


@pytest.mark.parametrize("lang", translated_languages())
def test_the_copies_check_the_solutions_and_the_mistakes_in_their_language(lang: str, folder: Path) -> None:
    copies = [copy_path(path, lang) for path in EXERCISES]
    notebook = filled(mistakes=False, paths=copies)
    notebook.cells += filled(mistakes=True, paths=copies).cells  # one kernel: the planted redefine the solved
    outputs = check_outputs(execute_notebook(notebook, folder))
    assert [name for name, _ in outputs] == list(PLANTED_IN) * 2
    solved, planted = outputs[: len(PLANTED_IN)], outputs[len(PLANTED_IN) :]
    with in_language(lang):
        fail = pgettext("a case of attn-mt check", "FAIL")
        for name, printed in solved:
            counts = summary_counts(printed)
            assert counts and all(passed == total for passed, total in counts), printed
            assert fail not in printed, (name, printed)
        for name, printed in planted:
            mistake = PLANTED_IN[name]
            if mistake is None:
                assert summary_counts(printed) and fail not in printed, (name, printed)
            else:
                named = gettext("mistake [{id}]: {title}.").format(
                    id=mistake, title=gettext(BY_ID[mistake].title)
                )
                assert named in printed, (name, printed)
    everything = "".join(printed for _, printed in outputs)
    assert "cases passed" not in everything and "mistake [" not in everything  # no English line
