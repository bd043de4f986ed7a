"""Benchmark: which recipe buys the most BLEU for the same minutes (the arms of issue 52), back to back.

    python scripts/bench_recipe.py cpu --out docs/bench/recipe-cpu                 # ~4 h on 2 idle cores
    python scripts/bench_recipe.py gpu --out docs/bench/recipe-gpu --device cuda   # ~20 min on one GPU

`cpu` trains configs/transformer.yaml's arms for 15 minutes each, with two seeds: the baseline (the
config as shipped), a 3-1 and a 4-1 encoder-decoder (about the baseline's FLOPs per token, the
table's estimate), dropout 0.05 and a peak learning rate of 2e-3. Each run's best checkpoint is
scored on the valid and the test split with the config's own decoding (beam 4, alpha 1.0). An arm
is kept when its mean valid BLEU beats the baseline's by more than the seeds' spread (the larger
of the two arms' max - min); the best kept arm (else the baseline) then trains for 60 minutes, and
`attn-mt tune`'s best pair on the valid split is applied to its test score, reported apart.

`gpu` trains configs/transformer-gpu.yaml as shipped beside a longer recipe (9 minutes, dropout
0.3, 150 epochs, twice the token budget and warmup), one seed each, on the same device.

Every arm trains on the same split (the config's split_seed) and is scored with the same sacreBLEU
signature. Writes `results.json` and `table.md` (the tables for docs/benchmarks.md) under --out and
the runs under OUT/runs/. `--minutes`, `--final-minutes`, `--arms`, `--seeds` and `--set` shrink a
plan (tests/test_bench_recipe.py runs it in seconds on configs/tiny.yaml).

The plan outlasts most sittings, so each scored run is appended to OUT/done.jsonl as it finishes, and
running the same command again with the same --out trains only the runs not yet there (a run with the
same arm, seed, overrides, budget and config); an interrupted run starts over.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from attn_mt.commands.evaluate import run_eval
from attn_mt.commands.tune import DEFAULT_BEAMS, DEFAULT_LENGTH_PENALTIES, run_tune
from attn_mt.config import Config, load_config
from attn_mt.machine import cpu_name
from attn_mt.run.run_dir import RunPaths, load_vocabs
from attn_mt.training.launch import train

ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Plan:
    """A config, its arms (name -> --set overrides on top of it), the budget and seeds of each arm."""

    config: Path
    arms: dict[str, list[str]]
    minutes: float | None  # each arm's train.time_limit_minutes (None: the config's own)
    seeds: tuple[int, ...]
    final_minutes: float  # the best arm's longer run (0: none)
    notes: dict[str, str] = field(default_factory=dict)


PLANS = {
    "cpu": Plan(
        ROOT / "configs" / "transformer.yaml",
        {
            "baseline": [],
            "3-1 layers": ["model.encoder_layers=3", "model.decoder_layers=1"],
            "4-1 layers": ["model.encoder_layers=4", "model.decoder_layers=1"],
            "dropout 0.05": ["model.dropout=0.05"],
            "peak lr 2e-3": ["train.lr=0.002"],
        },
        minutes=15.0,
        seeds=(0, 1),
        final_minutes=60.0,
    ),
    "gpu": Plan(
        ROOT / "configs" / "transformer-gpu.yaml",
        {
            "baseline": [],
            "long": [
                "train.time_limit_minutes=9",
                "model.dropout=0.3",
                "train.epochs=150",
                "data.max_tokens=32768",
                "train.warmup_steps=800",
            ],
        },
        minutes=None,
        seeds=(0,),
        final_minutes=0.0,
        notes={"long": "unmeasured candidate: 8-10 minutes, dropout 0.3, more epochs, a larger token budget"},
    ),
}


def flops_per_token(cfg: Config, vocab_size: int) -> float:
    """Forward FLOPs per target token (multiply-add = 2) of the Transformer's matrix products, for a source as
    long as its target: encoder blocks 4H^2 + 2HF, decoder blocks 8H^2 + 2HF (self, cross, FFN), output HV;
    the attention scores, which grow with the length, are left out."""
    H, F = cfg.model.num_hiddens, cfg.model.ffn_num_hiddens
    encoder, decoder = cfg.model.depths
    return 2.0 * (encoder * (4 * H * H + 2 * H * F) + decoder * (8 * H * H + 2 * H * F) + H * vocab_size)


def train_and_score(
    plan: Plan, name: str, overrides: list[str], seed: int, minutes: float | None, args: argparse.Namespace
) -> dict[str, Any]:
    """Train one arm with one seed; score its best checkpoint on valid and test with the config's decoding."""
    budget = [] if minutes is None else [f"train.time_limit_minutes={minutes}"]
    sets = [*budget, f"train.seed={seed}", *overrides, *args.overrides]
    cfg = load_config(plan.config, sets)
    run_dir = args.out / "runs" / f"{name.replace(' ', '_')}-{minutes or 'own'}min-seed{seed}"
    print(f"== {name}, seed {seed}: {' '.join(sets) or '(as shipped)'} -> {run_dir}", flush=True)
    result = train(cfg, run_dir, data_path=args.data, overwrite=True, quiet=True, device=args.device)
    valid = run_eval(run_dir, "valid", None, 0, None, "best", args.data, args.device)
    test = run_eval(run_dir, "test", None, 0, None, "best", args.data, args.device)
    vocab = len(load_vocabs(RunPaths(run_dir), cfg)[1])
    summary = json.loads(RunPaths(run_dir).summary.read_text(encoding="utf-8"))
    return {
        "arm": name,
        "seed": seed,
        "overrides": sets,
        "run_dir": str(run_dir),
        "steps": result.step,
        "epochs": result.epoch,
        "minutes": round(result.wall_s / 60, 2),
        "parameters": summary.get("parameters"),
        "mflops_per_token": round(flops_per_token(cfg, vocab) / 1e6, 2),
        "valid_bleu": round(valid["bleu"], 2),
        "test_bleu": round(test["bleu"], 2),
        "beam_size": test["beam_size"],
        "length_penalty": test["length_penalty"],
        "best_step": test["step"],
        "bleu_signature": test["bleu_signature"],
    }


