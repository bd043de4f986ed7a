"""Shared fixtures: the real corpus from $ATTN_MT_DATA, a tiny synthetic corpus file, a private cache, and
the small trained runs the end-to-end tests share (trained once per session)."""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

import pytest
from support.helpers import chromium_binary
from support.synthetic import SUBWORD_RUN_SETTINGS, TINY_RUN_SETTINGS, train_tiny, write_corpus

CORPUS_ENV = "ATTN_MT_DATA"

# Line 0..5 of the book's fra.txt (U+202F before ! and ?), then a few more hand-made pairs.
TINY_CORPUS_LINES = [
    "Go.\tVa !",
    "Hi.\tSalut !",
    "Run!\tCours\u202f!",
    "Run!\tCourez\u202f!",
    "Who?\tQui ?",
    "Wow!\tÇa alors\u202f!",
    "I lost.\tJ'ai perdu.",
    "I lost.\tJ’ai perdu.",
    "He's calm.\tIl est calme.",
    "I'm home.\tJe suis chez moi.",
    "I'm home.\tJe suis à la maison.",
    "Go now.\tVa maintenant.",
    "I'm calm.\tJe suis calme.",
    "He's home.\tIl est chez lui.",
    "Go home.\tRentre chez toi.",
    "Go home.\tRentrez chez vous.",
]


NEEDS = {"corpus_path": "corpus", "chromium": "browser"}  # fixture -> the marker of what it needs


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """A test that takes the corpus or Chromium is marked so, so `-m "not corpus and not browser"` leaves
    it out on a machine without them."""
    for item in items:
        for fixture, marker in NEEDS.items():
            if fixture in getattr(item, "fixturenames", ()):
                item.add_marker(marker)


@pytest.fixture(autouse=True, scope="session")
def private_cache(tmp_path_factory) -> Path:
    """Subword models and encodings the tests learn are cached in a temporary folder, never the user's."""
    previous = os.environ.get("XDG_CACHE_HOME")
    folder = tmp_path_factory.mktemp("xdg-cache")
    os.environ["XDG_CACHE_HOME"] = str(folder)
    yield folder
    if previous is None:
        os.environ.pop("XDG_CACHE_HOME", None)
    else:
        os.environ["XDG_CACHE_HOME"] = previous


@pytest.fixture(autouse=True, scope="session")
def one_torch_thread():
    """The tests' models are tiny, so a second intra-op thread only adds overhead: on a busy 2-core machine
    test_subwords' 1,000 random inputs took 28 s to translate on torch's 2 threads and 4 s on 1."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture
def corpus_path() -> Path:
    """The real fra-eng corpus named by $ATTN_MT_DATA; the test FAILS (not skips) when it is missing."""
    return corpus_file()


def corpus_file() -> Path:
    """`corpus_path` for fixtures of a wider scope."""
    value = os.environ.get(CORPUS_ENV)
    if not value:
        pytest.fail(f"${CORPUS_ENV} is not set: point it at fra-eng.zip (or fra.txt) to run the corpus tests")
    path = Path(value).expanduser()
    if not path.is_file():
        pytest.fail(f"${CORPUS_ENV}={value} is not a file")
    if not os.access(path, os.R_OK):
        pytest.fail(f"${CORPUS_ENV}={value} is not readable")
    return path


@pytest.fixture
def chromium() -> str:
    """Headless chromium from PATH; the test FAILS (not skips) without it, naming how to install it."""
    return chromium_binary()


@pytest.fixture
def tiny_corpus(tmp_path: Path) -> Path:
    """A 16-line, 2-column fra.txt-like file in tmp_path (several French references per English sentence)."""
    path = tmp_path / "tiny.txt"
    path.write_text("\n".join(TINY_CORPUS_LINES) + "\n", encoding="utf-8")
    return path


class CliResult(NamedTuple):
    """What one `attn-mt` command did: its exit code and what it printed."""

    returncode: int
    stdout: str
    stderr: str


@pytest.fixture(autouse=True)
def english_unless_asked(monkeypatch) -> None:
    """Every test reads attn-mt in English, whatever the machine's locale, unless it asks for another."""
    monkeypatch.setenv("ATTN_MT_LANG", "en")


