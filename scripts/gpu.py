"""attn-mt on this machine's CUDA device(s), or on the CPU: check it, profile its training step, or both.

    python3 scripts/gpu.py checkup --data ~/fra-eng.zip     # the first thing to run on a card (docs/gpu.md)
    python3 scripts/gpu.py checkup --dry-run                # the check-up's commands and caps, nothing run
    python3 scripts/gpu.py check --quick                    # every row a GPU changes, ~8 minutes of one GPU
    python3 scripts/gpu.py check --device cpu --quick       # the rows that apply on a CPU
    python3 scripts/gpu.py profile --variants reference+step-capture --set data.batch_shapes=8
    python3 scripts/gpu.py profile configs/tiny.yaml --device cpu --warmup 2 --steps 3
    make gpu-checkup | gpu-check | profile-step PYTHON=python3 ARGS=...   # no .venv, no pip

It runs with whichever Python starts it and the attn_mt that Python imports (installed, or this
checkout on PYTHONPATH as `make ... PYTHON=...` puts it; no network): a preflight names every
missing package with the pip command that installs it, and `check` finds the corpus as `attn-mt`
does (--data, $ATTN_MT_DATA, the cache) but never downloads it.

check: each row is an `attn-mt` subprocess: both book configs for a few epochs; the GPU config
(configs/transformer-gpu.yaml; on the CPU configs/transformer.yaml made smaller: CPU_SIZES) with
train.amp: auto for --minutes (or --steps); the same with fp16 and the gradient scaler, and with
train.compile, for --short-steps (fp16 on CUDA only, compile not on the CPU with --quick); a run
killed with SIGKILL at its first checkpoint and continued with --resume; `translate` and `eval
--beam 4` of the amp-auto run; a CTranslate2 export translated on the device (when ctranslate2
imports); one request to `serve` on 127.0.0.1; with two or more GPUs (or --ranks N) the GPU config
under torchrun. A failing row is marked FAIL with its error and the check goes on; rows that need a
failed one fail too. One table is printed, one JSON file written (--json); exit 1 if a row failed.

profile: each variant builds the Trainer `attn-mt train` builds and times its own step
(Trainer.train_step: collate, the prefetch thread into pinned memory on CUDA, the copy, forward,
backward, clipping, the update, the loss totals, metrics.jsonl every train.log_every steps). Without
--data the training set is drawn from scripts/profile_lengths.json (the joint histogram of source
and target lengths of configs/transformer-gpu.yaml's training split) with random ids past the
special tokens, batched by the same BucketTrainSet under data.max_tokens (and data.batch_shapes). A
variant is a train.kernels value (reference, cpu, auto), +compile (train.compile), +graphs
(compile_mode reduce-overhead), +step, +step-graphs, +step-capture (the whole step compiled,
train.compile_scope: step, modes default, reduce-overhead, cuda-graphs), or +capture (the whole step
captured as it runs, not compiled: train.capture_step, the GRU model's way onto a card). Each
compiles (or captures) every batch shape (compile_s), runs --warmup steps, --steps timed steps and
--trace-steps under torch.profiler. Printed per variant: ms a step, target tokens/s, MFU
(training/flops.py's one definition, its arithmetic printed, over attn_mt/machine.py's peak or
--peak-tflops), kernels a step, attention kernels a step by backend (flash, memory-efficient, cuDNN:
their kernel names in the trace), the GPU's busy share, host syncs a step, the top ops, the
attention's and loss's shares. A chrome trace a variant and profile.json go to --out; a failing
variant does not stop the others (exit 1).

checkup: `check --quick` (the amp-auto run and its test BLEU, fp16, SIGKILL and --resume, translate,
CTranslate2), `profile --variants reference` and, on CUDA, the GRU model's step as it runs and
captured (`profile configs/bahdanau-gpu.yaml --variants reference,reference+capture`) and `profile
--variants reference+step-capture --set data.batch_shapes=2`, each a subprocess given what is left
of --minutes (at most its cap, in PARTS); a part past it is stopped ("cut at the budget"). One table
goes to stdout and --out/checkup.md, with the targets (TARGETS) met or missed; on the CPU the parts
run at CPU sizes and the table says it holds no GPU figure.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import io
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
import traceback
import urllib.request
import warnings
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

    from attn_mt.config import Config
    from attn_mt.data.batch import Batch
    from attn_mt.data.bucketing import BucketTrainSet
    from attn_mt.data.dataset import NMTData
    from attn_mt.data.vocab import Vocab
    from attn_mt.training.flops import ModelFlops
    from attn_mt.training.trainer import Trainer

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = Path(__file__).resolve()
COMMAND_TIMEOUT_S = 900  # no single command of the check may run longer
# the packages `attn-mt train / translate / eval` import, by module name, with their pip names
REQUIRED = {
    "torch": "torch",
    "typer": "typer>=0.12",
    "yaml": "pyyaml>=6",
    "sacrebleu": "sacrebleu>=2.3",
    "tqdm": "tqdm>=4.60",
    "matplotlib": "matplotlib>=3.7",
    "numpy": "numpy>=1.24",
    "sentencepiece": "sentencepiece>=0.2",
    "filelock": "filelock>=3.12",
    "sentencex": "sentencex>=1.0",
    "babel": "babel>=2.12",
}
SERVING = {"fastapi": "fastapi>=0.110", "fastapi_offline": "fastapi-offline>=1.7", "uvicorn": "uvicorn>=0.29"}
"""What check's serve row imports besides; profile trains only and does not need them."""
CTRANSLATE2 = "ctranslate2>=4.5,<5"  # optional: the CTranslate2 row is skipped without it
OLDEST_TORCH = (2, 4)  # pyproject.toml's torch>=2.4


# ===== shared: the preflight, the machine, the device =====
def missing_packages(modules: dict[str, str]) -> list[str]:
    """One line per module of `modules` this Python cannot import: its name and the pip command for it."""
    lines = []
    for module, spec in modules.items():
        if importlib.util.find_spec(module) is None:
            lines.append(f"  {module}: {sys.executable} -m pip install '{spec}'")
            continue
        try:
            importlib.import_module(module)
        except ImportError as exc:  # installed, but a package it needs is not (fastapi without opentelemetry)
            lines.append(
                f"  {module}: installed but does not import ({exc}): {sys.executable} -m pip install '{spec}'"
            )
    return lines


