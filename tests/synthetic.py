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


def train_reverse_runs(root: Path, overrides: list[str]) -> tuple[Path, dict[str, Path]]:
    """Train a GRU + Bahdanau and a Transformer run of configs/tiny.yaml (+ `overrides`) on a 200-pair
    reverse corpus under `root`; returns the corpus and the run directories by model type."""
    import torch

    from attn_mt.config import load_config
    from attn_mt.training.launch import train

    tiny = Path(__file__).resolve().parent.parent / "configs" / "tiny.yaml"
    corpus = write_corpus(root / "reverse.txt", n=200)
    dirs = {name: root / name for name in ("gru_bahdanau", "transformer")}
    threads = torch.get_num_threads()
    try:
        for name, run_dir in dirs.items():
            train(load_config(tiny, [*overrides, f"model.type={name}"]), run_dir, data_path=str(corpus),
                  quiet=True, device="cpu")
    finally:
        torch.set_num_threads(threads)  # training set it for the whole process; leave other tests as found
    return corpus, dirs
