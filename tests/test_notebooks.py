"""The chapter's notebooks (notebooks/): stored without outputs, listed in docs/notebooks.md, and each runs
top to bottom in a fresh Jupyter kernel that imports this checkout's attn_mt. Those that train on the real
corpus read it from $ATTN_MT_DATA and fail, never skip, without it.

Their Chinese and Vietnamese copies (notebooks/zh/, notebooks/vi/), and the exercise notebooks' (notebooks/zh/
exercises/, ...), are what `make notebooks` builds from them and the catalogues, code cells unchanged but the
language cell; each language's seven run in one kernel, their training cut to one epoch (the English runs
show what the code computes; tests/test_exercises.py runs the exercises' copies)."""

from __future__ import annotations

import re
from pathlib import Path

import nbformat
import pytest
from support.helpers import ROOT
from support.notebook_kernel import execute_notebook, kernel_environment

from attn_mt.i18n import _, in_language
from attn_mt.i18n.catalogues import translated_languages
from attn_mt.i18n.notebooks import (
    RELATIVE_LINK,
    built_copies,
    copy_path,
    is_language_cell,
    markdown_units,
    stored_copies,
)

NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
EXERCISES = sorted((ROOT / "notebooks" / "exercises").glob("*.ipynb"))
DOC = ROOT / "docs" / "notebooks.md"
WHERE_FROM = "import attn_mt; print(attn_mt.__file__)"


def needs_corpus(path: Path) -> bool:
    """Whether the notebook trains on the real corpus (its metadata says so)."""
    return bool(nbformat.read(path, as_version=4).metadata.get("attn_mt", {}).get("needs_corpus"))


CORPUS_NOTEBOOKS = [path for path in NOTEBOOKS if needs_corpus(path)]
SYNTHETIC_NOTEBOOKS = [path for path in NOTEBOOKS if not needs_corpus(path)]


@pytest.fixture
def kernel_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A Jupyter kernel that imports this checkout's attn_mt; returns the folder it runs in."""
    return kernel_environment(tmp_path, monkeypatch)


def execute(path: Path, folder: Path, first_cells: int = 0, then: str = "") -> nbformat.NotebookNode:
    """Run every cell of the notebook at `path` in `folder` (only its first `first_cells` code cells, and
    then the code `then`, when given), after a cell that prints where attn_mt is."""
    notebook = nbformat.read(path, as_version=4)
    if first_cells:
        notebook.cells = [cell for cell in notebook.cells if cell.cell_type == "code"][:first_cells]
        notebook.cells.append(nbformat.v4.new_code_cell(then))
    notebook.cells.insert(0, nbformat.v4.new_code_cell(WHERE_FROM))
    return execute_notebook(notebook, folder)


def check_ran(notebook: nbformat.NotebookNode) -> None:
    """The kernel imported this checkout's attn_mt, the notebook showed at least one picture, one that
    translates showed a translation's table (attn-mt's rich display), and no cell showed a bare number."""
    printed = notebook.cells[0].outputs[0]["text"].strip()
    assert Path(printed).resolve() == ROOT / "attn_mt" / "__init__.py"
    data = [output.get("data", {}) for cell in notebook.cells for output in cell.get("outputs", [])]
    assert any("image/png" in d or "data:image/png;base64," in d.get("text/html", "") for d in data)
    if any("translate_full" in cell.source for cell in notebook.cells):
        assert any("<b>source tokens</b>" in d.get("text/html", "") for d in data)
    for cell in notebook.cells[1:]:  # no cell shows a stray return value, such as write_text's count
        for output in cell.get("outputs", []):
            shown = output.get("data", {}).get("text/plain", "").strip()
            assert not shown.isdigit(), f"a bare number {shown} under the cell ending {cell.source[-80:]!r}"


COPIES = [copy_path(path, lang) for lang in translated_languages() for path in NOTEBOOKS + EXERCISES]


def test_the_notebooks_are_stored_without_outputs():
    assert len(NOTEBOOKS) == 7, [path.name for path in NOTEBOOKS]
    for path in NOTEBOOKS + COPIES:
        notebook = nbformat.read(path, as_version=4)
        nbformat.validate(notebook)
        for number, cell in enumerate(notebook.cells):
            if cell.cell_type == "code":
                where = f"{path.name} cell {number}: clear its outputs before committing"
                assert cell.outputs == [] and cell.execution_count is None, where