def preflight(device: str, data: Path | None = None, corpus: bool = False) -> Path | None:
    """Exit with a clear message when a package, the GPU or (`corpus`) the corpus is missing; the corpus."""
    missing = missing_packages(REQUIRED | (SERVING if corpus else {}))
    if missing:
        hint = (
            " (for a GPU, a CUDA build: https://pytorch.org/get-started/locally/)"
            if any(line.startswith("  torch:") for line in missing)
            else ""
        )
        sys.exit(
            f"gpu.py: this Python ({sys.executable}) lacks what attn-mt needs{hint}:\n" + "\n".join(missing)
        )
    if importlib.util.find_spec("attn_mt") is None:
        sys.exit(
            f"gpu.py: this Python ({sys.executable}) does not import attn_mt: {sys.executable} -m pip "
            f"install --no-deps -e {ROOT}, or run `make gpu-check PYTHON={sys.executable}`"
        )
    import torch

    release = tuple(int(part) for part in torch.__version__.split("+")[0].split(".")[:2] if part.isdigit())
    if release < OLDEST_TORCH:
        sys.exit(
            f"gpu.py: attn-mt needs torch 2.4 or later (torch.is_autocast_enabled(device_type)), this "
            f"Python has {torch.__version__}: {sys.executable} -m pip install 'torch>=2.4'"
        )
    if device.startswith("cuda") and not torch.cuda.is_available():
        build = f"torch {torch.__version__}, CUDA build {torch.version.cuda or 'none'}"
        sys.exit(f"gpu.py: no CUDA device is visible ({build}); run with --device cpu for the CPU version")
    if not corpus:
        return None
    from attn_mt.data.corpus import resolve_corpus
    from attn_mt.errors import UserError

    try:
        return resolve_corpus(data, download=False)
    except UserError as exc:
        sys.exit(f"gpu.py: {exc}\n  (the check never downloads: pass --data FILE or set ATTN_MT_DATA)")