@pytest.fixture
def run_cli(monkeypatch, capsys) -> Callable[..., CliResult]:
    """Run `attn-mt ARGS` in this process (no interpreter start-up per command)."""
    from attn_mt.cli import main

    def run(*args: str) -> CliResult:
        monkeypatch.setattr(sys, "argv", ["attn-mt", *args])
        capsys.readouterr()
        code = 0
        try:
            main()
        except SystemExit as exc:
            code = int(exc.code or 0)
        out = capsys.readouterr()
        return CliResult(code, out.out, out.err)

    return run


def snapshot(folder: Path) -> dict[str, tuple[int, int]]:
    """Every file under `folder` with its size and modification time."""
    return {
        str(p.relative_to(folder)): (p.stat().st_size, p.stat().st_mtime_ns)
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


@dataclass(frozen=True)
class TinyRuns:
    """A GRU + Bahdanau and a Transformer run of configs/tiny.yaml, and the corpus they were trained on."""

    corpus: Path
    gru_bahdanau: Path
    transformer: Path

    def copy_to(self, folder: Path) -> dict[str, Path]:
        """Copies of both runs in `folder` (for tests that write into a run), by model type."""
        return {
            name: Path(shutil.copytree(getattr(self, name), folder / name))
            for name in ("gru_bahdanau", "transformer")
        }


def assert_unchanged(folder: Path, before: dict[str, tuple[int, int]]) -> None:
    """Fail if a file under `folder` was added, changed or deleted since `before` (its snapshot)."""
    after = snapshot(folder)
    changed = sorted(k for k in before.keys() | after.keys() if before.get(k) != after.get(k))
    assert not changed, f"a test changed the shared runs in {folder}: {changed[:5]}; copy a run to change it"


@pytest.fixture(scope="session")
def tiny_runs(tmp_path_factory: pytest.TempPathFactory):
    """configs/tiny.yaml's GRU + Bahdanau and Transformer runs on a 200-pair reverse corpus, trained once per
    session and shared read-only by the report, serving and shipping tests."""
    root = tmp_path_factory.mktemp("tiny_runs")
    corpus = write_corpus(root / "reverse.txt", n=200)
    runs = TinyRuns(
        corpus,
        *(
            train_tiny(root / name, corpus, [*TINY_RUN_SETTINGS, f"model.type={name}"])
            for name in ("gru_bahdanau", "transformer")
        ),
    )
    before = snapshot(root)
    yield runs
    assert_unchanged(root, before)


@pytest.fixture(scope="session")
def subword_run(tmp_path_factory: pytest.TempPathFactory):
    """tiny.yaml's Transformer with one sentencepiece vocabulary on a 300-pair cased reverse corpus, its last
    3 validations kept: trained once per session and shared read-only by the shipping and subword tests."""
    root = tmp_path_factory.mktemp("subword_run")
    run_dir = train_tiny(root / "run", write_corpus(root / "reverse.txt", n=300), SUBWORD_RUN_SETTINGS)
    before = snapshot(root)
    yield run_dir
    assert_unchanged(root, before)


@pytest.fixture(scope="session")
def subword_folder(subword_run: Path, tmp_path_factory: pytest.TempPathFactory):
    """`attn-mt export` of the shared subword run as a CTranslate2 folder (float32), shared read-only."""
    from attn_mt.shipping.ctranslate2_export import export_ctranslate2

    out = export_ctranslate2(subword_run, tmp_path_factory.mktemp("subword_ct2") / "ct2")
    before = snapshot(out)
    yield out
    assert_unchanged(out, before)
