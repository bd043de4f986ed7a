"""Benchmark: which recipe buys the most BLEU for the same minutes (the arms of issue 52), back to back.

    python scripts/bench_recipe.py cpu --out docs/bench/recipe-cpu                 # 5-6 h on 2 idle cores
    python scripts/bench_recipe.py gpu --out docs/bench/recipe-gpu --device cuda   # ~20 min on one GPU

`cpu` trains configs/transformer.yaml's arms for 15 minutes each, with two seeds: the baseline (the
config as shipped), a 3-1 and a 4-1 encoder-decoder (about the baseline's FLOPs per token, the
table's estimate), dropout 0.05 and a peak learning rate of 2e-3. Each run's best checkpoint is
scored on the valid and the test split with the config's own decoding (beam 4, alpha 1.0). An arm
is kept when its mean valid BLEU beats the baseline's by more than the seeds' spread (the larger
of the two arms' max - min); the best kept arm (else the baseline) then trains for 60 minutes, and
`attn-mt tune`'s best pair on the valid split is applied to its test score, reported apart. When that arm
is not the baseline, the baseline then trains for the same 60 minutes and seed on the same kind of CPU:
a ranking after 15 minutes need not hold after an hour (docs/subwords.md saw one that did not). When the
arm's hour does not beat the baseline's on valid BLEU, the next kept arm gets its hour, and so on.

`gpu` trains configs/transformer-gpu.yaml as shipped beside a longer recipe (9 minutes, dropout
0.3, 150 epochs, twice the token budget and warmup), one seed each, on the same device.

Every arm trains on the same split (the config's split_seed) and is scored with the same sacreBLEU
signature. Writes `results.json` and `table.md` (the tables for docs/benchmarks.md) under --out and
the runs under OUT/runs/. `--minutes`, `--final-minutes`, `--arms`, `--seeds` and `--set` shrink a
plan (tests/test_bench_recipe.py runs it in seconds on configs/tiny.yaml).

The plan outlasts most sittings, so each scored run is appended to OUT/done.jsonl as it finishes, and
running the same command again with the same --out trains only the runs not yet there (a run with the
same arm, seed, overrides, budget and config); an interrupted run starts over. Every run records its CPU
(model name and widest vector unit); an arm is compared with the baseline scored on its own kind of CPU,
so a sitting on another kind of CPU trains the baseline there before the arms it trains. results.json,
table.md and valid_bleu.png (greedy valid BLEU against training minutes, every run) are rewritten after
every run, so the tables of a plan half done can be committed.
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
from attn_mt.machine import cpu_flags, cpu_name
from attn_mt.run.run_dir import RunPaths, load_vocabs, read_metrics
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
    paths = RunPaths(run_dir)
    summary = json.loads(paths.summary.read_text(encoding="utf-8"))
    curve = [
        [round(m["elapsed_s"] / 60, 2), round(m["valid_bleu"], 2)]
        for m in read_metrics(paths.metrics)
        if m.get("valid_bleu") is not None and m.get("elapsed_s") is not None
    ]
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
        "valid_curve": curve,  # [training minutes, greedy valid BLEU] at each validation
    }


def config_label(path: Path) -> str:
    """The config as records name it: relative to the checkout when inside it (so stored runs match in any
    clone), else its absolute path."""
    resolved = Path(path).resolve()
    return resolved.relative_to(ROOT).as_posix() if resolved.is_relative_to(ROOT) else str(resolved)


def run_key(record: dict[str, Any]) -> str:
    """What makes two scored runs the same: the config, arm, seed, budget and every override."""
    return json.dumps(
        [record["config"], record["arm"], record["seed"], record["budget_minutes"], record["overrides"]]
    )


def this_cpu() -> str:
    """The processor the runs of this sitting train on, with its widest vector unit (one model name can cover
    AVX2-only and AMX machines); every record names its own."""
    flags = cpu_flags()
    units = (("amx_tile", "AMX"), ("avx512f", "AVX-512"), ("avx2", "AVX2"))
    widest = next((name for flag, name in units if flag in flags), None)
    name = cpu_name() or platform.processor() or "unknown CPU"
    return f"{name} ({widest})" if widest else name


class Done:
    """OUT/done.jsonl: the runs scored so far, one JSON line each, kept as each finishes.

    A run is found by its key and its CPU: an arm scored on another CPU is reused, and compared with
    the baseline on that CPU (`arm_summaries`), so a sitting on a new kind of CPU trains the baseline
    there before any arm it trains.
    """

    def __init__(self, out: Path):
        self.path = out / "done.jsonl"
        lines = self.path.read_text(encoding="utf-8").splitlines() if self.path.is_file() else []
        self.records: list[dict[str, Any]] = [json.loads(line) for line in lines if line.strip()]

    def find(self, wanted: dict[str, Any], cpu: str | None = None) -> dict[str, Any] | None:
        """The newest record of this run (on `cpu` when one is named), or None."""
        key = run_key(wanted)
        found = [r for r in self.records if run_key(r) == key and cpu in (None, r.get("cpu"))]
        return found[-1] if found else None

    def add(self, record: dict[str, Any]) -> None:
        """Keep one more scored run, on disk first."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self.path.open("a", encoding="utf-8") as log:
            log.write(json.dumps(record) + "\n")
        self.records.append(record)

    def run(
        self,
        plan: Plan,
        name: str,
        seed: int,
        minutes: float | None,
        args: argparse.Namespace,
        cpu: str | None = None,
    ) -> dict[str, Any]:
        """This arm and seed scored (on `cpu`, if named): from an earlier sitting, or trained now."""
        wanted = wanted_run(plan, name, seed, minutes, args)
        found = self.find(wanted, cpu)
        if found is not None:
            print(f"== {name}, seed {seed}: scored in an earlier sitting on {found.get('cpu')}", flush=True)
            return found
        overrides = plan.arms[name]
        record = {**wanted, "cpu": this_cpu(), **train_and_score(plan, name, overrides, seed, minutes, args)}
        self.add(record)
        return record

    def baselines_beside(self, runs: list[dict[str, Any]], minutes: float | None) -> list[dict[str, Any]]:
        """The newest baseline runs (one a seed) of each CPU that `runs` has arms on but no baseline."""
        have = {r.get("cpu") for r in runs if r["arm"] == "baseline"}
        wanted_cpus = {r.get("cpu") for r in runs} - have
        newest: dict[tuple[Any, int], dict[str, Any]] = {}
        for record in self.records:
            same = record.get("cpu") in wanted_cpus and record.get("budget_minutes") == minutes
            if record["arm"] == "baseline" and same:
                newest[(record.get("cpu"), record["seed"])] = record
        return list(newest.values())


