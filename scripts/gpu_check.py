"""One command that checks attn-mt end to end on this machine's CUDA device(s), or on the CPU.

    python scripts/gpu_check.py --quick           # about 8 minutes of one GPU (docs/gpu.md)
    python scripts/gpu_check.py                   # the longer check, with torchrun over 2+ GPUs
    python scripts/gpu_check.py --device cpu --quick   # the rows that apply on a CPU, for CI
    make gpu-check PYTHON=python3 ARGS=--quick    # with a Python that already holds (CUDA) torch
    python scripts/gpu_check.py --quick --rows auto,eval --set data.batch_shapes=16  # some rows, fixed shapes

It runs with whichever Python starts it and the attn_mt that Python imports (installed, or this
checkout on PYTHONPATH as `make gpu-check PYTHON=...` puts it; no network): a preflight names every
missing package with the pip command that installs it, and finds the corpus as
`attn-mt` does (--data, $ATTN_MT_DATA, the cache) but never downloads it.

Each row is an `attn-mt` subprocess: both book configs for a few epochs; the GPU config
(configs/transformer-gpu.yaml; on the CPU configs/transformer.yaml, made smaller: CPU_SIZES) with
train.amp: auto for --minutes (or --steps); the same with fp16 and the gradient scaler, and with
train.compile, for a few hundred steps (CUDA only in --quick); a run killed with SIGKILL at its
first checkpoint and
continued with --resume; `translate` and `eval --beam 4` of the amp-auto run; a CTranslate2 export
translated on the device (when ctranslate2 is importable); one request to `serve` on 127.0.0.1;
and with two or more GPUs (or --ranks N), the GPU config under torchrun. A failing row is marked
FAIL with its error and the check goes on; rows that need a failed one fail too. One table is
printed and one JSON file written (--json); the exit status is 1 if any row failed.
--set KEY=VALUE overrides the transformer runs (e.g. smaller sizes for a small --data).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import math
import os
import platform
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
BOOK_CONFIGS = ("d2l_bahdanau", "d2l_transformer")
SENTENCE = "I'm home."
COLUMNS = (
    "check",
    "steps",
    "tokens/s",
    "steady tokens/s",
    "loss",
    "BLEU",
    "peak GPU MB",
    "AMP",
    "seconds",
    "result",
)
COMMAND_TIMEOUT_S = 900  # no single command of the check may run longer
# the packages `attn-mt train / translate / eval / serve` import, by module name, with their pip names
REQUIRED = {
    "torch": "torch",
    "typer": "typer>=0.12",
    "yaml": "pyyaml>=6",
    "sacrebleu": "sacrebleu>=2.3",
    "tqdm": "tqdm>=4.60",
    "matplotlib": "matplotlib>=3.7",
    "numpy": "numpy>=1.24",
    "fastapi": "fastapi>=0.110",
    "fastapi_offline": "fastapi-offline>=1.7",
    "uvicorn": "uvicorn>=0.29",
    "sentencepiece": "sentencepiece>=0.2",
    "filelock": "filelock>=3.12",
    "sentencex": "sentencex>=1.0",
}
CTRANSLATE2 = "ctranslate2>=4.5,<5"  # optional: the CTranslate2 row is skipped without it
OLDEST_TORCH = (2, 4)  # pyproject.toml's torch>=2.4
# on the CPU the transformer rows check the same code on a smaller model: minutes, not hours
CPU_SIZES = [
    "model.num_hiddens=64",
    "model.ffn_num_hiddens=128",
    "data.max_tokens=1024",
    "data.valid_size=100",  # eval's beam search over 2,000 test sentences alone takes minutes on 2 cores
    "data.test_size=100",
    "train.valid_max_sentences=50",
]


class CheckError(Exception):
    """A command failed or gave an impossible result; the message says which and why."""


@dataclass
class Row:
    """One line of the table (and one entry of the JSON file)."""

    check: str
    steps: Any = "-"
    tokens_per_s: Any = "-"
    steady_tokens_per_s: Any = "-"  # over the training steps alone, after the first 10
    loss: Any = "-"
    bleu: Any = "-"
    peak_gpu_mb: Any = "-"
    amp: Any = "-"
    seconds: float = 0.0
    result: str = "pass"  # pass, FAIL or skip
    note: str = ""  # why a row failed or was skipped

    def cells(self) -> list[str]:
        """The row's cells as text (the note goes below the table)."""
        values = [v for k, v in vars(self).items() if k != "note"]
        return [str(v) if not isinstance(v, float) else f"{v:.2f}" for v in values]


