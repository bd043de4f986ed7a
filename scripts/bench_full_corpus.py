"""Benchmark: what the full corpus buys per minute of training on this machine.

    python scripts/bench_full_corpus.py configs/transformer.yaml --minutes 60 --out docs/bench/transformer

Trains CONFIG (split mode) for a wall-clock budget. At every validation it also translates the
test split greedily and records the elapsed training time, the test-split sacreBLEU (every
reference) and the peak resident memory so far. At the end the best checkpoint is scored with the
config's beam search through `attn-mt eval`. Writes `results.json` and `bleu_vs_minutes.png`
under --out (the run directory itself goes under runs/); copy the table into docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import json
import resource
import time
from pathlib import Path
from typing import Any

from attn_mt.commands.evaluate import run_eval
from attn_mt.config import load_config
from attn_mt.decoding.translator import Translator
from attn_mt.evaluation.scores import corpus_scores
from attn_mt.training.launch import train
from attn_mt.training.trainer import Trainer

FINAL_KEYS = ("bleu", "chrf", "ter", "bleu_signature", "beam_size", "length_penalty", "step")


def peak_rss_mb() -> float:
    """Peak resident set size of this process so far, in MB (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def main() -> None:
    """Train with a test-BLEU probe at every validation, then evaluate the best checkpoint."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("config", type=Path)
    parser.add_argument("--minutes", type=float, default=60.0)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--run-dir", type=Path, help="where the run goes (default runs/bench-<config name>)")
    parser.add_argument("--data", default=None)
    parser.add_argument("--set", dest="overrides", action="append", default=[])
    args = parser.parse_args()

    cfg = load_config(args.config, [f"train.time_limit_minutes={args.minutes}", *args.overrides])
    points: list[dict[str, Any]] = []

    def probe(self: Trainer) -> None:
        """After each validation: greedy test-split BLEU of the current weights (the trainer's own data)."""
        started = time.perf_counter()
        sources, refs = [ex.src for ex in self.data.test], [ex.refs for ex in self.data.test]
        translator = Translator(self.model, self.data.src_vocab, self.data.tgt_vocab, self.cfg, self.device)
        hyps = [t.text for t in translator.translate(sources, beam_size=1)]
        self.model.train()
        scores = corpus_scores(hyps, refs)
        last = json.loads(self.paths.metrics.read_text().splitlines()[-1])
        points.append(
            {
                "step": self.progress.step,
                "minutes": round(self.progress.elapsed_s / 60, 2),
                "valid_bleu": last.get("valid_bleu"),
                "test_bleu_greedy": round(scores["bleu"], 2),
                "test_chrf_greedy": round(scores["chrf"], 2),
                "peak_rss_mb": round(peak_rss_mb(), 1),
                "probe_s": round(time.perf_counter() - started, 1),
            }
        )
        print(json.dumps(points[-1]), flush=True)

    run_dir = args.run_dir or Path("runs") / f"bench-{args.config.stem}"
    result = train(cfg, run_dir, data_path=args.data, overwrite=True, quiet=True, on_validation=probe)
    final = run_eval(run_dir, "test", None, 0, None, "best", args.data, "auto")
    summary = {
        "config": str(args.config),
        "overrides": args.overrides,
        "minutes_budget": args.minutes,
        "steps": result.step,
        "epochs": result.epoch,
        "stopped_because": result.stopped_because,
        "train_tokens_per_s": round(result.tokens_per_s, 1),
        "peak_rss_mb": round(peak_rss_mb(), 1),
        "final_test": {k: final[k] for k in FINAL_KEYS},
        "points": points,
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "results.json").write_text(json.dumps(summary, indent=2), encoding="utf-8")
    plot(points, args.out / "bleu_vs_minutes.png", args.config.stem)
    print("\n| minutes | step | valid BLEU | test BLEU (greedy) | peak RSS MB |")
    print("| --- | --- | --- | --- | --- |")
    for p in points:
        cells = [p["minutes"], p["step"], p["valid_bleu"], p["test_bleu_greedy"], p["peak_rss_mb"]]
        print("| " + " | ".join(str(c) for c in cells) + " |")
    print(
        f"\nbest checkpoint (step {final['step']}), test split, beam {final['beam_size']}, length penalty "
        f"{final['length_penalty']}: BLEU {final['bleu']:.2f}, "
        f"chrF {final['chrf']:.2f}, TER {final['ter']:.2f}"
    )


def plot(points: list[dict[str, Any]], path: Path, label: str) -> None:
    """Test BLEU against training minutes."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(5, 3.2), dpi=100)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    ax.plot([p["minutes"] for p in points], [p["test_bleu_greedy"] for p in points], marker="o", label=label)
    ax.set_xlabel("training minutes (2 CPU cores)")
    ax.set_ylabel("test BLEU (greedy, multi-ref)")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path)


if __name__ == "__main__":
    main()
