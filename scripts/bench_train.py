"""Benchmark: the book's two runs with attn-mt, side by side with the book's own code.

    python scripts/bench_train.py --model bahdanau --epochs 250 --seeds 0 1 2 \
        --book-ref ../shared/bench/book_reference.py

For each seed it trains `configs/d2l_<model>.yaml` (book mode) in a temporary run directory and
reports the final training loss (the book's formula), target tokens per second (the book's count:
the sum of valid target lengths) and the four book sentences with their BLEU-2. With --book-ref,
the book's code runs with the same epochs and seed right after, and the speed ratio is printed:
the median over seeds and --repeats of each attn-mt run's rate divided by the book run next to it
(on a shared or virtual machine the rate of either moves by 10-20% from one minute to the next,
so only pairs run back to back are compared).
Results are printed as JSON lines and a Markdown table; copy them into docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from attn_mt.config import load_config
from attn_mt.decoding.translator import Translator
from attn_mt.evaluation.scores import BOOK_SENTENCES, book_bleu
from attn_mt.run.run_dir import load_run
from attn_mt.training.launch import train

ROOT = Path(__file__).resolve().parent.parent


def book_config(model: str) -> Path:
    """configs/d2l_<model>.yaml."""
    return ROOT / "configs" / f"d2l_{model}.yaml"


def run_attn_mt(model: str, epochs: int, seed: int, threads: int) -> dict:
    """Train one book config with attn-mt on `threads` torch threads and translate the book's sentences."""
    overrides = [f"train.epochs={epochs}", f"train.seed={seed}", f"train.threads={threads}"]
    cfg = load_config(book_config(model), overrides)
    with tempfile.TemporaryDirectory() as tmp:
        result = train(cfg, Path(tmp) / "run", quiet=True, device="cpu")
        run = load_run(Path(tmp) / "run", "last")
        translator = Translator(run.model, run.src_vocab, run.tgt_vocab, run.config)
        outputs = [t.text for t in translator.translate([en for en, _ in BOOK_SENTENCES], beam_size=1)]
    bleu2 = [round(book_bleu(out, fr), 3) for out, (_, fr) in zip(outputs, BOOK_SENTENCES, strict=True)]
    return {
        "impl": "attn-mt",
        "model": model,
        "seed": seed,
        "epochs": epochs,
        "loss": round(result.final_loss, 4),
        "train_tokens_per_s": round(result.tokens_per_s, 1),
        "train_wall_s": round(result.wall_s, 2),
        "translations": outputs,
        "bleu2": bleu2,
        "mean_bleu2": round(sum(bleu2) / len(bleu2), 3),
    }


def run_book(book_ref: Path, model: str, epochs: int, seed: int, threads: int) -> dict:
    """Run the book's own code (the baseline) and parse its JSON line."""
    cmd = [sys.executable, str(book_ref), model, "--epochs", str(epochs), "--seed", str(seed)]
    if threads:
        cmd += ["--threads", str(threads)]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout.strip().splitlines()[-1]
    record = json.loads(out)
    bleu2 = record["bleu2"]
    return {
        "impl": "book",
        "model": model,
        "seed": seed,
        "epochs": epochs,
        "loss": record["loss"],
        "train_tokens_per_s": record["train_tokens_per_s"],
        "train_wall_s": record["train_wall_s"],
        "translations": record["translations"],
        "bleu2": bleu2,
        "mean_bleu2": round(sum(bleu2) / len(bleu2), 3),
    }


def main() -> None:
    """Parse arguments, run every (implementation, seed), print JSON lines and a table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", choices=["bahdanau", "transformer"], required=True)
    parser.add_argument("--epochs", type=int, help="default: the book's (250 Bahdanau, 200 Transformer)")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument(
        "--threads",
        type=int,
        help="torch threads for both (default: the config's train.threads; 0: every core)",
    )
    parser.add_argument("--book-ref", type=Path, help="path to book_reference.py to run side by side")
    parser.add_argument("--repeats", type=int, default=1, help="back-to-back (attn-mt, book) pairs per seed")
    args = parser.parse_args()
    epochs = args.epochs or (250 if args.model == "bahdanau" else 200)
    threads = load_config(book_config(args.model)).train.threads if args.threads is None else args.threads
    rows, ratios = [], []
    for seed in args.seeds:
        for _ in range(args.repeats):
            rows.append(run_attn_mt(args.model, epochs, seed, threads))
            print(json.dumps(rows[-1]), flush=True)
            if args.book_ref:
                rows.append(run_book(args.book_ref, args.model, epochs, seed, threads))
                print(json.dumps(rows[-1]), flush=True)
                ratios.append(rows[-2]["train_tokens_per_s"] / rows[-1]["train_tokens_per_s"])
    print("\n| impl | seed | epochs | loss | tokens/s | wall s | mean BLEU-2 | translations |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for r in rows:
        print(
            f"| {r['impl']} | {r['seed']} | {r['epochs']} | {r['loss']} | {r['train_tokens_per_s']:.0f} | "
            f"{r['train_wall_s']} | {r['mean_bleu2']} | {' / '.join(r['translations'])} |"
        )
    if ratios:
        listed = ", ".join(f"{r:.2f}" for r in ratios)
        print(f"\nthroughput ratio attn-mt / book: median {statistics.median(ratios):.2f}x (pairs: {listed})")


if __name__ == "__main__":
    main()