def run_key(record: dict[str, Any]) -> str:
    """What makes two scored runs the same: the config, arm, seed, budget and every override."""
    return json.dumps(
        [record["config"], record["arm"], record["seed"], record["budget_minutes"], record["overrides"]]
    )


class Done:
    """OUT/done.jsonl: the runs scored so far, one JSON line each, kept as each finishes."""

    def __init__(self, out: Path):
        self.path = out / "done.jsonl"
        lines = self.path.read_text(encoding="utf-8").splitlines() if self.path.is_file() else []
        records = [json.loads(line) for line in lines if line.strip()]
        self.records = {run_key(r): r for r in records if Path(r["run_dir"]).is_dir()}

    def run(
        self,
        plan: Plan,
        name: str,
        overrides: list[str],
        seed: int,
        minutes: float | None,
        args: argparse.Namespace,
    ) -> dict[str, Any]:
        """The scored run of this arm and seed: from an earlier sitting, or trained and scored now."""
        budget = [] if minutes is None else [f"train.time_limit_minutes={minutes}"]
        wanted = {
            "config": str(plan.config),
            "arm": name,
            "seed": seed,
            "budget_minutes": minutes,
            "overrides": [*budget, f"train.seed={seed}", *overrides, *args.overrides],
        }
        found = self.records.get(run_key(wanted))
        if found is not None:
            print(f"== {name}, seed {seed}: scored in an earlier sitting ({found['run_dir']})", flush=True)
            return found
        record = {**wanted, **train_and_score(plan, name, overrides, seed, minutes, args)}
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self.path.open("a", encoding="utf-8") as log:
            log.write(json.dumps(record) + "\n")
        self.records[run_key(record)] = record
        return record