def test_the_copies_are_built_from_the_notebooks_and_the_catalogues():
    built = built_copies()
    assert sorted(built) == sorted(COPIES) == sorted(stored_copies())
    for path, text in built.items():
        assert path.read_text(encoding="utf-8") == text, f"{path.relative_to(ROOT)} is stale: make notebooks"


@pytest.mark.parametrize("lang", translated_languages())
def test_a_copy_is_its_notebook_in_another_language(lang: str):
    for path in NOTEBOOKS + EXERCISES:
        source, built = (nbformat.read(p, as_version=4) for p in (path, copy_path(path, lang)))
        assert [cell.cell_type for cell in source.cells] == [cell.cell_type for cell in built.cells]
        assert sum(is_language_cell(cell) for cell in source.cells) == 1, path.name
        for english, translated in zip(source.cells, built.cells, strict=True):
            if english.cell_type == "markdown":  # every heading and paragraph translated
                pairs = zip(markdown_units(english.source), markdown_units(translated.source), strict=True)
                assert all(ours[0] == theirs[0] and ours[1] != theirs[1] for ours, theirs in pairs)
                for link in RELATIVE_LINK.finditer(translated.source):  # the docs, from one folder deeper
                    target = link.group(2)[:-1].split("#")[0]
                    assert (copy_path(path, lang).parent / target).exists(), (path.name, target)
            elif is_language_cell(english):
                assert translated.source == english.source.replace('"en"', f'"{lang}"')
            else:
                assert translated.source == english.source


def test_the_docs_describe_every_notebook():
    text = DOC.read_text(encoding="utf-8")
    assert all(path.name in text for path in NOTEBOOKS)


@pytest.mark.parametrize("path", SYNTHETIC_NOTEBOOKS, ids=lambda path: path.stem)
def test_a_notebook_runs_top_to_bottom(path: Path, kernel_env: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.delenv("ATTN_MT_DATA", raising=False)  # these write their own data
    check_ran(execute(path, kernel_env))


@pytest.mark.parametrize("path", CORPUS_NOTEBOOKS, ids=lambda path: path.stem)
def test_a_corpus_notebook_runs_top_to_bottom(
    path: Path, kernel_env: Path, corpus_path: Path, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.setenv("ATTN_MT_DATA", str(corpus_path))
    check_ran(execute(path, kernel_env))


@pytest.mark.parametrize("path", CORPUS_NOTEBOOKS, ids=lambda path: path.stem)
def test_a_corpus_notebook_finds_the_corpus_as_the_cli_does(
    path: Path, kernel_env: Path, corpus_path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.delenv("ATTN_MT_DATA", raising=False)  # no variable: the cache, as `attn-mt train`
    cached = tmp_path / "cache" / "attn-mt" / "fra-eng.zip"
    cached.parent.mkdir(parents=True)
    cached.symlink_to(corpus_path)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    notebook = execute(path, kernel_env, first_cells=2, then="print(CORPUS)")  # language cell, imports
    assert notebook.cells[-1].outputs[0]["text"].strip() == str(corpus_path.resolve())


def one_notebook(paths: list[Path]) -> nbformat.NotebookNode:
    """The notebooks at `paths` as one, in order, every tiny run cut to one epoch."""
    notebook = nbformat.read(paths[0], as_version=4)
    notebook.cells = [cell for path in paths for cell in nbformat.read(path, as_version=4).cells]
    for cell in notebook.cells:
        cell.source = re.sub(r"train\.epochs=\d+", "train.epochs=1", cell.source)
    return notebook


@pytest.mark.parametrize("lang", translated_languages())
def test_the_copies_run_in_their_language(
    lang: str, kernel_env: Path, corpus_path: Path, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.setenv("ATTN_MT_DATA", str(corpus_path))
    notebook = execute_notebook(one_notebook([copy_path(path, lang) for path in NOTEBOOKS]), kernel_env)
    outputs = [output for cell in notebook.cells for output in cell.get("outputs", [])]
    printed = "".join(output.get("text", "") for output in outputs)
    html = "".join(output.get("data", {}).get("text/html", "") for output in outputs)
    with in_language(lang):
        assert _("{number} in binary is {bits}").format(number=5, bits="101") in printed
        assert f"<b>{_('source tokens')}</b>" in html and f"<b>{_('encoder-decoder attention')}</b>" in html
    assert "in binary is" not in printed and "<b>source tokens</b>" not in html
    assert sum("image/png" in output.get("data", {}) for output in outputs) >= len(NOTEBOOKS)