def driver_version() -> str | None:
    """The NVIDIA driver's version, from nvidia-smi (None without it)."""
    query = ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"]
    try:
        out = subprocess.run(query, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.split()[0] if out.returncode == 0 and out.stdout.strip() else None


def describe_machine(device: str) -> dict[str, Any]:
    """The device, card, driver and versions: the tables' titles and the JSON files' heads."""
    import torch

    facts: dict[str, Any] = {
        "device": device,
        "torch": torch.__version__,
        "python": platform.python_version(),
    }
    if device.startswith("cuda"):
        names = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
        facts.update(gpus=len(names), gpu=torch.cuda.get_device_name(torch.device(device)))
        facts.update(cuda=torch.version.cuda, driver=driver_version())
    else:
        facts.update(cpu=platform.processor() or platform.machine(), cores=os.cpu_count())
    return facts


def device_name(value: str) -> str:
    """--device: cpu, cuda or cuda:N."""
    kind, _, index = value.partition(":")
    if kind == "cpu" and not index or kind == "cuda" and (not index or index.isdigit()):
        return value
    raise argparse.ArgumentTypeError(f"{value!r} is not cpu, cuda or cuda:N")


def read_json(path: Path) -> dict[str, Any]:
    """A JSON file, or {} when there is none (a part cut or failed early)."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}


# ===== check: every part of attn-mt that a GPU changes, as attn-mt subprocesses =====
BOOK_CONFIGS = ("d2l_bahdanau", "d2l_transformer")
SENTENCE = "I'm home."
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
CHECK_COLUMNS = (
    *("check", "steps", "tokens/s", "steady tokens/s", "loss", "BLEU"),
    *("peak GPU MB", "AMP", "seconds", "result"),
)
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
    """One line of the check's table (and one entry of its JSON file)."""

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


def trained_row(name: str, run_dir: Path, seconds: float) -> Row:
    """The table row of a finished training run, from its run_summary.json (steps and a finite loss)."""
    summary = read_json(run_dir / "run_summary.json")
    if not summary:
        raise CheckError(f"{name}: no readable run_summary.json in {run_dir}")
    loss = summary.get("final_loss")
    if loss is None or not math.isfinite(loss) or not summary.get("steps"):
        raise CheckError(f"{name}: the run made {summary.get('steps')} steps with final loss {loss}")
    peak = summary.get("peak_gpu_mb")
    return Row(
        name,
        steps=summary["steps"],
        tokens_per_s=summary.get("tokens_per_s", "?"),
        steady_tokens_per_s=summary.get("steady_tokens_per_s") or "-",
        loss=loss,
        peak_gpu_mb="-" if peak is None else peak,
        amp=summary.get("amp", "?"),
        seconds=seconds,
    )


class Check:
    """The check's settings and the runs it has made; one method per row."""

    def __init__(self, args: argparse.Namespace, corpus: Path, out: Path):
        self.args, self.corpus, self.out = args, corpus, out
        self.cuda = args.device.startswith("cuda")
        self.config = args.config or ("transformer-gpu" if self.cuda else "transformer")

    def train_command(self, config: str, run_dir: Path, overrides: list[str]) -> list[str]:
        """`attn-mt train` of configs/CONFIG.yaml into `run_dir` with the check's device and corpus."""
        command = attn_mt(
            "train",
            str(ROOT / "configs" / f"{config}.yaml"),
            *("--run-dir", str(run_dir), "--device", self.args.device, "--data", str(self.corpus)),
            *("--quiet", "--overwrite"),
        )
        return command + [arg for override in overrides for arg in ("--set", override)]

    def transformer_overrides(self, *extra: str) -> list[str]:
        """On the CPU smaller sizes, then `extra` budget settings, then the user's --set."""
        return [*([] if self.cuda else CPU_SIZES), *extra, *self.args.overrides]

    def steps_budget(self, steps: int) -> list[str]:
        """A run of `steps` steps, its loss logged at the end, validated once."""
        return [f"train.max_steps={steps}", f"train.log_every={steps}", f"train.valid_every={steps}"]

    def auto_budget(self) -> list[str]:
        """The amp-auto run's budget: --minutes, and --steps when given."""
        budget = [f"train.time_limit_minutes={self.args.minutes}", "train.amp=auto"]
        return budget + (self.steps_budget(self.args.steps) if self.args.steps else [])

    def book(self, config: str) -> Row:
        """One of the book's runs for --epochs."""
        run_dir = self.out / config
        _, seconds = run(self.train_command(config, run_dir, [f"train.epochs={self.args.epochs}"]), config)
        return trained_row(config, run_dir, seconds)

    def auto(self) -> Row:
        """The GPU config with train.amp: auto for --minutes or --steps: the run the later rows use."""
        run_dir = self.out / "transformer"
        overrides = self.transformer_overrides(*self.auto_budget())
        _, seconds = run(self.train_command(self.config, run_dir, overrides), "amp auto")
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
            *("train.amp=auto", "train.epochs=10000", "train.time_limit_minutes=5"),
            *(f"train.log_every={every}", f"train.valid_every={every}", "train.checkpoint_minutes=0"),
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
        run([*resume, "--data", str(self.corpus), "--quiet", "--set", f"train.max_steps={target}"], "resume")
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
        scores = read_json(run_dir / "eval" / "test" / "scores.json")
        if "bleu" not in scores:
            raise CheckError("eval wrote no readable scores.json")
        return Row("eval --split test --beam 4", bleu=round(float(scores["bleu"]), 2), seconds=seconds)

    def ctranslate2(self) -> Row:
        """`export --format ctranslate2` of the amp-auto run, then `translate` of the folder on the device."""
        name = "CTranslate2 export + translate"
        if importlib.util.find_spec("ctranslate2") is None:
            note = f"ctranslate2 is not installed ({sys.executable} -m pip install '{CTRANSLATE2}')"
            return Row(name, result="skip", note=note)
        folder = self.out / "ctranslate2"
        shutil.rmtree(folder, ignore_errors=True)
        quantize = ["--quantize", "float16"] if self.cuda else []
        export = attn_mt(
            "export", str(self.out / "transformer"), str(folder), "--format", "ctranslate2", *quantize
        )
        _, export_s = run(export, "export")
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
        amp = "float16" if self.cuda else "-"
        return Row(f"CTranslate2: {translated.strip()[:35]}", amp=amp, seconds=export_s + seconds)

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
        run_dir, ranks = self.out / "torchrun", self.args.ranks
        command = self.train_command(self.config, run_dir, self.transformer_overrides(*self.auto_budget()))
        launcher = [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nproc_per_node",
            str(ranks),
        ]
        _, seconds = run([*launcher, "-m", "attn_mt", *command[3:]], f"torchrun with {ranks} processes")
        return trained_row(f"torchrun x{ranks} (amp auto)", run_dir, seconds)


def plan_rows(check: Check) -> list[tuple[str, str, Callable[[], Row], str | None, str | None]]:
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
    for _, name, body, needs, skip in plan_rows(check):
        started = time.perf_counter()
        if skip:
            rows.append(Row(name, result="skip", note=skip))
        elif needs in failed:
            failed.add(name)
            rows.append(Row(name, result="FAIL", note=f"needs the {needs} row, which failed"))
        else:
            try:
                rows.append(body())
            except Exception as exc:  # a row's failure, however it shows, is that row's result
                note = str(exc) if isinstance(exc, CheckError) else f"{type(exc).__name__}: {exc}"
                failed.add(name)
                rows.append(Row(name, result="FAIL", seconds=time.perf_counter() - started, note=note))
                print(f"gpu.py check: {name} FAILED: {note}", file=sys.stderr, flush=True)
    return rows


def print_check_table(rows: list[Row], machine: dict[str, Any]) -> None:
    """The results as one markdown table, the notes of failed and skipped rows below it."""
    where = (
        f"{machine.get('gpus')} x {machine.get('gpu')}, driver {machine.get('driver') or '?'}"
        if machine["device"].startswith("cuda")
        else f"cpu ({machine.get('cores')} cores)"
    )
    print(f"attn-mt check on {where}, torch {machine['torch']}")
    print("| " + " | ".join(CHECK_COLUMNS) + " |")
    print("|" + " --- |" * len(CHECK_COLUMNS))
    for row in rows:
        print("| " + " | ".join(row.cells()) + " |")
    for row in rows:
        if row.note:
            print(f"- {row.check} ({row.result}): {row.note.splitlines()[0]}")


def check_main(args: argparse.Namespace) -> int:
    """Preflight, run every row, print the table, write the JSON; 1 if any row failed."""
    corpus = preflight(args.device, args.data, corpus=True)
    if args.ranks is None:
        import torch

        gpus = torch.cuda.device_count() if args.device.startswith("cuda") else 0
        args.ranks = gpus if gpus >= 2 and not args.quick else 0
    out = args.out or Path(tempfile.mkdtemp(prefix="attn-mt-gpu-check-"))
    started = time.perf_counter()
    try:
        rows = run_rows(Check(args, corpus, out))
    finally:
        if args.out is None:
            shutil.rmtree(out, ignore_errors=True)
    machine = describe_machine(args.device)
    print_check_table(rows, machine)
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
    return 0 if passed else 1


# ===== profile: the trainer's own step, timed and traced =====
LENGTHS = ROOT / "scripts" / "profile_lengths.json"
ATTENTION_OPS = ("scaled_dot_product", "attention", "softmax_backward_data", "aten::_softmax")
LOSS_OPS = ("cross_entropy", "nll_loss", "log_softmax", "logsumexp", "TokenCrossEntropy")
# attention kernels by backend, from a substring of their CUDA kernel names (cuDNN's first)
ATTENTION_KERNELS = (
    ("cudnn", ("cudnn",)),
    ("flash", ("flash_fwd", "flash_bwd")),
    ("efficient", ("fmha_cutlass", "efficient_attention", "mem_efficient")),
)
TOP = 12  # ops listed in each table
KERNELS = ("reference", "cpu", "auto")  # train.kernels values
WHOLE_STEP_MODES = {"step": "default", "step-graphs": "reduce-overhead", "step-capture": "cuda-graphs"}
"""Variant suffixes that compile the whole step (train.compile_scope: step), and their train.compile_mode."""
CAPTURE = "capture"
"""The variant suffix that captures the step as it runs, not compiled (train.capture_step)."""


@dataclass
class Result:
    """One variant's figures (what profile.json holds for it)."""

    variant: str
    ok: bool = True
    error: str = ""
    ms_per_step: float = 0.0
    warmup_s: float = 0.0  # start-up: compiling every batch shape (compile_s) and the --warmup steps
    compile_s: float = 0.0
    tokens_per_s: float = 0.0
    tflops: float = 0.0
    mfu: float | None = None
    kernels_per_step: float | None = None
    gpu_busy: float | None = None
    host_syncs_per_step: float | None = None
    ops_per_step: float = 0.0
    real_share: float = 0.0  # real tokens over the cells of the batches as this variant pads them
    attention_kernels: dict[str, float] = field(default_factory=dict)  # backend -> its kernels a step
    attention_share: float = 0.0
    loss_share: float = 0.0
    top_device: list[dict[str, Any]] = field(default_factory=list)
    top_cpu: list[dict[str, Any]] = field(default_factory=list)
    trace: str = ""


def synthetic_vocab(size: int) -> Vocab:
    """A vocabulary of `size` ids: the special tokens (ids 0-3, as attn-mt numbers them), then pieces."""
    from attn_mt.data.vocab import BOS, EOS, PAD, UNK, Vocab

    specials = (UNK, PAD, BOS, EOS)
    return Vocab([*specials, *(f"piece{i}" for i in range(len(specials), size))])


def synthetic_train_set(
    max_tokens: int, max_len: int, vocab: Vocab, seed: int, pairs: int = 162_670
) -> BucketTrainSet:
    """`pairs` (source, target) pairs of lengths drawn from LENGTHS (<= max_len, <eos> counted) and random
    ids past the special tokens, batched as in training (data/bucketing.py's plan and collate)."""
    import numpy as np

    from attn_mt.data.bucketing import BucketTrainSet
    from attn_mt.data.trainset import TokenSequences

    table = np.asarray(json.loads(LENGTHS.read_text())["joint"], dtype=np.int64)  # (K, 3)
    table = table[(table[:, 0] <= max_len) & (table[:, 1] <= max_len)]
    picks = np.random.default_rng(seed).choice(len(table), size=pairs, p=table[:, 2] / table[:, 2].sum())
    rng = np.random.default_rng(seed + 1)

    def sequences(lengths: np.ndarray) -> TokenSequences:
        offsets = np.zeros(len(lengths) + 1, dtype=np.int64)
        np.cumsum(lengths - 1, out=offsets[1:])
        ids = rng.integers(4, len(vocab), size=int(offsets[-1]), dtype=np.int32)
        return TokenSequences.from_offsets(ids, offsets)

    src, tgt = sequences(table[picks, 0]), sequences(table[picks, 1])
    return BucketTrainSet(src, tgt, max_tokens, vocab.pad_id, vocab.eos_id)


def step_flops(counts: ModelFlops | None, batches: list[Batch]) -> tuple[float, str]:
    """Training FLOPs of the batches' real tokens (training/flops.py, MFU's one definition) and the sum."""
    if counts is None:
        return 0.0, "n/a: MFU is defined for the Transformer (training/flops.py)"
    total = sum(counts.step(b.src_lens, b.tgt_lens) for b in batches)
    src = sum(int(b.src_lens.sum()) for b in batches)
    tgt = sum(int(b.tgt_lens.sum()) for b in batches)
    encoder, decoder, output = (part / 1e6 for part in (counts.encoder, counts.decoder, counts.output))
    text = (
        f"6 x ({encoder:.2f} M encoder weights x {src:,} source tokens + "
        f"({decoder:.2f} M decoder + {output:.2f} M output) x {tgt:,} target tokens)"
        f" + 12 x H {counts.hidden} x (L {counts.encoder_layers} x S^2"
        f" + L {counts.decoder_layers} x (T^2 + S T))"
        f" query-key pairs = {total / 1e12:.2f} TFLOP over {len(batches)} steps, "
        f"{total / max(tgt, 1) / 1e6:.0f} MFLOP a target token"
    )
    return total, text


def card_peak(device: torch.device, given: float | None) -> tuple[float | None, str]:
    """The device's dense bf16 peak in TFLOP/s and its name: --peak-tflops, else PEAK_TFLOPS, else None."""
    import torch

    from attn_mt.training.flops import card_peak_tflops

    name = torch.cuda.get_device_name(device) if device.type == "cuda" else device.type
    return (given or card_peak_tflops(device)), name


def sdpa_backend(name: str) -> contextlib.AbstractContextManager:
    """torch's scaled_dot_product_attention restricted to one backend, or as torch chooses (`auto`)."""
    if name == "auto":
        return contextlib.nullcontext()
    from torch.nn.attention import SDPBackend, sdpa_kernel

    backends = {
        "flash": SDPBackend.FLASH_ATTENTION,
        "efficient": SDPBackend.EFFICIENT_ATTENTION,
        "cudnn": SDPBackend.CUDNN_ATTENTION,
        "math": SDPBackend.MATH,
    }
    return sdpa_kernel(backends[name])


def profile_data(cfg: Config, args: argparse.Namespace) -> NMTData:
    """The variants' training set: --data's (with its vocabularies), else the synthetic one; no valid set."""
    from attn_mt.data.bucketing import fit_shapes
    from attn_mt.data.dataset import NMTData, load_data

    if args.data:
        data = load_data(cfg.data, str(args.data))
        return NMTData(data.src_vocab, data.tgt_vocab, data.train)
    vocab = synthetic_vocab(args.vocab or cfg.data.vocab_size)
    train = synthetic_train_set(cfg.data.max_tokens, cfg.data.max_len, vocab, args.seed)
    if cfg.data.batch_shapes:  # --set data.batch_shapes=K: the fixed shapes a run fits to these lengths
        src_lens, tgt_lens = train.src.lengths + 1, train.tgt.lengths + 1
        train.shapes = fit_shapes(src_lens, tgt_lens, cfg.data.max_tokens, cfg.data.batch_shapes)
    return NMTData(vocab, vocab, train)


def profile_trainer(variant: str, args: argparse.Namespace, device: torch.device, data: NMTData) -> Trainer:
    """The Trainer `attn-mt train` builds for this variant's kernels and compile settings, on `data`:
    quiet, validating nothing, its run directory under --out (metrics.jsonl only)."""
    import torch

    from attn_mt.config import load_config
    from attn_mt.run.run_dir import RunPaths
    from attn_mt.training.trainer import Trainer

    kernels, _, extra = variant.partition("+")
    settings = [f"train.kernels={kernels}"]
    if extra == CAPTURE:
        settings.append("train.capture_step=true")
    elif extra or args.compile:
        settings.append("train.compile=true")
    mode = "reduce-overhead" if extra == "graphs" else args.compile_mode
    if extra in WHOLE_STEP_MODES:  # the whole step compiled (training/whole_step.py)
        settings.append("train.compile_scope=step")
        mode = WHOLE_STEP_MODES[extra]
    if mode:
        settings.append(f"train.compile_mode={mode}")
    cfg = load_config(args.config, [*args.overrides, *settings])
    root = args.out / variant.replace("+", "-")
    root.mkdir(parents=True, exist_ok=True)
    (root / "metrics.jsonl").unlink(missing_ok=True)
    torch.manual_seed(cfg.train.seed)  # as training/launch.py seeds before building the trainer
    return Trainer(cfg, RunPaths(root), data, device, quiet=True)


class StepDriver:
    """Runs the trainer's own steps (Trainer.train_step) on its epoch feed, keeping each step's batches."""

    def __init__(self, trainer: Trainer):
        from attn_mt.training.progress_display import training_display

        self.trainer = trainer
        self.trainer.start()  # amp settled, every batch shape compiled (train.compile), clocks started
        self.plan = trainer.data.train.plan(trainer.progress.epoch, trainer.cfg.train.seed)
        self.bar = training_display(trainer.cfg.train, len(self.plan), trainer.progress, quiet=True)
        self.feed_context = trainer.epoch_feed(self.plan)  # the prefetch thread on CUDA, as in fit
        self.feed = self.feed_context.__enter__()
        self.batches: list[list[Batch]] = []  # each step's batches, as the feed collated them

    def steps(self, count: int) -> list[list[Batch]]:
        """Train `count` steps; their batches."""
        if self.trainer.progress.batch_in_epoch + count * self.trainer.cfg.train.accum_steps > len(self.plan):
            raise ValueError(f"the epoch has {len(self.plan)} batches: too few for the steps asked")
        start = len(self.batches)
        for _ in range(count):
            self.trainer.train_step(self.recorded(), self.bar, False, 0.0)
        return self.batches[start:]

    def recorded(self) -> Any:
        """The feed, keeping the step's batches."""
        batches = next(self.feed)
        self.batches.append(batches)
        yield batches

    def close(self) -> None:
        """Stop the prefetch thread."""
        self.feed_context.__exit__(None, None, None)


def wait(device: torch.device) -> None:
    """Until the device has finished what it was given."""
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize(device)


def count_syncs(driver: StepDriver, steps: int) -> float | None:
    """Host syncs a step over `steps` trainer steps, by torch.cuda's sync debug mode (None off CUDA)."""
    import torch

    device = driver.trainer.device
    if device.type != "cuda":
        return None
    wait(device)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        try:
            driver.steps(steps)
        finally:
            torch.cuda.set_sync_debug_mode("default")
    wait(device)
    return len([w for w in caught if "synchroniz" in str(w.message)]) / steps


def merged_length(intervals: list[tuple[float, float]]) -> float:
    """The total length of the union of (start, end) intervals."""
    total, end = 0.0, -math.inf
    for start, stop in sorted(intervals):
        if stop > end:
            total += stop - max(start, end)
            end = stop
    return total


def trace_figures(trace: dict, steps: int) -> tuple[float | None, float | None]:
    """Kernels a step and the GPU's busy share of the profiled steps' wall time, from a chrome trace."""
    events = [e for e in trace.get("traceEvents", []) if e.get("ph") == "X"]
    kernels = [(e["ts"], e["ts"] + e["dur"]) for e in events if e.get("cat") == "kernel"]
    if not kernels:
        return None, None
    marks = [
        (e["ts"], e["ts"] + e["dur"]) for e in events if str(e.get("name", "")).startswith("ProfilerStep#")
    ]
    start = min(s for s, _ in marks) if marks else min(s for s, _ in kernels)
    stop = max(max(e for _, e in kernels), max(e for _, e in marks) if marks else 0.0)
    return len(kernels) / steps, merged_length(kernels) / max(stop - start, 1e-9)


def attention_kernels(trace: dict, steps: int) -> dict[str, float]:
    """Attention kernels a step by backend (ATTENTION_KERNELS), from a chrome trace's kernel names."""
    counts = {backend: 0 for backend, _ in ATTENTION_KERNELS}
    for event in trace.get("traceEvents", []):
        if event.get("ph") == "X" and event.get("cat") == "kernel":
            name = str(event.get("name", ""))
            backend = next((b for b, parts in ATTENTION_KERNELS if any(p in name for p in parts)), None)
            if backend:
                counts[backend] += 1
    return {backend: count / steps for backend, count in counts.items()}


def op_tables(prof: Any, steps: int, on_gpu: bool) -> dict[str, Any]:
    """The top ops by self device and self CPU time (ms a step), ops a step, attention's and loss's shares:
    of all kernels' time on a GPU, of all ops' self CPU time on the CPU."""
    import torch

    rows = [a for a in prof.key_averages() if not a.key.startswith("ProfilerStep")]
    ops = [a for a in rows if a.device_type == torch.autograd.DeviceType.CPU]
    kernels = [a for a in rows if a.device_type != torch.autograd.DeviceType.CPU]

    def device_us(a: Any) -> float:
        return float(getattr(a, "self_device_time_total", 0.0))

    def cpu_us(a: Any) -> float:
        return float(a.self_cpu_time_total)

    def table(time_of: Any, total: float) -> list[dict[str, Any]]:
        ranked = sorted(ops, key=time_of, reverse=True)[:TOP]
        return [
            {
                "op": a.key[:70],
                "ms_per_step": round(time_of(a) / 1000 / steps, 3),
                "share": round(time_of(a) / total, 4),
                "calls_per_step": round(a.count / steps, 1),
            }
            for a in ranked
            if time_of(a) > 0
        ]

    time_of = device_us if on_gpu else cpu_us
    total = (sum(device_us(a) for a in kernels) if on_gpu else sum(cpu_us(a) for a in ops)) or 1.0

    def share(names: tuple[str, ...]) -> float:
        return round(sum(time_of(a) for a in ops if any(n in a.key for n in names)) / total, 4)

    return {
        "top_device": table(device_us, total) if on_gpu else [],
        "top_cpu": table(cpu_us, sum(cpu_us(a) for a in ops) or 1.0),
        "ops_per_step": round(sum(a.count for a in ops if a.key.startswith("aten::")) / steps, 1),
        "attention_share": share(ATTENTION_OPS),
        "loss_share": share(LOSS_OPS),
    }


def profile_variant(variant: str, args: argparse.Namespace, data: NMTData, flops: float) -> Result:
    """Warm up, time and profile one variant: the trainer's own steps on `data`'s training set."""
    import torch

    from attn_mt.training.flops import mfu

    result = Result(variant)
    device = torch.device(args.device)
    trainer = profile_trainer(variant, args, device, data)
    with sdpa_backend(args.attention_backend):
        started = time.perf_counter()
        driver = StepDriver(trainer)  # compiles every batch shape first under train.compile
        try:
            driver.steps(args.warmup)
            wait(device)
            result.warmup_s, result.compile_s = time.perf_counter() - started, trainer.compile_s
            started = time.perf_counter()
            timed = driver.steps(args.steps)
            wait(device)
            seconds = time.perf_counter() - started
            result.host_syncs_per_step = count_syncs(driver, min(5, args.steps))
            activities = [torch.profiler.ProfilerActivity.CPU]
            if device.type == "cuda":
                activities.append(torch.profiler.ProfilerActivity.CUDA)
            wait(device)
            with torch.profiler.profile(activities=activities) as prof:
                for _ in range(args.trace_steps):
                    driver.steps(1)
                    prof.step()
                wait(device)
        finally:
            driver.close()
    batches = [b for step in timed for b in step]
    cells = sum(b.src.numel() + b.tgt.numel() for b in batches)
    result.real_share = sum(int(b.src_lens.sum() + b.tgt_lens.sum()) for b in batches) / cells
    result.ms_per_step = 1000 * seconds / len(timed)
    result.tokens_per_s = sum(b.num_tgt_tokens for b in batches) / seconds
    result.tflops = flops / seconds / 1e12
    result.mfu = mfu(flops, seconds, card_peak(device, args.peak_tflops)[0])
    trace_path = args.out / f"{variant.replace('+', '-')}.trace.json"
    prof.export_chrome_trace(str(trace_path))
    result.trace = str(trace_path)
    trace = json.loads(trace_path.read_text())
    result.kernels_per_step, result.gpu_busy = trace_figures(trace, args.trace_steps)
    result.attention_kernels = attention_kernels(trace, args.trace_steps) if device.type == "cuda" else {}
    for key, value in op_tables(prof, args.trace_steps, device.type == "cuda").items():
        setattr(result, key, value)
    return result


def show(result: Result, peak_name: str) -> None:
    """Print one variant's figures."""
    print(f"\n== {result.variant}")
    if not result.ok:
        print(f"FAILED: {result.error}")
        return

    def maybe(value: float | None, text: str) -> str:
        return "n/a" if value is None else text.format(value)

    print(
        f"{result.ms_per_step:.2f} ms a step, {result.tokens_per_s:,.0f} target tokens/s, "
        f"real tokens {result.real_share:.1%} of the cells, {result.tflops:.2f} TFLOP/s, "
        f"MFU {maybe(result.mfu, '{:.1%}')} ({peak_name}); "
        f"warm-up {result.warmup_s:.1f} s (compiling {result.compile_s:.1f} s)"
    )
    print(
        f"kernels a step {maybe(result.kernels_per_step, '{:.0f}')}, "
        f"GPU busy {maybe(result.gpu_busy, '{:.1%}')}, "
        f"host syncs a step {maybe(result.host_syncs_per_step, '{:.1f}')}, "
        f"aten ops a step {result.ops_per_step:.0f}, "
        f"attention {result.attention_share:.1%} and loss {result.loss_share:.1%} of the op time"
    )
    if result.attention_kernels:
        taken = ", ".join(f"{backend} {count:.0f}" for backend, count in result.attention_kernels.items())
        print(f"attention kernels a step: {taken}")
    for title, rows in (("self device time", result.top_device), ("self CPU time", result.top_cpu)):
        if rows:
            print(f"top ops by {title} (ms a step, share, calls a step):")
            for row in rows:
                figures = f"{row['ms_per_step']:9.3f}  {row['share']:6.1%}  {row['calls_per_step']:7.1f}"
                print(f"  {figures}  {row['op']}")
    print(f"trace: {result.trace}")


def profile_main(args: argparse.Namespace) -> int:
    """Profile every variant; print and write the figures; 1 if a variant failed, 2 if the epoch is short."""
    preflight(args.device)
    import torch

    from attn_mt.config import load_config
    from attn_mt.models.build import build_model
    from attn_mt.run.device import setup_device
    from attn_mt.training.flops import ModelFlops

    if isinstance(sys.stdout, io.TextIOWrapper):
        sys.stdout.reconfigure(line_buffering=True)  # each line as it comes, also into a pipe (tee)
    cfg = load_config(args.config, args.overrides)
    device = torch.device(args.device)
    setup_device(device, cfg.train.threads, cfg.train.tf32)  # as training sets it up (TF32, SDPA backends)
    data = profile_data(cfg, args)
    total = args.warmup + args.steps + args.trace_steps
    plan = data.train.plan(0, cfg.train.seed)
    if len(plan) < total:
        print(
            f"the training set's epoch has {len(plan)} batches, fewer than the {total} steps asked "
            f"(--warmup {args.warmup} + --steps {args.steps} + --trace-steps {args.trace_steps}): "
            "the steps must fit in one epoch",
            file=sys.stderr,
        )
        return 2
    timed = [data.train.collate(ix) for ix in plan[args.warmup : args.warmup + args.steps]]  # accum_steps 1
    flops, arithmetic = step_flops(
        ModelFlops.of(build_model(cfg.model, len(data.src_vocab), len(data.tgt_vocab))), timed
    )
    peak, name = card_peak(device, args.peak_tflops)
    cells = sum(b.src.numel() + b.tgt.numel() for b in timed)
    real = sum(int(b.src_lens.sum() + b.tgt_lens.sum()) for b in timed)
    tokens = sum(b.num_tgt_tokens for b in timed) / len(timed)
    rows = sum(len(b.src) for b in timed) / len(timed)
    print(
        f"{args.config} on {name}, torch {torch.__version__}, amp {cfg.train.amp}, "
        f"peak {peak or 'n/a'} TFLOP/s"
    )
    print(
        f"{len(timed)} timed steps of {tokens:,.0f} target tokens and {rows:,.0f} rows; "
        f"real tokens {real / cells:.1%} of the padded cells"
    )
    print(f"FLOPs: {arithmetic}")
    summary = describe_machine(args.device)
    summary.update(config=args.config, peak_tflops=peak, flops_per_step=flops / len(timed))
    summary.update(flops_arithmetic=arithmetic, warmup=args.warmup, steps=args.steps, variants=[])
    args.out.mkdir(parents=True, exist_ok=True)
    results = []
    for variant in args.variants:
        try:
            result = profile_variant(variant, args, data, flops)
        except Exception as error:  # one variant's failure (an unsupported backend, memory) is its row
            traceback.print_exc()
            result = Result(variant, ok=False, error=f"{type(error).__name__}: {error}".splitlines()[0][:300])
        results.append(result)
        show(result, name)
        summary["variants"].append(vars(result))
        # after every variant: a run stopped by its time limit keeps what it measured
        (args.out / "profile.json").write_text(json.dumps(summary, indent=1))
        if device.type == "cuda":
            torch.cuda.empty_cache()
    print(f"\nfigures in {args.out / 'profile.json'}")
    return 0 if all(r.ok for r in results) else 1


# ===== checkup: check --quick and the step's profiles within one budget =====
BUDGET_MINUTES = 9.0
CHECK_ROWS = "auto,fp16,resume,translate,eval,ctranslate2"
PARTS = {
    "check": 300,
    "profile-eager": 60,
    "profile-gru": 90,
    "profile-step": 240,
}  # each part's cap in seconds
TARGETS = {"steady_tokens_per_s": 1.3e6, "gpu_busy": 0.9, "host_syncs_per_step": 0.0, "bleu": 53.5}
CHECKUP_COLUMNS = (
    "part",
    "row",
    "steps",
    "steady tokens/s",
    "ms a step",
    "BLEU",
    "GPU busy",
    "host syncs",
    "result",
)


@dataclass
class Part:
    """One subprocess of the check-up."""

    name: str
    command: list[str]
    result: str = "not run"  # pass, FAIL, cut at the budget, not run
    seconds: float = 0.0

    @property
    def cap_s(self) -> float:
        """At most this many seconds of the budget."""
        return PARTS[self.name]


def plan_parts(args: argparse.Namespace) -> list[Part]:
    """The parts and their commands for args.device, in their order (only --parts' when given)."""
    gpu, out, cuda = [sys.executable, str(SCRIPT)], args.out, args.device.startswith("cuda")
    data = ["--data", str(args.data)] if args.data else []
    check = [*gpu, "check", "--device", args.device, "--quick", *data, "--rows", CHECK_ROWS]
    check += [arg for setting in args.overrides for arg in ("--set", setting)]
    check += ["--json", str(out / "check.json")] + ([] if cuda else ["--steps", "10"])
    if cuda:
        profile = [*gpu, "profile", str(ROOT / "configs" / "transformer-gpu.yaml"), "--device", args.device]
        profile += ["--warmup", "10", "--steps", "30", "--trace-steps", "2"]
    else:
        profile = [*gpu, "profile", str(ROOT / "configs" / "tiny.yaml"), "--device", "cpu", "--vocab", "200"]
        profile += ["--warmup", "2", "--steps", "5", "--trace-steps", "1", "--set", "train.threads=1"]
    parts = [
        Part("check", check),
        Part("profile-eager", [*profile, "--variants", "reference", "--out", str(out / "profile-eager")]),
    ]
    if cuda:
        # the GRU model's step as it runs and captured whole (train.capture_step), 16 shapes, no compiling
        gru = [*gpu, "profile", str(ROOT / "configs" / "bahdanau-gpu.yaml"), "--device", args.device]
        gru += [
            "--warmup",
            "5",
            "--steps",
            "20",
            "--trace-steps",
            "1",
            "--variants",
            f"reference,reference+{CAPTURE}",
        ]
        parts.append(Part("profile-gru", [*gru, "--out", str(out / "profile-gru")]))
        # two static shapes: two graphs sharing one pool, compiled in under a minute (docs/gpu.md)
        captured = ["--variants", "reference+step-capture", "--set", "data.batch_shapes=2"]
        captured += ["--set", "train.compile_shapes=static"]
        parts.append(Part("profile-step", [*profile, *captured, "--out", str(out / "profile-step")]))
    return [part for part in parts if not args.parts or part.name in args.parts]


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


def cell(value: Any, text: str = "{}") -> str:
    """A table cell: '-' for a missing value."""
    return "-" if value in (None, "-", "") else text.format(value)


def table_rows(parts: list[Part], out: Path) -> list[list[str]]:
    """One table row per check row and per profiled variant, or one per part that left no figures."""
    rows = []
    for part in parts:
        found = []
        for row in read_json(out / "check.json").get("rows", []) if part.name == "check" else []:
            if row["result"] != "skip" or "--rows" not in row.get("note", ""):
                steady = cell(row.get("steady_tokens_per_s"), "{:,.0f}")
                found.append(
                    [
                        part.name,
                        row["check"],
                        cell(row.get("steps")),
                        steady,
                        "-",
                        cell(row.get("bleu")),
                        "-",
                        "-",
                        row["result"],
                    ]
                )
        for variant in (
            [] if part.name == "check" else read_json(out / part.name / "profile.json").get("variants", [])
        ):
            found.append(
                [
                    *(part.name, variant["variant"], "-", cell(variant.get("tokens_per_s"), "{:,.0f}")),
                    *(
                        cell(variant.get("ms_per_step"), "{:.2f}"),
                        "-",
                        cell(variant.get("gpu_busy"), "{:.0%}"),
                    ),
                    cell(variant.get("host_syncs_per_step"), "{:.1f}"),
                    "pass" if variant["ok"] else f"FAIL: {variant['error'][:60]}",
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
    busy = [v["gpu_busy"] for v in profiled if v.get("gpu_busy") is not None]
    syncs = [v["host_syncs_per_step"] for v in profiled if v.get("host_syncs_per_step") is not None]
    measured = {
        "steady_tokens_per_s": next(
            (r["steady_tokens_per_s"] for r in rows if "amp auto" in r["check"]), None
        ),
        "bleu": next((r["bleu"] for r in rows if r["check"].startswith("eval")), None),
        "gpu_busy": max(busy, default=None),
        "host_syncs_per_step": min(syncs, default=None),
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
    cuda = args.device.startswith("cuda")
    where = (
        f"{machine.get('gpu', '?')}, driver {machine.get('driver') or '?'}, CUDA {machine.get('cuda', '?')}"
        if cuda
        else "the CPU: a smoke run of the check-up, no GPU figure"
    )
    lines = [
        f"attn-mt GPU check-up on {where}, torch {machine.get('torch', '?')}, "
        f"{time.strftime('%Y-%m-%d %H:%M')}, {seconds:.0f} s of a {args.minutes:g}-minute budget",
        f"command: {' '.join(['python3', 'scripts/gpu.py', *args.argv])}",
        "",
        "| " + " | ".join(CHECKUP_COLUMNS) + " |",
        "|" + " --- |" * len(CHECKUP_COLUMNS),
        *("| " + " | ".join(row) + " |" for row in table_rows(parts, args.out)),
        "",
        "parts: " + "; ".join(f"{p.name} {p.result} ({p.seconds:.0f} s)" for p in parts),
    ]
    if cuda:
        lines += ["", "targets (docs/gpu.md):", *targets(args.out)]
    return "\n".join(lines) + "\n"


def checkup_main(args: argparse.Namespace) -> int:
    """Run the parts within the budget, print and write the table; 1 if a part failed or was cut."""
    parts = plan_parts(args)
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


# ===== the command line =====
def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line: a subcommand and its options, each budget chosen for the device where not given."""
    raw = argparse.RawDescriptionHelpFormatter
    parser = argparse.ArgumentParser(prog="gpu.py", description=__doc__, formatter_class=raw)
    commands = parser.add_subparsers(dest="command", required=True)
    shared = argparse.ArgumentParser(add_help=False)
    shared.add_argument(
        "--device", default="cuda", type=device_name, help="cuda, cuda:N or cpu (default cuda)"
    )
    shared.add_argument(
        "--data", type=Path, help="the corpus (default: $ATTN_MT_DATA, then the cache; never a download)"
    )
    shared.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a config override (repeatable)",
    )

    check = commands.add_parser(
        "check", parents=[shared], help="every part of attn-mt a GPU changes, one row each"
    )
    check.add_argument(
        "--quick", action="store_true", help="the rows in about 8 minutes of one GPU (docs/gpu.md)"
    )
    check.add_argument(
        "--config",
        help="the transformer rows' config in configs/ (default: transformer-gpu, cpu: transformer)",
    )
    check.add_argument("--epochs", type=int, help="epochs of each book config (cuda: 20, quick 5; cpu: 1)")
    check.add_argument(
        "--minutes", type=float, help="the amp-auto run's time limit (cuda: 5, quick 2; cpu: 0)"
    )
    check.add_argument("--steps", type=int, help="the amp-auto run's step limit (cuda: 0; cpu: 20)")
    check.add_argument(
        "--short-steps", type=int, help="steps of the fp16 and compile runs (cuda: 300; cpu: 10)"
    )
    check.add_argument(
        "--resume-every", type=int, help="the killed run's checkpoint interval (cuda: 100; cpu: 5)"
    )
    check.add_argument(
        "--ranks", type=int, help="torchrun processes (default: the GPUs if 2 or more, never with --quick)"
    )
    check.add_argument(
        "--rows",
        help=f"only these rows, comma-separated, of {', '.join(ROW_KEYS)} "
        "(translate, eval, ctranslate2 and serve use auto's run)",
    )
    check.add_argument("--out", type=Path, help="keep the runs here (default: a temporary folder)")
    check.add_argument(
        "--json",
        type=Path,
        default=ROOT / "runs" / "gpu_check.json",
        help="the results (default: runs/gpu_check.json)",
    )

    profile = commands.add_parser(
        "profile", parents=[shared], help="time and trace the trainer's own step, per variant"
    )
    profile.add_argument("config", nargs="?", default=str(ROOT / "configs" / "transformer-gpu.yaml"))
    profile.add_argument(
        "--variants",
        default="reference,reference+compile",
        help="train.kernels values (reference, cpu, auto), each alone or +compile, +graphs, +step, "
        "+step-graphs, +step-capture or +capture (train.capture_step: the step captured, not compiled)",
    )
    profile.add_argument("--compile", action="store_true", help="compile every variant (train.compile)")
    profile.add_argument("--compile-mode", default=None, help="torch.compile mode, e.g. reduce-overhead")
    profile.add_argument(
        "--attention-backend",
        default="auto",
        choices=("auto", "flash", "efficient", "cudnn", "math"),
        help="pin SDPA's kernel; flash and cudnn refuse the masked calls and dropout 0.2 (docs/gpu.md)",
    )
    profile.add_argument("--warmup", type=int, default=20, help="untimed steps first (default 20)")
    profile.add_argument("--steps", type=int, default=40, help="timed steps (default 40)")
    profile.add_argument("--trace-steps", type=int, default=3, help="profiled steps (default 3)")
    profile.add_argument("--vocab", type=int, help="synthetic vocabulary size (default data.vocab_size)")
    profile.add_argument("--peak-tflops", type=float, help="the device's peak TFLOP/s, for MFU off the table")
    profile.add_argument("--seed", type=int, default=0, help="seed of the drawn batches")
    profile.add_argument(
        "--out", type=Path, default=ROOT / "runs" / "profile", help="traces and profile.json"
    )

    checkup = commands.add_parser(
        "checkup", parents=[shared], help="check --quick and the step's profiles in one budget"
    )
    checkup.add_argument("--minutes", type=float, default=BUDGET_MINUTES, help="the whole budget (default 9)")
    checkup.add_argument("--parts", help=f"run only these parts, comma-separated ({', '.join(PARTS)})")
    checkup.add_argument(
        "--out", type=Path, default=ROOT / "runs" / "gpu_checkup", help="the table, logs and JSON"
    )
    checkup.add_argument(
        "--dry-run", action="store_true", help="print the parts' commands and caps; run nothing"
    )

    args = parser.parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)
    {"check": finish_check_args, "profile": finish_profile_args, "checkup": finish_checkup_args}[
        args.command
    ](commands.choices[args.command], args)
    return args


def finish_check_args(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """--rows as a list; each budget not given chosen for the device and --quick."""
    if args.rows:
        args.rows = [key.strip() for key in args.rows.split(",") if key.strip()]
        unknown = sorted(set(args.rows) - set(ROW_KEYS))
        if unknown:
            parser.error(f"--rows: {', '.join(unknown)} not among {', '.join(ROW_KEYS)}")
    cuda = args.device.startswith("cuda")
    for key, full, quick, cpu in (
        ("epochs", 20, 5, 1),
        ("minutes", 5.0, 2.0, 0.0),
        ("steps", 0, 0, 20),
        ("short_steps", 300, 300, 10),
        ("resume_every", 100, 100, 5),
    ):
        if getattr(args, key) is None:
            setattr(args, key, (quick if args.quick else full) if cuda else cpu)


def finish_profile_args(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """--variants as a list, each a known kernels value and suffix; the step counts in range."""
    args.variants = [v.strip() for v in args.variants.split(",") if v.strip()]
    for variant in args.variants:
        kernels, _, extra = variant.partition("+")
        if kernels not in KERNELS or extra not in ("", "compile", "graphs", *WHOLE_STEP_MODES, CAPTURE):
            parser.error(
                f"--variants: {variant!r} is not one of {', '.join(KERNELS)} "
                f"(+compile, +graphs, +{', +'.join(WHOLE_STEP_MODES)}, +{CAPTURE})"
            )
    if args.warmup < 0 or args.steps < 1 or args.trace_steps < 1:
        parser.error("--steps and --trace-steps must be at least 1, --warmup at least 0")


def finish_checkup_args(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """--parts as a list of known parts."""
    args.parts = [p.strip() for p in args.parts.split(",") if p.strip()] if args.parts else None
    unknown = sorted(set(args.parts or ()) - set(PARTS))
    if unknown:
        parser.error(f"--parts: {', '.join(unknown)} not among {', '.join(PARTS)}")


def main(argv: list[str] | None = None) -> int:
    """Run the subcommand; its exit status."""
    args = parse_args(argv)
    return {"check": check_main, "profile": profile_main, "checkup": checkup_main}[args.command](args)


if __name__ == "__main__":
    sys.exit(main())
