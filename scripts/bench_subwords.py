"""Time the sentencepiece pipeline on the whole corpus: learning + encoding, and a cached reload.

    python scripts/bench_subwords.py --data fra-eng.zip [--config configs/transformer.yaml] [--repeats 3]

For each subword type (the config's, or every type with --all-types) it prints, per repeat (each
repeat with an empty cache in a temporary folder):
  learn   seconds sentencepiece spends learning the model(s) from the training split;
  encode  seconds encoding every training sentence of both sides with the learned model(s);
  load    seconds of the whole `load_data` with an empty cache (read, prepare, split, learn, encode, report);
  cached  seconds of `load_data` again: models and encoded training split come from the cache;
  run     seconds of `load_data` given a run's models (what eval and --resume do).
Results go in docs/subwords.md.
"""

from __future__ import annotations

import argparse
import os
import platform
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import torch

from attn_mt.config import SUBWORD_TYPES, load_config
from attn_mt.data.dataset import load_data, prepare_pairs, read_corpus
from attn_mt.data.prepare import learn_vocabs
from attn_mt.data.splits import grouped_split

ROOT = Path(__file__).resolve().parent.parent


def time_one(cfg, data_path: str) -> dict[str, float]:
    """Learn, encode, full load and reload times (seconds) for one data config."""
    _, pairs = read_corpus(cfg, data_path)
    src, tgt = prepare_pairs(pairs, cfg)
    split = grouped_split(src, tgt, cfg.valid_size, cfg.test_size, cfg.split_seed)
    train_src, train_tgt = [src[i] for i in split.train], [tgt[i] for i in split.train]
    start = time.perf_counter()
    src_vocab, tgt_vocab = learn_vocabs(cfg, train_src, train_tgt)
    learned = time.perf_counter()
    src_vocab.encode_texts(train_src)
    tgt_vocab.encode_texts(train_tgt)
    encoded = time.perf_counter()
    with tempfile.TemporaryDirectory() as cache:
        os.environ["XDG_CACHE_HOME"] = cache
        data = load_data(cfg, data_path)
        loaded = time.perf_counter()
        load_data(cfg, data_path)
        cached = time.perf_counter()
        load_data(cfg, data_path, (data.src_vocab, data.tgt_vocab))
        reloaded = time.perf_counter()
    return {
        "learn": learned - start,
        "encode": encoded - learned,
        "load": loaded - encoded,
        "cached": cached - loaded,
        "run": reloaded - cached,
    }


def main() -> None:
    """Parse the options and print one line per subword type and repeat."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--data", required=True, help="the corpus (fra-eng.zip)")
    parser.add_argument("--config", default=str(ROOT / "configs" / "transformer.yaml"))
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--all-types", action="store_true", help="time unigram and bpe, not just the config")
    args = parser.parse_args()
    base = load_config(args.config).data
    print(
        f"{platform.processor() or platform.machine()}, {torch.get_num_threads()} threads, "
        f"python {platform.python_version()}, config {args.config}"
    )
    for subword_type in SUBWORD_TYPES if args.all_types else (base.subword_type,):
        cfg = replace(base, subword_type=subword_type)
        for repeat in range(args.repeats):
            times = time_one(cfg, args.data)
            cells = "  ".join(f"{k} {v:6.2f} s" for k, v in times.items())
            print(f"{subword_type:8} {cfg.vocab_size} shared={cfg.shared_vocab} repeat {repeat + 1}: {cells}")


if __name__ == "__main__":
    main()