def wanted_run(plan: Plan, name: str, seed: int, minutes: float | None, args: argparse.Namespace) -> dict:
    """The key fields of one arm's run with one seed."""
    budget = [] if minutes is None else [f"train.time_limit_minutes={minutes}"]
    return {
        "config": config_label(plan.config),
        "arm": name,
        "seed": seed,
        "budget_minutes": minutes,
        "overrides": [*budget, f"train.seed={seed}", *plan.arms[name], *args.overrides],
    }


def arm_summaries(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per arm: mean and spread (max - min) of valid and test BLEU over its seeds, and whether it is kept.

    One row per arm and CPU: an arm is compared with the baseline trained on the same CPU; an arm
    with no baseline on its CPU yet is listed, not kept.
    """
    arms: dict[tuple[str, str | None], list[dict[str, Any]]] = {}
    for run in runs:
        arms.setdefault((run["arm"], run.get("cpu")), []).append(run)

    def stats(rows: list[dict[str, Any]], key: str) -> tuple[float, float]:
        values = [r[key] for r in rows]
        return round(statistics.fmean(values), 2), round(max(values) - min(values), 2)

    rows = []
    for (name, cpu), members in arms.items():
        base = arms.get(("baseline", cpu))
        valid, valid_spread = stats(members, "valid_bleu")
        test, test_spread = stats(members, "test_bleu")
        gain, kept = None, False
        if base and name != "baseline":
            base_valid, base_spread = stats(base, "valid_bleu")
            gain = round(valid - base_valid, 2)
            kept = gain > max(valid_spread, base_spread)
        elif name == "baseline":
            gain = 0.0
        rows.append(
            {
                "arm": name,
                "cpu": cpu,
                "seeds": len(members),
                "valid_bleu": valid,
                "valid_spread": valid_spread,
                "test_bleu": test,
                "test_spread": test_spread,
                "valid_gain": gain,
                "kept": kept,
            }
        )
    return rows


def kept_arms(summaries: list[dict[str, Any]]) -> list[str]:
    """The kept arms, highest mean valid BLEU first."""
    kept = sorted((s for s in summaries if s["kept"]), key=lambda s: -s["valid_bleu"])
    return [s["arm"] for s in kept]


def final_run(plan: Plan, arm: str, args: argparse.Namespace, done: Done) -> dict[str, Any]:
    """The chosen arm for the plan's longer budget, then its test score with the pair tune picks on valid."""
    final = dict(done.run(plan, arm, plan.seeds[0], args.final_minutes, args))
    if "tuned" in final:  # tuned in an earlier sitting
        return final
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
    done.add(final)  # the same run again, with its tuned score: the newest record of a key wins
    return final


def baseline_beside_final(
    plan: Plan, final: dict[str, Any], args: argparse.Namespace, done: Done
) -> dict[str, Any] | None:
    """The baseline for the final run's minutes and seed on the final run's CPU (None when the final run is
    the baseline, or when that CPU is not this one and no such run is scored yet)."""
    if final["arm"] == "baseline":
        return None
    cpu = final.get("cpu")
    wanted = wanted_run(plan, "baseline", plan.seeds[0], args.final_minutes, args)
    if done.find(wanted, cpu) is None and cpu != this_cpu():
        print(f"== baseline for {args.final_minutes:g} minutes: left for a sitting on {cpu}", flush=True)
        return None
    return done.run(plan, "baseline", plan.seeds[0], args.final_minutes, args, cpu=cpu)


def beats_baseline(final: dict[str, Any], beside: dict[str, Any] | None) -> bool:
    """Whether a longer run beats the baseline of its budget on valid BLEU."""
    return beside is not None and final["valid_bleu"] > beside["valid_bleu"]


def final_runs(
    plan: Plan, runs: list[dict[str, Any]], args: argparse.Namespace, done: Done
) -> tuple[list[dict[str, Any]], dict[str, Any] | None]:
    """The longer runs: the kept arms, best first, each tuned, until one beats the baseline of the same budget
    on valid BLEU (or that baseline must wait for its CPU); the baseline alone when no arm is kept."""
    kept = kept_arms(arm_summaries(runs))
    if not kept:
        return [final_run(plan, "baseline", args, done)], None
    finals: list[dict[str, Any]] = []
    beside = None
    for arm in kept:
        finals.append(final_run(plan, arm, args, done))
        write_outputs(args, plan, runs, finals, beside)
        beside = beside or baseline_beside_final(plan, finals[-1], args, done)
        if beside is None or beats_baseline(finals[-1], beside):
            break
    return finals, beside


def plan_complete(
    plan: Plan, summaries: list[dict[str, Any]], finals: list[dict[str, Any]], beside: dict | None
) -> bool:
    """Whether nothing is left to train: the longer runs end with the baseline's, with an arm that beats the
    baseline's, or with the last kept arm (a plan without longer runs is done when its arms are)."""
    if not plan.final_minutes:
        return True
    if not finals or (beside is None and finals[-1]["arm"] != "baseline"):
        return False
    last = finals[-1]
    ended = last["arm"] == "baseline" or last["arm"] == kept_arms(summaries)[-1]  # no kept arm after it
    return ended or beats_baseline(last, beside)


def final_lines(finals: list[dict[str, Any]], beside: dict[str, Any] | None) -> list[str]:
    """The longer runs' sentences for table.md: scores, tune's pair, each against that budget's baseline."""
    lines = []
    for final in finals:
        tuned = final["tuned"]
        lines += [
            "",
            f"`{final['arm']}` for {final['minutes']} minutes on {final.get('cpu', '-')}: {final['steps']} "
            f"steps, valid BLEU {final['valid_bleu']}, test BLEU {final['test_bleu']} (beam "
            f"{final['beam_size']}, alpha {final['length_penalty']}); with the pair tune chose on valid "
            f"(beam {tuned['beam_size']}, alpha {tuned['length_penalty']}, {tuned['tune_minutes']} minutes "
            f"of tuning, outside the training budget): {tuned['test_bleu']}.",
        ]
    if beside is not None:
        lines += [
            "",
            f"Baseline for the same {beside['minutes']} minutes and seed on {beside.get('cpu', '-')}: "
            f"{beside['steps']} steps, valid BLEU {beside['valid_bleu']}, test BLEU {beside['test_bleu']}.",
        ]
        for final in finals:
            valid_gain = round(final["valid_bleu"] - beside["valid_bleu"], 2)
            test_gain = round(final["test_bleu"] - beside["test_bleu"], 2)
            lines.append(
                f"`{final['arm']}` against it: {valid_gain:+} valid, {test_gain:+} test (one seed each): "
                f"{'beats it' if beats_baseline(final, beside) else 'does not beat it'}."
            )
    return lines


def markdown(
    plan_name: str,
    runs: list[dict[str, Any]],
    summaries: list[dict[str, Any]],
    finals: list[dict[str, Any]],
    beside: dict | None = None,
) -> str:
    """The tables for docs/benchmarks.md: every run with its CPU, then each arm against its CPU's baseline."""
    lines = [
        f"Plan `{plan_name}`, written {time.strftime('%Y-%m-%d')}; `{runs[0]['bleu_signature']}`",
        "",
        "| arm | seed | CPU | steps | epochs | minutes | est. MFLOP/token | valid BLEU | test BLEU (beam "
        f"{runs[0]['beam_size']}) |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in runs:
        cells = [r["arm"], r["seed"], r.get("cpu", "-"), r["steps"], r["epochs"], r["minutes"]]
        cells += [r["mflops_per_token"], r["valid_bleu"], r["test_bleu"]]
        lines.append("| " + " | ".join(str(c) for c in cells) + " |")
    lines += [
        "",
        "| arm | CPU | seeds | valid BLEU (mean, spread) | test BLEU (mean, spread) | valid gain | kept |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for s in summaries:
        gain = "no baseline on this CPU yet" if s["valid_gain"] is None else f"{s['valid_gain']:+}"
        lines.append(
            f"| {s['arm']} | {s.get('cpu') or '-'} | {s['seeds']} | {s['valid_bleu']} "
            f"({s['valid_spread']}) | {s['test_bleu']} ({s['test_spread']}) | {gain} | "
            f"{'yes' if s['kept'] else 'no'} |"
        )
    if finals:
        lines += final_lines(finals, beside)
    return "\n".join(lines) + "\n"


def plot_curves(runs: list[dict[str, Any]], path: Path) -> None:
    """Greedy valid BLEU against training minutes, one line per run (an arm's seeds share its colour), one
    panel per training budget (the arms' minutes, then the final hour's), with a shared BLEU axis."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    budgets = sorted({run.get("budget_minutes") or 0.0 for run in runs})
    fig, axes = plt.subplots(
        1, len(budgets), figsize=(8 + 4 * (len(budgets) - 1), 5), sharey=True, squeeze=False
    )
    colours: dict[str, str] = {}
    for ax, budget in zip(axes[0], budgets, strict=True):
        for run in runs:
            points = run.get("valid_curve") or []
            if not points or (run.get("budget_minutes") or 0.0) != budget:
                continue
            colour = colours.setdefault(run["arm"], f"C{len(colours) % 10}")
            label = f"{run['arm']} (seed {run['seed']}, {run['minutes']:g} min)"
            style = "-" if run["seed"] == runs[0]["seed"] else "--"
            ax.plot(*zip(*points, strict=True), style, color=colour, label=label, linewidth=1.4)
        ax.set_xlabel("training minutes")
        ax.set_title(f"{budget:g}-minute runs" if budget else "runs with the config's own budget")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, loc="lower right")
    axes[0][0].set_ylabel("greedy valid BLEU (500 sentences)")
    fig.suptitle("Recipe arms: valid BLEU as training goes")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write_outputs(
    args: argparse.Namespace,
    plan: Plan,
    runs: list[dict[str, Any]],
    finals: list[dict[str, Any]],
    beside: dict | None = None,
) -> dict[str, Any]:
    """results.json, table.md and valid_bleu.png under --out, from the runs scored so far."""
    summaries = arm_summaries(runs) if runs else []
    results = {
        "plan": args.plan,
        "config": config_label(plan.config),
        "device": args.device,
        "minutes": plan.minutes,
        "notes": plan.notes,
        "complete": plan_complete(plan, summaries, finals, beside),
        "runs": runs,
        "arms": summaries,
        "finals": finals,  # the longer runs, best kept arm first (the baseline's when no arm is kept)
        "final_baseline": beside,  # the baseline for the longer runs' minutes, when they are other arms
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "results.json").write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    if runs:
        table = markdown(args.plan, runs, summaries, finals, beside)
        (args.out / "table.md").write_text(table, encoding="utf-8")
        plot_curves([*runs, *finals, *([beside] if beside else [])], args.out / "valid_bleu.png")
    return results


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
    """Run every arm with every seed, summarise, run the kept arms longer beside the baseline (`final_runs`);
    outputs rewritten after each run.

    On a CPU where some arm is still to train and the baseline is not scored yet, the baseline trains
    first, so each arm is compared with a baseline from its own kind of CPU.
    """
    plan, args = parse_args(argv)
    done = Done(args.out)
    cpu = this_cpu()
    pairs = [(name, seed) for name in plan.arms for seed in plan.seeds]  # the baseline's first
    missing = [
        (name, seed)
        for name, seed in pairs
        if name != "baseline" and done.find(wanted_run(plan, name, seed, plan.minutes, args)) is None
    ]
    runs: list[dict[str, Any]] = []
    for name, seed in pairs:
        on = cpu if name == "baseline" and missing else None  # arms train here: so does the baseline
        runs.append(done.run(plan, name, seed, plan.minutes, args, cpu=on))
        write_outputs(args, plan, runs, [])
    runs += done.baselines_beside(runs, plan.minutes)
    finals, beside = final_runs(plan, runs, args, done) if plan.final_minutes else ([], None)
    results = write_outputs(args, plan, runs, finals, beside)
    print((args.out / "table.md").read_text(encoding="utf-8"))
    return results


if __name__ == "__main__":
    main()
