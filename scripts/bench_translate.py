"""Benchmark: batched translation speed against the book's one-sentence-at-a-time predict_seq2seq.

    python scripts/bench_translate.py --model transformer --sentences 2000 \
        --book-ref ../shared/bench/book_reference.py

Writes the first N English sentences of the corpus (preprocessed, one per line) to a file, trains
the book-size model of `configs/d2l_<model>.yaml` briefly with attn-mt and times greedy and beam-4
translation of the file, batched. With --book-ref the book's code translates the same file one
sentence at a time (it trains its own model of the same size first; only translation is timed).
Prints JSON lines and the ratios; copy them into docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from attn_mt.config import load_config
from attn_mt.data.corpus import read_pairs, resolve_corpus
from attn_mt.data.preprocess import clean_text
from attn_mt.decoding.translator import Translator
from attn_mt.run.run_dir import load_run
from attn_mt.training.launch import train

ROOT = Path(__file__).resolve().parent.parent


def time_translation(translator: Translator, sentences: list[str], beam: int, repeats: int) -> float:
    """Best-of-`repeats` sentences per second."""
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        translator.translate(sentences, beam_size=beam)
        best = min(best, time.perf_counter() - start)
    return len(sentences) / best


def main() -> None:
    """Train briefly, time greedy and beam search, optionally run the book's predictor."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", choices=["bahdanau", "transformer"], required=True)
    parser.add_argument("--sentences", type=int, default=2000)
    parser.add_argument("--epochs", type=int, default=20, help="training epochs for both models")
    parser.add_argument("--batch-size", type=int, default=256, help="sentences per decoding batch")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--book-ref", type=Path)
    args = parser.parse_args()

    pairs = read_pairs(resolve_corpus(None))
    sentences = [clean_text(en) for en, _ in pairs[: args.sentences]]
    with tempfile.TemporaryDirectory() as tmp:
        text_file = Path(tmp) / "sentences.txt"
        text_file.write_text("".join(s + "\n" for s in sentences), encoding="utf-8")
        cfg = load_config(
            ROOT / "configs" / f"d2l_{args.model}.yaml",
            [f"train.epochs={args.epochs}", f"decode.batch_size={args.batch_size}"],
        )
        train(cfg, Path(tmp) / "run", quiet=True, device="cpu")
        run = load_run(Path(tmp) / "run", "last")
        translator = Translator(run.model, run.src_vocab, run.tgt_vocab, run.config)
        greedy = time_translation(translator, sentences, 1, args.repeats)
        beam4 = time_translation(translator, sentences, 4, args.repeats)
        record = {
            "impl": "attn-mt",
            "model": args.model,
            "sentences": len(sentences),
            "greedy_sentences_per_s": round(greedy, 1),
            "beam4_sentences_per_s": round(beam4, 1),
            "beam4_cost_vs_greedy": round(greedy / beam4, 2),
        }
        print(json.dumps(record), flush=True)
        if args.book_ref:
            cmd = [
                sys.executable,
                str(args.book_ref),
                args.model,
                "--epochs",
                str(args.epochs),
                "--translate-file",
                str(text_file),
            ]
            book = json.loads(
                subprocess.run(cmd, capture_output=True, text=True, check=True).stdout.splitlines()[-1]
            )
            print(
                json.dumps(
                    {
                        "impl": "book",
                        "model": args.model,
                        "sentences": book["translated"],
                        "sentences_per_s": book["sentences_per_s"],
                    }
                ),
                flush=True,
            )
            print(
                f"greedy speed-up over the book: {greedy / book['sentences_per_s']:.1f}x; "
                f"beam 4 costs {greedy / beam4:.2f}x greedy"
            )


if __name__ == "__main__":
    main()
