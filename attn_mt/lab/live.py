"""Lab panel "train live": one of the book's runs trained from the lab, in a process of its own.

A start runs `attn-mt train configs/d2l_MODEL.yaml` (Bahdanau or Transformer, the learner's seed) as a
child process into a folder the lab owns, with its timeline on, so the "watch it learn" panel follows
it as the points are written. One training at a time: a second start while one runs is refused. Each
is bounded: the trainer's own time limit (`train.time_limit_minutes`), a kill when it overruns that by
a minute, and an address-space limit on the child. Stop sends SIGTERM (the trainer finishes its step,
saves and exits; a second signal ends it at once), and the lab stops a training still running when it
stops itself. A finished run is opened and added to the lab's runs, so every other panel can use it.
A training that fails says why: the signal that killed it, and the `attn-mt: error:` lines of its log
(else the log's last lines) are the status's `reason`.
"""

from __future__ import annotations

import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from attn_mt.config import SHIPPED_CONFIGS
from attn_mt.i18n import N_, _
from attn_mt.lab.inputs import LabError, choice, whole
from attn_mt.lab.shown import answer, code, number
from attn_mt.lab.timeline import attention_at, heatmap, loss_plot
from attn_mt.run.open import open_model
from attn_mt.run.opened import LoadedRun
from attn_mt.run.run_dir import read_metrics
from attn_mt.training.launch import train
from attn_mt.training.timeline import RecordedTimeline, read_timeline

CONFIGS = {"gru_bahdanau": "d2l_bahdanau.yaml", "transformer": "d2l_transformer.yaml"}
TIME_LIMIT_MINUTES = 10.0  # the book's runs take under a minute on two idle cores
OVERRUN_S = 60.0  # past the time limit, the process is killed
MEMORY_LIMIT_BYTES = 8 << 30  # the child's address space (a book run's stays under 2 GiB resident)
STOP_WAIT_S = 10.0
REASON_LINES = 5  # lines of a failed training's log shown as its reason
REASON_BYTES = 1 << 16  # how much of the log's end is read for them
ENDED = {  # a training that no longer runs, in words (describe)
    "finished": N_("{name}: finished, epoch {done} of {epochs}, {elapsed} s"),
    "stopped": N_("{name}: stopped, epoch {done} of {epochs}, {elapsed} s"),
    "failed": N_("{name}: failed, epoch {done} of {epochs}, {elapsed} s: {reason}"),
}


def limit_memory() -> None:
    """In the child, before it starts Python: cap its address space."""
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT_BYTES, MEMORY_LIMIT_BYTES))


@dataclass
class Training:
    """The training the lab started last."""

    name: str
    model: str
    run_dir: Path
    epochs: int
    process: subprocess.Popen
    started: float  # time.monotonic() at the start
    log: Path  # what the training printed (its stdout and stderr)
    stopped: bool = False  # the learner stopped it
    pace_from: tuple[float, int] | None = None  # (time.monotonic(), epochs done) when the lab first saw one