# ----- before anything runs -----
def missing_packages(modules: dict[str, str]) -> list[str]:
    """One line per module of `modules` this Python cannot import: its name and the pip command for it."""
    lines = []
    for module, spec in modules.items():
        if importlib.util.find_spec(module) is None:
            lines.append(f"  {module}: {sys.executable} -m pip install '{spec}'")
            continue
        try:
            importlib.import_module(module)
        except (
            ImportError
        ) as exc:  # installed, but a package it needs is not (fastapi without opentelemetry-api)
            lines.append(
                f"  {module}: installed but does not import ({exc}): {sys.executable} -m pip install '{spec}'"
            )
    return lines


def preflight(args: argparse.Namespace) -> Path:
    """Exit with a clear message when a package, the GPU or the corpus is missing; the corpus's path."""
    missing = missing_packages(REQUIRED)
    if missing:
        hint = (
            " (for a GPU, a CUDA build: https://pytorch.org/get-started/locally/)"
            if any(line.startswith("  torch:") for line in missing)
            else ""
        )
        sys.exit(
            f"gpu_check: this Python ({sys.executable}) lacks what attn-mt needs{hint}:\n"
            + "\n".join(missing)
        )
    if importlib.util.find_spec("attn_mt") is None:
        sys.exit(
            f"gpu_check: this Python ({sys.executable}) does not import attn_mt: {sys.executable} -m pip "
            f"install --no-deps -e {ROOT}, or run `make gpu-check PYTHON={sys.executable}`"
        )
    import torch

    release = tuple(int(part) for part in torch.__version__.split("+")[0].split(".")[:2] if part.isdigit())
    if release < OLDEST_TORCH:
        sys.exit(
            f"gpu_check: attn-mt needs torch 2.4 or later (torch.is_autocast_enabled(device_type)), this "
            f"Python has {torch.__version__}: {sys.executable} -m pip install 'torch>=2.4'"
        )
    if args.device == "cuda" and not torch.cuda.is_available():
        build = f"torch {torch.__version__}, CUDA build {torch.version.cuda or 'none'}"
        sys.exit(f"gpu_check: no CUDA device is visible ({build}); run with --device cpu for the CPU check")
    from attn_mt.data.corpus import resolve_corpus
    from attn_mt.errors import UserError

    try:
        return resolve_corpus(args.data, download=False)
    except UserError as exc:
        sys.exit(f"gpu_check: {exc}\n  (the check never downloads: pass --data FILE or set ATTN_MT_DATA)")


# ----- running attn-mt -----
def run(command: list[str], what: str) -> tuple[str, float]:
    """Run `command`; (its stdout, seconds). A non-zero exit or a timeout raises CheckError with stderr."""
    print(f"$ {' '.join(command)}", file=sys.stderr, flush=True)
    start = time.perf_counter()
    try:
        done = subprocess.run(
            command, capture_output=True, text=True, check=False, cwd=ROOT, timeout=COMMAND_TIMEOUT_S
        )
    except subprocess.TimeoutExpired as exc:
        raise CheckError(f"{what} ran past {COMMAND_TIMEOUT_S} s: {' '.join(command)}") from exc
    if done.returncode:
        raise CheckError(
            f"{what} failed (exit {done.returncode}): {' '.join(command)}\n{done.stderr[-4000:]}"
        )
    return done.stdout, time.perf_counter() - start


