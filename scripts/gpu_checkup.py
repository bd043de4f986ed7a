"""The first thing to run where a GPU is at hand: one call, under 9 minutes of one card, no network.

    python3 scripts/gpu_checkup.py --data ~/fra-eng.zip             # one CUDA card (docs/gpu.md)
    make gpu-checkup PYTHON=python3 ARGS="--data ~/fra-eng.zip"      # the same through make
    python3 scripts/gpu_checkup.py --dry-run                         # the commands and budgets, nothing run
    python scripts/gpu_checkup.py --device cpu --data corpus.txt     # the CPU smoke version: no GPU figure

Three parts run in turn, each a subprocess of this Python (nothing is installed or downloaded):
1. `check`: scripts/gpu_check.py --quick, the rows that train and decode (a 2-minute amp-auto run
   of configs/transformer-gpu.yaml and its test BLEU with beam 4, fp16 with the scaler, SIGKILL
   and --resume, translate, and the CTranslate2 float16 export translated on the card);
2. `profile-eager`: scripts/profile_step.py --variants reference (the trainer's own step, synthetic
   batches of the GPU config's lengths): ms a step, MFU, GPU busy, kernels, attention kernels and
   host syncs;
3. `profile-step` (CUDA only): the same with reference+step-capture and data.batch_shapes=8 (the
   whole step compiled and captured as one CUDA graph a batch shape, compile_s apart).
Each part gets what is left of --minutes (at most its own cap, PARTS); one that runs past it is
stopped and its row says "cut at the budget", and the next part gets what remains. The table goes
to stdout and to --out/checkup.md, every part's own output and JSON beside it. The targets of the
training step (docs/gpu.md: >= 1.3 M target tokens/s on an H100-class card, GPU busy >= 90%, no host
sync a step, test BLEU >= 53.5) are printed under the table, met or not. On the CPU (--device cpu)
the same parts run at CPU sizes (gpu_check's CPU rows, configs/tiny.yaml's profile, no compiled
profile: inductor's build takes minutes on a small CPU); that table says it holds no GPU figure.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
BUDGET_MINUTES = 9.0
CHECK_ROWS = "auto,fp16,resume,translate,eval,ctranslate2"
TARGETS = {"steady_tokens_per_s": 1.3e6, "gpu_busy": 0.9, "host_syncs_per_step": 0.0, "bleu": 53.5}
COLUMNS = ("part", "row", "steps", "steady tokens/s", "ms a step", "BLEU", "GPU busy", "host syncs", "result")


@dataclass
class Part:
    """One subprocess of the check-up."""

    name: str
    cap_s: float  # at most this many seconds of the budget
    command: list[str] = field(default_factory=list)
    result: str = "not run"  # pass, FAIL, cut at the budget, not run
    seconds: float = 0.0


def plan(args: argparse.Namespace) -> list[Part]:
    """The parts and their commands for args.device."""
    python, out = sys.executable, args.out
    cuda = args.device == "cuda"
    data = ["--data", str(args.data)] if args.data else []
    check = [python, str(ROOT / "scripts" / "gpu_check.py"), "--device", args.device, "--quick", *data]
    check += [arg for setting in args.overrides for arg in ("--set", setting)]
    profile = [python, str(ROOT / "scripts" / "profile_step.py")]
    if cuda:
        profile += [str(ROOT / "configs" / "transformer-gpu.yaml"), "--device", "cuda"]
        profile += ["--warmup", "10", "--steps", "30", "--trace-steps", "2"]
    else:
        profile += [str(ROOT / "configs" / "tiny.yaml"), "--device", "cpu", "--vocab", "200"]
        profile += ["--warmup", "2", "--steps", "5", "--trace-steps", "1", "--set", "train.threads=1"]
    parts = [
        Part(
            "check",
            300,
            [*check, "--rows", CHECK_ROWS, "--json", str(out / "check.json")]
            + ([] if cuda else ["--steps", "10"]),
        ),
        Part("profile-eager", 60, [*profile, "--variants", "reference", "--out", str(out / "profile-eager")]),
    ]
    if cuda:
        captured = ["--variants", "reference+step-capture", "--set", "data.batch_shapes=8"]
        parts.append(Part("profile-step", 240, [*profile, *captured, "--out", str(out / "profile-step")]))
    if args.parts:
        parts = [part for part in parts if part.name in args.parts]
    return parts


def run_part(part: Part, left_s: float, out: Path) -> None:
    """Run `part` for at most min(its cap, left_s) seconds; its output to out/NAME.log."""
    limit = min(part.cap_s, left_s)
    if limit <= 1:
        part.result = "not run: no budget left"
        return
    log = out / f"{part.name}.log"
    print(f"$ {' '.join(part.command)}  (at most {limit:.0f} s)", file=sys.stderr, flush=True)
    started = time.perf_counter()
    with log.open("w", encoding="utf-8") as handle:
        try:
            done = subprocess.run(
                part.command, cwd=ROOT, stdout=handle, stderr=subprocess.STDOUT, timeout=limit
            )
            part.result = "pass" if done.returncode == 0 else f"FAIL (exit {done.returncode}, {log.name})"
        except subprocess.TimeoutExpired:
            part.result = f"cut at the budget ({limit:.0f} s)"
    part.seconds = time.perf_counter() - started


def read_json(path: Path) -> dict[str, Any]:
    """A part's JSON file, or {} when it wrote none (cut, failed early)."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}


def cell(value: Any, text: str = "{}") -> str:
    """A table cell: '-' for a missing value."""
    return "-" if value in (None, "-", "") else text.format(value)