class LiveTrainer:
    """Starts, follows and stops the lab's one training at a time (see the module docstring)."""

    def __init__(self, runs: dict[str, LoadedRun], listing: dict[str, Any], folder: Path | None = None):
        self.runs, self.listing = runs, listing
        self.folder = folder or Path(tempfile.mkdtemp(prefix="attn-mt-lab-runs-"))
        self.current: Training | None = None
        self.lock = threading.Lock()

    def running(self) -> bool:
        """Whether the last training's process is still alive."""
        return self.current is not None and self.current.process.poll() is None

    def start(self, model: str, seed: int, epochs: int) -> None:
        """Start the book's `model` config with `seed` for `epochs` epochs; refused while one runs."""
        with self.lock:
            if self.running():
                assert self.current is not None
                raise LabError(
                    _("{name} is still training: stop it first (one training at a time)").format(
                        name=self.current.name
                    )
                )
            name = f"live-{model}-seed{seed}"
            run_dir = self.folder / name
            shutil.rmtree(run_dir, ignore_errors=True)  # the lab's own folder: an older run of this name
            self.runs.pop(name, None)
            log_path = self.folder / f"{name}.log"
            log = log_path.open("w", encoding="utf-8")
            overrides = [
                f"train.seed={seed}",
                f"train.epochs={epochs}",
                f"train.time_limit_minutes={TIME_LIMIT_MINUTES}",
            ]
            command = [sys.executable, "-m", "attn_mt", "train", str(SHIPPED_CONFIGS / CONFIGS[model])]
            command += [
                "--run-dir",
                str(run_dir),
                "--quiet",
                *[part for o in overrides for part in ("--set", o)],
            ]
            process = subprocess.Popen(
                command, stdout=log, stderr=subprocess.STDOUT, start_new_session=True, preexec_fn=limit_memory
            )
            log.close()
            self.current = Training(name, model, run_dir, epochs, process, time.monotonic(), log_path)
            watchdog = threading.Timer(TIME_LIMIT_MINUTES * 60 + OVERRUN_S, self.kill, (process,))
            watchdog.daemon = True
            watchdog.start()

    def kill(self, process: subprocess.Popen) -> None:
        """End `process` and its children at once (a training past its bounds)."""
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)

    def stop(self) -> None:
        """Ask the running training to save and stop; kill it if it has not within STOP_WAIT_S."""
        with self.lock:
            if not self.running():
                raise LabError(_("no training is running"))
            assert self.current is not None
            self.current.stopped = True
            process = self.current.process
            os.killpg(process.pid, signal.SIGTERM)
            try:
                process.wait(STOP_WAIT_S)
            except subprocess.TimeoutExpired:
                self.kill(process)
                process.wait()

    def close(self) -> None:
        """At the lab's end: stop a training still running, and remove the folder if nothing was trained."""
        if self.running():
            assert self.current is not None
            self.kill(self.current.process)
            self.current.process.wait()
        if self.folder.is_dir() and not any(self.folder.iterdir()):
            self.folder.rmdir()

    def status(self) -> dict[str, Any]:
        """Where the training stands: its state, epochs done, seconds spent and left; opens a finished run."""
        training = self.current
        if training is None:
            return {"state": "idle"}
        epochs_done = sum("epoch_loss" in r for r in read_metrics(training.run_dir / "metrics.jsonl"))
        elapsed = time.monotonic() - training.started
        code_now = training.process.poll()
        state = "running" if code_now is None else "stopped" if training.stopped else "finished"
        if code_now not in (None, 0):
            state = "stopped" if training.stopped else "failed"
        status = {
            "state": state,
            "name": training.name,
            "model": training.model,
            "run_dir": str(training.run_dir),
            "epochs_done": epochs_done,
            "epochs": training.epochs,
            "elapsed_s": round(elapsed, 1),
        }
        if state == "failed":
            status["reason"] = failure_reason(training.log, code_now)
        if state == "running" and epochs_done:
            now = time.monotonic()
            if training.pace_from is None:
                training.pace_from = (now, epochs_done)
            left = seconds_left(training.pace_from, now, epochs_done, training.epochs)
            if left is not None:
                status["left_s"] = round(left, 1)
        if state in ("finished", "stopped") and (training.run_dir / "checkpoints" / "last.pt").exists():
            self.open(training)
            status["opened"] = training.name
        return status

    def open(self, training: Training) -> None:
        """Add the trained run to the lab's runs and to the listing the page reads."""
        if training.name in self.runs:
            return
        self.runs[training.name] = open_model(training.run_dir, "last", "cpu")
        entry = {
            "name": training.name,
            "model": training.model,
            "checkpoint": "last.pt",
            "step": self.runs[training.name].step,
        }
        self.listing["runs"].append(entry)


