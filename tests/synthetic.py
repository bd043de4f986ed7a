"""A learnable synthetic corpus for end-to-end tests: French is the English words reversed and renamed."""

from __future__ import annotations

import random
from pathlib import Path

WORDS = ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel"]
MOTS = ["un", "deux", "trois", "quatre", "cinq", "six", "sept", "huit"]


def reverse_pairs(n: int, seed: int = 0, min_len: int = 2, max_len: int = 5) -> list[tuple[str, str]]:
    """`n` distinct pairs: an English word sequence and its reversed French rendering, with a final period."""
    rng = random.Random(seed)
    seen: set[str] = set()
    pairs = []
    while len(pairs) < n:
        idx = [rng.randrange(len(WORDS)) for _ in range(rng.randint(min_len, max_len))]
        english = " ".join(WORDS[i] for i in idx).capitalize() + "."
        if english in seen:
            continue
        seen.add(english)
        pairs.append((english, " ".join(MOTS[i] for i in reversed(idx)).capitalize() + "."))
    return pairs


def write_corpus(path: Path, n: int = 300, seed: int = 0) -> Path:
    """Write a 2-column fra.txt-like file of the reverse task."""
    path.write_text("".join(f"{en}\t{fr}\n" for en, fr in reverse_pairs(n, seed)), encoding="utf-8")
    return path