def table_rows(parts: list[Part], out: Path) -> list[list[str]]:
    """One table row per gpu_check row and per profiled variant, or one per part that left no figures."""
    rows = []
    for part in parts:
        found = []
        if part.name == "check":
            for row in read_json(out / f"{part.name}.json").get("rows", []):
                if row["result"] == "skip" and "--rows" in row.get("note", ""):
                    continue
                steady = row.get("steady_tokens_per_s")
                found.append(
                    [
                        part.name,
                        row["check"],
                        cell(row.get("steps")),
                        cell(steady, "{:,.0f}") if steady != "-" else "-",
                        "-",
                        cell(row.get("bleu")),
                        "-",
                        "-",
                        row["result"],
                    ]
                )
        else:
            for variant in read_json(out / part.name / "profile.json").get("variants", []):
                ok = "pass" if variant["ok"] else f"FAIL: {variant['error'][:60]}"
                found.append(
                    [
                        part.name,
                        variant["variant"],
                        "-",
                        cell(variant.get("tokens_per_s"), "{:,.0f}"),
                        cell(variant.get("ms_per_step"), "{:.2f}"),
                        "-",
                        cell(variant.get("gpu_busy"), "{:.0%}"),
                        cell(variant.get("host_syncs_per_step"), "{:.1f}"),
                        ok,
                    ]
                )
        rows += found or [[part.name, "-", "-", "-", "-", "-", "-", "-", part.result]]
    return rows


def targets(out: Path) -> list[str]:
    """The training step's targets, each met, missed or not measured."""
    rows = read_json(out / "check.json").get("rows", [])
    profiled = [
        v
        for part in ("profile-eager", "profile-step")
        for v in read_json(out / part / "profile.json").get("variants", [])
        if v["ok"]
    ]
    measured = {
        "steady_tokens_per_s": next(
            (r["steady_tokens_per_s"] for r in rows if "amp auto" in r["check"]), None
        ),
        "bleu": next((r["bleu"] for r in rows if r["check"].startswith("eval")), None),
        "gpu_busy": max((v["gpu_busy"] for v in profiled if v.get("gpu_busy") is not None), default=None),
        "host_syncs_per_step": min(
            (v["host_syncs_per_step"] for v in profiled if v.get("host_syncs_per_step") is not None),
            default=None,
        ),
    }
    lines = []
    for key, aim in TARGETS.items():
        value = measured[key]
        if value in (None, "-"):
            lines.append(f"- {key}: not measured (aim {aim:g})")
            continue
        met = float(value) <= aim if key == "host_syncs_per_step" else float(value) >= aim
        lines.append(f"- {key}: {value} ({'met' if met else 'missed'}; aim {aim:g})")
    return lines


def report(parts: list[Part], args: argparse.Namespace, seconds: float) -> str:
    """The markdown the check-up prints and writes."""
    machine = read_json(args.out / "check.json") or read_json(args.out / "profile-eager" / "profile.json")
    where = (
        f"{machine.get('gpu', '?')}, driver {machine.get('driver', '?')}, CUDA {machine.get('cuda', '?')}"
        if args.device == "cuda"
        else "the CPU: a smoke run of the check-up, no GPU figure"
    )
    lines = [
        f"attn-mt GPU check-up on {where}, torch {machine.get('torch', '?')}, "
        f"{time.strftime('%Y-%m-%d %H:%M')}, {seconds:.0f} s of a {args.minutes:g}-minute budget",
        f"command: {' '.join(['python3', 'scripts/gpu_checkup.py', *args.argv])}",
        "",
        "| " + " | ".join(COLUMNS) + " |",
        "|" + " --- |" * len(COLUMNS),
    ]
    lines += ["| " + " | ".join(row) + " |" for row in table_rows(parts, args.out)]
    lines += ["", "parts: " + "; ".join(f"{p.name} {p.result} ({p.seconds:.0f} s)" for p in parts)]
    if args.device == "cuda":
        lines += ["", "targets (docs/gpu.md):", *targets(args.out)]
    return "\n".join(lines) + "\n"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    parser.add_argument(
        "--data", type=Path, help="the corpus (default: $ATTN_MT_DATA, then the cache; never a download)"
    )
    parser.add_argument("--minutes", type=float, default=BUDGET_MINUTES, help="the whole budget (default 9)")
    parser.add_argument(
        "--parts",
        help="run only these parts, comma-separated (check, profile-eager, profile-step)",
    )
    parser.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="passed to gpu_check's transformer runs (e.g. smaller sizes for a small --data)",
    )
    parser.add_argument(
        "--out", type=Path, default=ROOT / "runs" / "gpu_checkup", help="the table, logs and JSON"
    )
    parser.add_argument(
        "--dry-run", action="store_true", help="print the parts' commands and caps; run nothing"
    )
    args = parser.parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)
    args.parts = [p.strip() for p in args.parts.split(",")] if args.parts else None
    return args


def main(argv: list[str] | None = None) -> int:
    """Run the parts within the budget, print and write the table; 1 if a part failed or was cut."""
    args = parse_args(argv)
    parts = plan(args)
    if args.dry_run:
        for part in parts:
            print(f"{part.name} (at most {part.cap_s:.0f} s): {' '.join(part.command)}")
        print(f"budget {args.minutes:g} minutes; caps add up to {sum(p.cap_s for p in parts) / 60:.1f}")
        return 0
    args.out.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    for part in parts:
        run_part(part, args.minutes * 60 - (time.perf_counter() - started), args.out)
    text = report(parts, args, time.perf_counter() - started)
    (args.out / "checkup.md").write_text(text, encoding="utf-8")
    print(text, end="")
    return 0 if all(p.result == "pass" for p in parts) else 1


if __name__ == "__main__":
    sys.exit(main())
