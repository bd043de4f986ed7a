"""Shared fixtures: the real corpus from $ATTN_MT_DATA, a tiny synthetic corpus file, a private cache."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

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


@pytest.fixture
def corpus_path() -> Path:
    """The real fra-eng corpus named by $ATTN_MT_DATA; the test FAILS (not skips) when it is missing."""
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
def tiny_corpus(tmp_path: Path) -> Path:
    """A 16-line, 2-column fra.txt-like file in tmp_path (several French references per English sentence)."""
    path = tmp_path / "tiny.txt"
    path.write_text("\n".join(TINY_CORPUS_LINES) + "\n", encoding="utf-8")
    return path
