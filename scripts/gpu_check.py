"""One command that checks attn-mt end to end on this machine's CUDA device(s), or on the CPU.

    python scripts/gpu_check.py                   # or: make gpu-check
    python scripts/gpu_check.py --device cpu      # the small CPU version the tests run

Runs, each as an `attn-mt` subprocess: both book configs (configs/d2l_*.yaml) for --epochs,
configs/transformer.yaml with train.amp: auto for --minutes (or --steps), `translate` and `eval`
of that run, and, with two or more GPUs (or --ranks N), the same transformer run under
`torchrun --nproc_per_node N`. Prints one table (tokens/s, loss, BLEU, peak GPU memory, AMP mode,
seconds). Any failure stops the check with a non-zero exit, the failing command and its stderr.
--set KEY=VALUE overrides the transformer runs (e.g. a smaller vocabulary for a small --data).
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
BOOK_CONFIGS = ("d2l_bahdanau", "d2l_transformer")
SENTENCE = "I'm home."
COLUMNS = ("check", "steps", "tokens/s", "loss", "BLEU", "peak GPU MB", "AMP", "seconds")


class CheckError(Exception):
    """A command failed or gave an impossible result; the message says which and why."""


@dataclass
class Row:
    """One line of the table."""

    check: str
    steps: Any = "-"
    tokens_per_s: Any = "-"
    loss: Any = "-"
    bleu: Any = "-"
    peak_gpu_mb: Any = "-"
    amp: Any = "-"
    seconds: float = 0.0

    def cells(self) -> list[str]:
        """The row's cells as text."""
        return [str(v) if not isinstance(v, float) else f"{v:.2f}" for v in vars(self).values()]


def run(command: list[str], what: str) -> tuple[str, float]:
    """Run `command`; (its stdout, seconds). A non-zero exit raises CheckError with its stderr."""
    print(f"$ {' '.join(command)}", file=sys.stderr, flush=True)
    start = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, check=False, cwd=ROOT)
    if done.returncode:
        raise CheckError(
            f"{what} failed (exit {done.returncode}): {' '.join(command)}\n{done.stderr[-6000:]}"
        )
    return done.stdout, time.perf_counter() - start


def attn_mt(*args: str) -> list[str]:
    """The command line of `attn-mt ARGS` with this Python."""
    return [sys.executable, "-m", "attn_mt", *args]