def attn_mt(*args: str) -> list[str]:
    """The command line of `attn-mt ARGS` with this Python, from this checkout."""
    return [sys.executable, "-m", "attn_mt", *args]


def read_summary(name: str, run_dir: Path) -> dict[str, Any]:
    """A finished run's run_summary.json, checked for steps and a finite loss."""
    try:
        summary = json.loads((run_dir / "run_summary.json").read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise CheckError(f"{name}: no readable run_summary.json in {run_dir}: {exc}") from None
    loss = summary.get("final_loss")
    if loss is None or not math.isfinite(loss) or not summary.get("steps"):
        raise CheckError(f"{name}: the run made {summary.get('steps')} steps with final loss {loss}")
    return summary


def trained_row(name: str, run_dir: Path, seconds: float) -> Row:
    """The table row of a finished training run, from its run_summary.json."""
    summary = read_summary(name, run_dir)
    peak = summary.get("peak_gpu_mb")
    return Row(
        name,
        steps=summary["steps"],
        tokens_per_s=summary.get("tokens_per_s", "?"),
        steady_tokens_per_s=summary.get("steady_tokens_per_s") or "-",
        loss=summary["final_loss"],
        peak_gpu_mb="-" if peak is None else peak,
        amp=summary.get("amp", "?"),
        seconds=seconds,
    )


class Check:
    """The check's settings and the runs it has made; one method per row."""

    def __init__(self, args: argparse.Namespace, corpus: Path, out: Path):
        self.args, self.corpus, self.out = args, corpus, out
        self.cuda = args.device == "cuda"
        self.config = args.config or ("transformer-gpu" if self.cuda else "transformer")

    def train_command(self, config: str, run_dir: Path, overrides: list[str]) -> list[str]:
        """`attn-mt train` of configs/CONFIG.yaml into `run_dir` with the check's device and corpus."""
        command = attn_mt(
            "train",
            str(ROOT / "configs" / f"{config}.yaml"),
            *("--run-dir", str(run_dir), "--device", self.args.device, "--data", str(self.corpus)),
            *("--quiet", "--overwrite"),
        )
        for override in overrides:
            command += ["--set", override]
        return command

    def transformer_overrides(self, *extra: str) -> list[str]:
        """On the CPU smaller sizes, then `extra` budget settings, then the user's --set."""
        return [*([] if self.cuda else CPU_SIZES), *extra, *self.args.overrides]

    def steps_budget(self, steps: int) -> list[str]:
        """A run of `steps` steps, its loss logged at the end, validated once."""
        return [f"train.max_steps={steps}", f"train.log_every={steps}", f"train.valid_every={steps}"]

    def book(self, config: str) -> Row:
        """One of the book's runs for --epochs."""
        run_dir = self.out / config
        _, seconds = run(self.train_command(config, run_dir, [f"train.epochs={self.args.epochs}"]), config)
        return trained_row(config, run_dir, seconds)

    def auto(self) -> Row:
        """The GPU config with train.amp: auto for --minutes or --steps: the run the later rows use."""
        budget = [f"train.time_limit_minutes={self.args.minutes}", "train.amp=auto"]
        if self.args.steps:
            budget += self.steps_budget(self.args.steps)
        run_dir = self.out / "transformer"
        _, seconds = run(
            self.train_command(self.config, run_dir, self.transformer_overrides(*budget)), "amp auto"
        )
        return trained_row(f"{self.config} (amp auto)", run_dir, seconds)

    def fp16(self) -> Row:
        """fp16 autocast with the gradient scaler for --short-steps steps (CUDA only)."""
        row = self.short_run("fp16 + scaler", "fp16", ["train.amp=fp16"])
        if row.amp != "fp16":
            raise CheckError(f"fp16 + scaler: the run trained with amp {row.amp}, not fp16")
        return row

    def compiled(self) -> Row:
        """train.compile: true for --short-steps steps."""
        return self.short_run("compile", "compile", ["train.compile=true", "train.amp=auto"])

    def short_run(self, name: str, folder: str, settings: list[str]) -> Row:
        """The GPU config for --short-steps steps with `settings`."""
        run_dir = self.out / folder
        overrides = self.transformer_overrides(*settings, *self.steps_budget(self.args.short_steps))
        _, seconds = run(self.train_command(self.config, run_dir, overrides), name)
        return trained_row(f"{self.config} ({name})", run_dir, seconds)

    def kill_and_resume(self) -> Row:
        """Kill a run with SIGKILL once its first checkpoint is written, then finish it with --resume."""
        run_dir, every = self.out / "killed", self.args.resume_every
        overrides = self.transformer_overrides(
            *(
                "train.amp=auto",
                "train.epochs=10000",
                "train.time_limit_minutes=5",
                f"train.log_every={every}",
            ),
            *(f"train.valid_every={every}", "train.checkpoint_minutes=0"),
        )
        command = self.train_command(self.config, run_dir, overrides)
        print(f"$ {' '.join(command)}  (killed at its first checkpoint)", file=sys.stderr, flush=True)
        started = time.perf_counter()
        last = run_dir / "checkpoints" / "last.pt"
        with subprocess.Popen(
            command, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
        ) as proc:
            while (
                not last.exists()
                and proc.poll() is None
                and time.perf_counter() - started < COMMAND_TIMEOUT_S
            ):
                time.sleep(0.2)
            exited = proc.poll()
            proc.kill()  # SIGKILL: no handler runs, nothing is flushed
            _, stderr = proc.communicate()
        if exited is not None or not last.exists():
            raise CheckError(
                f"kill and resume: the run ended (exit {exited}) before a checkpoint:\n{stderr[-3000:]}"
            )
        from attn_mt.run.checkpoint import load_checkpoint

        killed_at = int(load_checkpoint(last)["step"])
        target = killed_at + every
        resume = attn_mt("train", "--resume", "--run-dir", str(run_dir), "--device", self.args.device)
        resume += ["--data", str(self.corpus), "--quiet", "--set", f"train.max_steps={target}"]
        _, seconds = run(resume, "resume")
        row = trained_row(f"SIGKILL at step {killed_at}, --resume", run_dir, time.perf_counter() - started)
        if row.steps != target:
            raise CheckError(f"resume: the run ended at step {row.steps}, not {target}")
        steps = [json.loads(line)["step"] for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
        if steps != sorted(steps) or steps[-1] != target:
            raise CheckError(f"resume: metrics.jsonl's steps do not run on to {target}: {steps}")
        return row

    def translate(self) -> Row:
        """`translate` with beam 4 of the amp-auto run."""
        command = attn_mt("translate", str(self.out / "transformer"), SENTENCE, "--beam", "4")
        translated, seconds = run(command + ["--device", self.args.device], "translate")
        if not translated.strip():
            raise CheckError(f"translate printed nothing for {SENTENCE!r}")
        return Row(f"translate: {translated.strip()[:40]}", seconds=seconds)

    def evaluate(self) -> Row:
        """`eval --split test --beam 4` of the amp-auto run."""
        run_dir = self.out / "transformer"
        command = attn_mt(
            "eval", str(run_dir), "--split", "test", "--beam", "4", "--device", self.args.device
        )
        _, seconds = run(command + ["--data", str(self.corpus)], "eval")
        try:
            scores = json.loads((run_dir / "eval" / "test" / "scores.json").read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise CheckError(f"eval wrote no readable scores.json: {exc}") from None
        return Row("eval --split test --beam 4", bleu=round(float(scores["bleu"]), 2), seconds=seconds)

    def ctranslate2(self) -> Row:
        """`export --format ctranslate2` of the amp-auto run, then `translate` of the folder on the device."""
        name = "CTranslate2 export + translate"
        if importlib.util.find_spec("ctranslate2") is None:
            return Row(
                name,
                result="skip",
                note=f"ctranslate2 is not installed ({sys.executable} -m pip install '{CTRANSLATE2}')",
            )
        folder = self.out / "ctranslate2"
        shutil.rmtree(folder, ignore_errors=True)
        quantize = ["--quantize", "float16"] if self.cuda else []
        _, export_s = run(
            attn_mt(
                "export", str(self.out / "transformer"), str(folder), "--format", "ctranslate2", *quantize
            ),
            "export",
        )
        try:
            translated, seconds = run(
                attn_mt("translate", str(folder), SENTENCE, "--device", self.args.device),
                "CTranslate2 translate",
            )
        except CheckError as exc:
            if "CTranslate2 cannot run on this GPU" not in str(exc):
                raise
            reason = str(exc).split("CTranslate2 cannot run on this GPU: ", 1)[1].split(". ", 1)[0]
            return Row(
                name,
                result="skip",
                note=f"the export passed; this machine lacks CTranslate2's CUDA: {reason}",
            )
        if not translated.strip():
            raise CheckError(f"the CTranslate2 folder translated {SENTENCE!r} to nothing")
        return Row(
            f"CTranslate2: {translated.strip()[:35]}",
            amp="float16" if self.cuda else "-",
            seconds=export_s + seconds,
        )

    def serve(self) -> Row:
        """`serve` of the amp-auto run on 127.0.0.1 and one POST /translate, within bounded waits."""
        command = attn_mt("serve", str(self.out / "transformer"), "--host", "127.0.0.1", "--port", "0")
        command += ["--device", self.args.device]
        print(f"$ {' '.join(command)}", file=sys.stderr, flush=True)
        started = time.perf_counter()
        with subprocess.Popen(
            command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        ) as proc:
            try:
                ready, _, _ = select.select([proc.stdout], [], [], 180)
                line = proc.stdout.readline() if ready else ""
                if "http://127.0.0.1:" not in line:
                    if proc.poll() is None and not ready:
                        raise CheckError("serve printed no address within 180 s")
                    proc.kill()
                    _, errors = proc.communicate(timeout=30)
                    raise CheckError(
                        f"serve stopped before it listened (exit {proc.returncode}):\n{errors[-4000:]}"
                    )
                address = line.split("http://", 1)[1].split("/", 1)[0]
                body = json.dumps({"sentences": [SENTENCE], "beam": 4}).encode()
                request = urllib.request.Request(
                    f"http://{address}/translate", data=body, headers={"Content-Type": "application/json"}
                )
                with urllib.request.urlopen(request, timeout=120) as response:
                    answer = json.loads(response.read())
            except OSError as exc:
                raise CheckError(f"serve: the request failed: {exc}") from None
            finally:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    proc.kill()
        translation = answer["results"][0]["translation"]
        if not translation:
            raise CheckError(f"serve translated {SENTENCE!r} to nothing: {answer}")
        return Row(f"serve: {translation[:40]}", seconds=time.perf_counter() - started)

    def torchrun(self) -> Row:
        """The amp-auto run under `torchrun --nproc_per_node N`."""
        run_dir = self.out / "torchrun"
        budget = [f"train.time_limit_minutes={self.args.minutes}", "train.amp=auto"]
        if self.args.steps:
            budget += self.steps_budget(self.args.steps)
        command = self.train_command(self.config, run_dir, self.transformer_overrides(*budget))
        launcher = [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nproc_per_node",
            str(self.args.ranks),
        ]
        _, seconds = run(
            launcher + ["-m", "attn_mt"] + command[3:], f"torchrun with {self.args.ranks} processes"
        )
        return trained_row(f"torchrun x{self.args.ranks} (amp auto)", run_dir, seconds)


ROW_KEYS = (
    "book",
    "auto",
    "fp16",
    "compile",
    "resume",
    "translate",
    "eval",
    "ctranslate2",
    "serve",
    "torchrun",
)


def plan(check: Check) -> list[tuple[str, str, Callable[[], Row], str | None, str | None]]:
    """Every row: its key (--rows), name, what runs it, the row it needs and why it is skipped (or None)."""
    args, cuda = check.args, check.cuda
    on_cpu_quick = "checked on CUDA; on the CPU only without --quick (inductor's build takes minutes)"
    auto = f"{check.config} (amp auto)"
    rows = [("book", config, lambda c=config: check.book(c), None, None) for config in BOOK_CONFIGS]
    rows += [
        ("auto", auto, check.auto, None, None),
        (
            "fp16",
            "fp16 + scaler",
            check.fp16,
            None,
            None if cuda else "fp16 autocast and its scaler apply on CUDA only",
        ),
        ("compile", "compile", check.compiled, None, on_cpu_quick if args.quick and not cuda else None),
        ("resume", "SIGKILL + --resume", check.kill_and_resume, None, None),
        ("translate", "translate", check.translate, auto, None),
        ("eval", "eval --split test --beam 4", check.evaluate, auto, None),
        ("ctranslate2", "CTranslate2 export + translate", check.ctranslate2, auto, None),
        ("serve", "serve", check.serve, auto, None),
    ]
    if args.ranks >= 2:
        rows.append(("torchrun", f"torchrun x{args.ranks}", check.torchrun, None, None))
    if args.rows:  # only the rows asked for; the others are listed as skipped
        rows = [
            (key, name, body, needs, skip or (None if key in args.rows else "not asked for (--rows)"))
            for key, name, body, needs, skip in rows
        ]
    return rows


def run_rows(check: Check) -> list[Row]:
    """Run the plan's rows in turn; a failure is recorded in its row and the rows that need it."""
    rows, failed = [], set()
    for _, name, body, needs, skip in plan(check):
        started = time.perf_counter()
        if skip:
            rows.append(Row(name, result="skip", note=skip))
            continue
        if needs in failed:
            failed.add(name)
            rows.append(Row(name, result="FAIL", note=f"needs the {needs} row, which failed"))
            continue
        try:
            rows.append(body())
        except Exception as exc:  # a row's failure, however it shows, is that row's result
            note = str(exc) if isinstance(exc, CheckError) else f"{type(exc).__name__}: {exc}"
            failed.add(name)
            rows.append(Row(name, result="FAIL", seconds=time.perf_counter() - started, note=note))
            print(f"gpu_check: {name} FAILED: {note}", file=sys.stderr, flush=True)
    return rows


# ----- reporting -----
def describe_machine(device: str) -> dict[str, Any]:
    """The device, driver and versions the table's title and the JSON file name."""
    import torch

    facts: dict[str, Any] = {
        "device": device,
        "torch": torch.__version__,
        "python": platform.python_version(),
    }
    if device == "cuda":
        names = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
        facts.update(gpus=len(names), gpu=names[0] if names else None, cuda=torch.version.cuda)
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            query = ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"]
            facts["driver"] = subprocess.run(
                query, capture_output=True, text=True, timeout=30
            ).stdout.split()[0]
    else:
        facts.update(cpu=platform.processor() or platform.machine(), cores=os.cpu_count())
    return facts


def print_table(rows: list[Row], machine: dict[str, Any]) -> None:
    """The results as one markdown table, the notes of failed and skipped rows below it."""
    where = (
        f"{machine.get('gpus')} x {machine.get('gpu')}, driver {machine.get('driver', '?')}"
        if machine["device"] == "cuda"
        else f"cpu ({machine.get('cores')} cores)"
    )
    print(f"attn-mt check on {where}, torch {machine['torch']}")
    print("| " + " | ".join(COLUMNS) + " |")
    print("|" + " --- |" * len(COLUMNS))
    for row in rows:
        print("| " + " | ".join(row.cells()) + " |")
    for row in rows:
        if row.note:
            print(f"- {row.check} ({row.result}): {row.note.splitlines()[0]}")


def parse_args() -> argparse.Namespace:
    """The command line, with each budget chosen for the device and --quick where not given."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    parser.add_argument(
        "--quick", action="store_true", help="the rows in about 8 minutes of one GPU (docs/gpu.md)"
    )
    parser.add_argument(
        "--config",
        help="the transformer rows' config in configs/ (default: transformer-gpu, cpu: transformer)",
    )
    parser.add_argument("--epochs", type=int, help="epochs of each book config (cuda: 20, quick 5; cpu: 1)")
    parser.add_argument(
        "--minutes", type=float, help="the amp-auto run's time limit (cuda: 5, quick 2; cpu: 0)"
    )
    parser.add_argument("--steps", type=int, help="the amp-auto run's step limit (cuda: 0; cpu: 20)")
    parser.add_argument(
        "--short-steps", type=int, help="steps of the fp16 and compile runs (cuda: 300; cpu: 10)"
    )
    parser.add_argument(
        "--resume-every", type=int, help="the killed run's checkpoint interval (cuda: 100; cpu: 5)"
    )
    parser.add_argument(
        "--ranks", type=int, help="torchrun processes (default: the GPUs if 2 or more, never with --quick)"
    )
    parser.add_argument(
        "--data", type=Path, help="the corpus (default: $ATTN_MT_DATA, then the cache; never a download)"
    )
    parser.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a key of the transformer runs (repeatable)",
    )
    parser.add_argument(
        "--rows",
        help=f"run only these rows, comma-separated, of {', '.join(ROW_KEYS)} (translate, eval, ctranslate2 "
        "and serve use the auto row's run)",
    )
    parser.add_argument("--out", type=Path, help="keep the runs here (default: a temporary folder)")
    parser.add_argument(
        "--json",
        type=Path,
        default=ROOT / "runs" / "gpu_check.json",
        help="where to write the results (default: runs/gpu_check.json)",
    )
    args = parser.parse_args()
    if args.rows:
        args.rows = [key.strip() for key in args.rows.split(",") if key.strip()]
        unknown = sorted(set(args.rows) - set(ROW_KEYS))
        if unknown:
            parser.error(f"--rows: {', '.join(unknown)} not among {', '.join(ROW_KEYS)}")
    cuda = args.device == "cuda"

    def pick(value: Any, cuda_full: Any, cuda_quick: Any, cpu: Any) -> Any:
        if value is not None:
            return value
        return (cuda_quick if args.quick else cuda_full) if cuda else cpu

    args.epochs = pick(args.epochs, 20, 5, 1)
    args.minutes = pick(args.minutes, 5.0, 2.0, 0.0)
    args.steps = pick(args.steps, 0, 0, 20)
    args.short_steps = pick(args.short_steps, 300, 300, 10)
    args.resume_every = pick(args.resume_every, 100, 100, 5)
    return args


def main() -> None:
    """Preflight, run every row, print the table, write the JSON; exit 1 if any row failed."""
    args = parse_args()
    corpus = preflight(args)
    gpus = 0
    if args.device == "cuda":
        import torch

        gpus = torch.cuda.device_count()
    args.ranks = args.ranks if args.ranks is not None else (gpus if gpus >= 2 and not args.quick else 0)
    out = args.out or Path(tempfile.mkdtemp(prefix="attn-mt-gpu-check-"))
    started = time.perf_counter()
    try:
        rows = run_rows(Check(args, corpus, out))
    finally:
        if args.out is None:
            shutil.rmtree(out, ignore_errors=True)
    machine = describe_machine(args.device)
    print_table(rows, machine)
    passed = all(row.result != "FAIL" for row in rows)
    report = {
        **machine,
        "quick": args.quick,
        "finished": time.strftime("%Y-%m-%d %H:%M:%S"),
        "seconds": round(time.perf_counter() - started, 1),
        "passed": passed,
        "rows": [asdict(row) for row in rows],
    }
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    print(f"results in {args.json}; {'every row passed' if passed else 'FAILED: see the rows marked FAIL'}")
    sys.exit(0 if passed else 1)


if __name__ == "__main__":
    main()