def arm_summaries(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per arm: mean and spread (max - min) of valid and test BLEU over its seeds, and whether it is kept."""
    arms: dict[str, list[dict[str, Any]]] = {}
    for run in runs:
        arms.setdefault(run["arm"], []).append(run)

    def stats(rows: list[dict[str, Any]], key: str) -> tuple[float, float]:
        values = [r[key] for r in rows]
        return round(statistics.fmean(values), 2), round(max(values) - min(values), 2)

    base_valid, base_spread = stats(arms["baseline"], "valid_bleu")
    rows = []
    for name, members in arms.items():
        valid, valid_spread = stats(members, "valid_bleu")
        test, test_spread = stats(members, "test_bleu")
        gain = round(valid - base_valid, 2)
        rows.append(
            {
                "arm": name,
                "seeds": len(members),
                "valid_bleu": valid,
                "valid_spread": valid_spread,
                "test_bleu": test,
                "test_spread": test_spread,
                "valid_gain": gain,
                "kept": name != "baseline" and gain > max(valid_spread, base_spread),
            }
        )
    return rows


def best_arm(summaries: list[dict[str, Any]]) -> str:
    """The kept arm with the highest mean valid BLEU, else the baseline."""
    kept = [s for s in summaries if s["kept"]]
    return max(kept, key=lambda s: s["valid_bleu"])["arm"] if kept else "baseline"


def final_run(plan: Plan, arm: str, args: argparse.Namespace, done: Done) -> dict[str, Any]:
    """The chosen arm for the plan's longer budget, then its test score with the pair tune picks on valid."""
    final = dict(done.run(plan, arm, plan.arms[arm], plan.seeds[0], args.final_minutes, args))
    started = time.perf_counter()
    tuned = run_tune(
        Path(final["run_dir"]), args.beams, args.length_penalties, False, "best", args.data, args.device
    )
    best = tuned["best"]
    test = run_eval(
        Path(final["run_dir"]),
        "test",
        best["beam_size"],
        0,
        None,
        "best",
        args.data,
        args.device,
        length_penalty=best["length_penalty"],
    )
    final["tuned"] = {
        "beam_size": best["beam_size"],
        "length_penalty": best["length_penalty"],
        "valid_bleu": best["bleu"],
        "test_bleu": round(test["bleu"], 2),
        "tune_minutes": round((time.perf_counter() - started) / 60, 2),
    }
    return final


def markdown(
    plan_name: str, runs: list[dict[str, Any]], summaries: list[dict[str, Any]], final: dict | None
) -> str:
    """The tables for docs/benchmarks.md."""
    lines = [
        f"Plan `{plan_name}`, {cpu_name() or platform.processor()}, {time.strftime('%Y-%m-%d')}; "
        f"`{runs[0]['bleu_signature']}`",
        "",
        "| arm | seed | steps | epochs | minutes | est. MFLOP/token | valid BLEU | test BLEU (beam "
        f"{runs[0]['beam_size']}) |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in runs:
        cells = [r["arm"], r["seed"], r["steps"], r["epochs"], r["minutes"], r["mflops_per_token"]]
        lines.append("| " + " | ".join(str(c) for c in [*cells, r["valid_bleu"], r["test_bleu"]]) + " |")
    lines += [
        "",
        "| arm | seeds | valid BLEU (mean, spread) | test BLEU (mean, spread) | valid gain | kept |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for s in summaries:
        lines.append(
            f"| {s['arm']} | {s['seeds']} | {s['valid_bleu']} ({s['valid_spread']}) | {s['test_bleu']} "
            f"({s['test_spread']}) | {s['valid_gain']:+} | {'yes' if s['kept'] else 'no'} |"
        )
    if final is not None:
        tuned = final["tuned"]
        lines += [
            "",
            f"Best arm `{final['arm']}` for {final['minutes']} minutes: {final['steps']} steps, test BLEU "
            f"{final['test_bleu']} (beam {final['beam_size']}, alpha {final['length_penalty']}); with the "
            f"pair tune chose on valid (beam {tuned['beam_size']}, alpha {tuned['length_penalty']}, "
            f"{tuned['tune_minutes']} minutes of tuning, outside the training budget): {tuned['test_bleu']}.",
        ]
    return "\n".join(lines) + "\n"


def parse_args(argv: list[str] | None) -> tuple[Plan, argparse.Namespace]:
    """The plan named on the command line, shrunk or changed by the options."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("plan", choices=sorted(PLANS))
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--config", type=Path, help="another base config (default: the plan's)")
    parser.add_argument("--minutes", type=float, help="each arm's training minutes (default: the plan's)")
    parser.add_argument(
        "--final-minutes", type=float, help="the best arm's minutes (default: the plan's; 0: none)"
    )
    parser.add_argument("--arms", help="a comma-separated subset of the plan's arms (baseline is always run)")
    parser.add_argument("--seeds", help="comma-separated seeds (default: the plan's)")
    parser.add_argument(
        "--set", dest="overrides", action="append", default=[], help="an override for every arm"
    )
    parser.add_argument("--data", default=None)
    parser.add_argument("--device", default="auto")
    parser.add_argument("--beams", default=DEFAULT_BEAMS, help="tune's beams for the final run")
    parser.add_argument("--length-penalties", default=DEFAULT_LENGTH_PENALTIES, help="tune's alphas")
    args = parser.parse_args(argv)
    plan = PLANS[args.plan]
    arms = plan.arms
    if args.arms:
        wanted = ["baseline", *(a.strip() for a in args.arms.split(",") if a.strip() != "baseline")]
        unknown = [a for a in wanted if a not in arms]
        if unknown:
            parser.error(f"--arms: {', '.join(unknown)} not in plan {args.plan} ({', '.join(arms)})")
        arms = {a: arms[a] for a in wanted}
    seeds = tuple(int(s) for s in args.seeds.split(",")) if args.seeds else plan.seeds
    minutes = plan.minutes if args.minutes is None else args.minutes
    final_minutes = plan.final_minutes if args.final_minutes is None else args.final_minutes
    plan = Plan(args.config or plan.config, arms, minutes, seeds, final_minutes, plan.notes)
    args.final_minutes = final_minutes
    return plan, args


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Run every arm with every seed, summarise, run the best arm longer, write results.json and table.md."""
    plan, args = parse_args(argv)
    done = Done(args.out)
    runs = [
        done.run(plan, name, overrides, seed, plan.minutes, args)
        for name, overrides in plan.arms.items()
        for seed in plan.seeds
    ]
    summaries = arm_summaries(runs)
    final = final_run(plan, best_arm(summaries), args, done) if plan.final_minutes else None
    results = {
        "plan": args.plan,
        "config": str(plan.config),
        "machine": cpu_name() or platform.processor(),
        "device": args.device,
        "minutes": plan.minutes,
        "notes": plan.notes,
        "runs": runs,
        "arms": summaries,
        "final": final,
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "results.json").write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    table = markdown(args.plan, runs, summaries, final)
    (args.out / "table.md").write_text(table, encoding="utf-8")
    print(table)
    return results


if __name__ == "__main__":
    main()