def live_panel(trainer: LiveTrainer, state: dict[str, Any]) -> dict[str, Any]:
    """Start, stop or follow the lab's training (`action`: status, start or stop)."""
    action = choice(state, "action", "status", ("status", "start", "stop"))
    if action == "start":
        model = choice(state, "model", "gru_bahdanau", tuple(CONFIGS))
        trainer.start(model, whole(state, "seed", 0, 0, 2**31 - 1), whole(state, "epochs", 250, 1, 1000))
    elif action == "stop":
        trainer.stop()
    status = trainer.status()
    tensors, plots, texts = [], [], describe(status)
    timeline = None if trainer.current is None else latest_timeline(trainer.current.run_dir)
    if timeline is not None:
        last = len(timeline.points) - 1
        point = timeline.points[last]
        tensors.append(heatmap(timeline, point, 0, attention_at(point)))
        plots.append(loss_plot(timeline, last))
        texts["translation"] = f"{timeline.probes[0]} → {point.outputs[0]}"
    notes = [
        _(
            "One training at a time, in its own process, stopped after {minutes} minutes; runs go to "
            "{folder}. Below: the latest point of its timeline.jsonl (the first probe sentence) as it grows. "
            "A finished (or stopped) run opens in every other panel; 'watch it learn' plays its points."
        ).format(minutes=number(TIME_LIMIT_MINUTES, "g"), folder=trainer.folder)
    ]
    return answer(tensors, [code(train), code(LiveTrainer.start)], notes, plots, text=texts, **status)


def latest_timeline(run_dir: Path) -> RecordedTimeline | None:
    """The training's timeline as written so far (None before its first point)."""
    timeline = read_timeline(run_dir / "timeline.jsonl")
    return timeline if timeline is not None and timeline.points else None


def failure_reason(log: Path, code: int | None) -> str:
    """Why a training failed: the signal that killed it, if one did, and the `attn-mt: error:` lines at
    the end of its log (else its last lines), else its exit code."""
    try:
        with log.open("rb") as handle:
            handle.seek(max(0, log.stat().st_size - REASON_BYTES))
            text = handle.read().decode("utf-8", "replace")
    except OSError:
        text = ""
    lines = [line.rstrip() for line in text.splitlines() if line.strip()]
    errors = [line.removeprefix("attn-mt: error: ") for line in lines if line.startswith("attn-mt: error: ")]
    said = (errors or lines)[-REASON_LINES:]
    if code is not None and code < 0:
        try:
            killed = signal.Signals(-code).name
        except ValueError:
            killed = _("signal {number}").format(number=-code)
        said.insert(0, _("the training process was killed by {signal}").format(signal=killed))
    return "\n".join(said) or _("the training process ended with exit code {code}").format(code=code)


def seconds_left(pace_from: tuple[float, int], now: float, epochs_done: int, epochs: int) -> float | None:
    """The time the epochs still to train will take at the pace measured since `pace_from` (when, and
    after how many epochs, the lab first saw one finished), so the process's start-up (Python, torch, the
    corpus), which the first epoch carries, counts in no estimate; None until an epoch more is done."""
    since, done_then = pace_from
    if epochs_done <= done_then:
        return None
    return (now - since) / (epochs_done - done_then) * (epochs - epochs_done)


def describe(status: dict[str, Any]) -> dict[str, str]:
    """The status in words for the page, in the language in force (a failed training's log as written)."""
    if status["state"] == "idle":
        return {"live": _("no training started yet")}
    if status["state"] in ENDED:
        words = _(ENDED[status["state"]])
    elif "left_s" in status:
        words = _("{name}: running, epoch {done} of {epochs}, {elapsed} s, about {left} s left")
    else:
        words = _("{name}: running, epoch {done} of {epochs}, {elapsed} s, time left: measuring the pace")
    filled = words.format(
        name=status["name"],
        done=status["epochs_done"],
        epochs=status["epochs"],
        elapsed=number(status["elapsed_s"], ".0f"),
        left=number(status.get("left_s", 0.0), ".0f"),
        reason=status.get("reason", ""),
    )
    return {"live": filled}
