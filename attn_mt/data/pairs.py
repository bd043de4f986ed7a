"""The corpus as the config reads it: its files, its pairs in the configured direction, both sides prepared.

`data.path` (or --data) is a tab-separated file or zip, or a list of two line-aligned plain-text
files in the order of `data.languages`. The pairs are turned to `data.direction` before anything
else, so "source" always means the side the model reads.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from attn_mt.data.corpus import read_aligned, read_pairs, resolve_corpus
from attn_mt.data.preprocess import clean_text
from attn_mt.data.subword import prepare_text

LANGUAGE_NAMES = {"en": "English", "fr": "French", "de": "German", "es": "Spanish", "it": "Italian"}


def language_name(code: str) -> str:
    """A language's English name for messages, else its code."""
    return LANGUAGE_NAMES.get(code, code)


def corpus_files(cfg: Any, path: str | list[str] | None) -> list[Path]:
    """The corpus file (or the two line-aligned files) named by `path`, else cfg.path, $ATTN_MT_DATA, ..."""
    given = path if path is not None else cfg.path
    if isinstance(given, list):
        return [resolve_corpus(p) for p in given]
    return [resolve_corpus(given)]


def read_corpus_files(cfg: Any, files: Sequence[Path]) -> tuple[Any, list[tuple[str, str]]]:
    """(where the corpus is, its pairs as (source, target) in cfg.direction) from `corpus_files`."""
    first, second = cfg.languages.split("-")
    if len(files) == 2:
        pairs, where = read_aligned(*files), [str(f) for f in files]
    else:
        pairs, where = read_pairs(files[0], (language_name(first), language_name(second))), str(files[0])
    if cfg.direction != cfg.languages:
        pairs = [(b, a) for a, b in pairs]
    return where, pairs


def read_corpus(cfg: Any, path: str | list[str] | None) -> tuple[Any, list[tuple[str, str]]]:
    """(where the corpus is, its pairs as (source, target) in cfg.direction), `path` else cfg.path."""
    return read_corpus_files(cfg, corpus_files(cfg, path))


def normalize_pairs(
    pairs: Sequence[tuple[str, str]], normalize_apostrophes: bool
) -> tuple[list[str], list[str]]:
    """Preprocess both sides; each result is its tokens joined by single spaces (`tokenize` undoes it)."""
    src = [clean_text(e, normalize_apostrophes) for e, _ in pairs]
    tgt = [clean_text(f, normalize_apostrophes) for _, f in pairs]
    return src, tgt


def prepare_pairs(pairs: Sequence[tuple[str, str]], cfg: Any) -> tuple[list[str], list[str]]:
    """Both sides as the configured tokenizer reads them: the book's preprocessing, or raw cased text."""
    if cfg.tokenizer == "book":
        return normalize_pairs(pairs, cfg.normalize_apostrophes)
    return (
        [prepare_text(a, cfg.normalize_apostrophes) for a, _ in pairs],
        [prepare_text(b, cfg.normalize_apostrophes) for _, b in pairs],
    )


def text_fingerprint(src: Sequence[str], tgt: Sequence[str]) -> str:
    """SHA-1 of the training pairs: equal fingerprints mean the same training text."""
    digest = hashlib.sha1()
    for a, b in zip(src, tgt, strict=True):
        digest.update(f"{a}\t{b}\n".encode())
    return digest.hexdigest()