def trained_row(name: str, run_dir: Path, seconds: float) -> Row:
    """The table row of a finished training run, from its run_summary.json."""
    try:
        summary = json.loads((run_dir / "run_summary.json").read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise CheckError(f"{name}: no readable run_summary.json in {run_dir}: {exc}") from None
    loss = summary.get("final_loss")
    if loss is None or not math.isfinite(loss) or not summary.get("steps"):
        raise CheckError(f"{name}: the run made {summary.get('steps')} steps with final loss {loss}")
    peak = summary.get("peak_gpu_mb")
    return Row(
        name,
        summary["steps"],
        summary.get("tokens_per_s", "?"),
        loss,
        "-",
        "-" if peak is None else peak,
        summary.get("amp", "?"),
        seconds,
    )


def train_command(config: str, run_dir: Path, args: argparse.Namespace, overrides: list[str]) -> list[str]:
    """`attn-mt train` of `config` into `run_dir` with the check's device, data and overrides."""
    command = attn_mt(
        "train",
        str(ROOT / "configs" / f"{config}.yaml"),
        "--run-dir",
        str(run_dir),
        "--device",
        args.device,
        "--quiet",
        "--overwrite",
    )
    if args.data:
        command += ["--data", str(args.data)]
    for override in overrides:
        command += ["--set", override]
    return command


def transformer_overrides(args: argparse.Namespace) -> list[str]:
    """The transformer run's budget (minutes or steps), AMP auto, then the user's --set."""
    budget = [f"train.time_limit_minutes={args.minutes}", f"train.max_steps={args.steps}"]
    if args.steps:
        budget.append(f"train.log_every={args.steps}")  # the loss of a short run is logged at its end
    return [*budget, "train.amp=auto", *args.overrides]


def checks(args: argparse.Namespace, out: Path) -> list[Row]:
    """Every check in turn; the rows of the table (raises CheckError at the first failure)."""
    rows = []
    for config in BOOK_CONFIGS:
        run_dir = out / config
        _, seconds = run(train_command(config, run_dir, args, [f"train.epochs={args.epochs}"]), config)
        rows.append(trained_row(config, run_dir, seconds))
    run_dir = out / "transformer"
    _, seconds = run(train_command("transformer", run_dir, args, transformer_overrides(args)), "transformer")
    rows.append(trained_row("transformer (amp auto)", run_dir, seconds))
    translate = attn_mt("translate", str(run_dir), SENTENCE, "--device", args.device)
    translated, seconds = run(translate, "translate")
    if not translated.strip():
        raise CheckError(f"translate printed nothing for {SENTENCE!r}")
    rows.append(Row(f"translate: {translated.strip()[:40]}", seconds=seconds))
    evaluate = attn_mt("eval", str(run_dir), "--split", "test", "--device", args.device)
    _, seconds = run(evaluate + (["--data", str(args.data)] if args.data else []), "eval")
    try:
        scores = json.loads((run_dir / "eval" / "test" / "scores.json").read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise CheckError(f"eval wrote no readable scores.json: {exc}") from None
    rows.append(Row("eval --split test", bleu=round(float(scores["bleu"]), 2), seconds=seconds))
    if args.ranks >= 2:
        run_dir = out / "torchrun"
        command = train_command("transformer", run_dir, args, transformer_overrides(args))
        launcher = [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nproc_per_node",
            str(args.ranks),
            "-m",
            "attn_mt",
        ]
        _, seconds = run(launcher + command[3:], f"torchrun with {args.ranks} processes")
        rows.append(trained_row(f"torchrun x{args.ranks} (amp auto)", run_dir, seconds))
    return rows


def print_table(rows: list[Row], device: str) -> None:
    """The results as one markdown table."""
    print(f"attn-mt check on {device}")
    print("| " + " | ".join(COLUMNS) + " |")
    print("|" + " --- |" * len(COLUMNS))
    for row in rows:
        print("| " + " | ".join(row.cells()) + " |")


def describe_device(device: str) -> str:
    """The device's name for the table's title."""
    if device != "cuda":
        return "cpu"
    import torch

    names = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
    return f"{len(names)} x {names[0]}" if names else "cuda (none visible)"


def main() -> None:
    """Parse the options, pick budgets for the device, run every check, print the table."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    parser.add_argument("--epochs", type=int, help="epochs of each book config (default: cuda 20, cpu 1)")
    parser.add_argument("--minutes", type=float, help="transformer run's time limit (default: 5 on cuda, 0)")
    parser.add_argument("--steps", type=int, help="transformer run's step limit (default: cuda 0, cpu 20)")
    parser.add_argument("--ranks", type=int, help="torchrun processes (default: the GPUs if 2 or more)")
    parser.add_argument("--data", type=Path, help="the corpus (default: data.path, $ATTN_MT_DATA, the cache)")
    parser.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a key of the transformer runs (repeatable)",
    )
    parser.add_argument("--out", type=Path, help="keep the runs here (default: a temporary folder)")
    args = parser.parse_args()
    gpus = 0
    if args.device == "cuda":
        import torch

        gpus = torch.cuda.device_count()
        if not gpus:
            sys.exit("gpu_check: no CUDA device is visible; run with --device cpu for the CPU check")
    cuda = args.device == "cuda"
    args.epochs = args.epochs if args.epochs is not None else (20 if cuda else 1)
    args.minutes = args.minutes if args.minutes is not None else (5.0 if cuda else 0.0)
    args.steps = args.steps if args.steps is not None else (0 if cuda else 20)
    args.ranks = args.ranks if args.ranks is not None else (gpus if gpus >= 2 else 0)
    out = args.out or Path(tempfile.mkdtemp(prefix="attn-mt-gpu-check-"))
    try:
        rows = checks(args, out)
    except CheckError as exc:
        print(f"gpu_check FAILED: {exc}", file=sys.stderr)
        sys.exit(1)
    finally:
        if args.out is None:
            shutil.rmtree(out, ignore_errors=True)
    print_table(rows, describe_device(args.device))


if __name__ == "__main__":
    main()
