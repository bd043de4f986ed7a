"""Nothing lost, nothing let in: kills, NaN losses, failed writes, determinism, awkward input lines."""

from __future__ import annotations

import errno
import math
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from support.synthetic import write_corpus

from attn_mt.commands.translate import run_translate
from attn_mt.config import load_config
from attn_mt.errors import UserError
from attn_mt.run import checkpoint as checkpoint_module
from attn_mt.run.checkpoint import CheckpointWriteError, load_checkpoint, save_checkpoint
from attn_mt.run.run_dir import read_metrics
from attn_mt.training import trainer as trainer_module
from attn_mt.training.launch import train
from attn_mt.training.loss_totals import TrainingDivergedError

ROOT = Path(__file__).resolve().parent.parent
TINY = ROOT / "configs" / "tiny.yaml"
SYNTH = [
    "data.valid_size=10",
    "data.test_size=10",
    "data.max_tokens=200",
    "train.valid_max_sentences=10",
    "train.checkpoint_minutes=0",
    "train.log_every=1",
]


@pytest.fixture
def corpus(tmp_path: Path) -> Path:
    return write_corpus(tmp_path / "reverse.txt", n=300)


def without_time(run_dir: Path) -> list[dict]:
    return [
        {k: v for k, v in r.items() if k not in ("tokens_per_s", "elapsed_s")}
        for r in read_metrics(run_dir / "metrics.jsonl")
    ]


def test_same_seed_gives_identical_loss_curves(tmp_path, corpus):
    cfg = load_config(TINY, [*SYNTH, "train.epochs=2", "model.dropout=0.3"])
    for name in ("a", "b"):
        train(cfg, tmp_path / name, data_path=str(corpus), quiet=True, device="cpu")
    assert without_time(tmp_path / "a") == without_time(tmp_path / "b")
    other = load_config(TINY, [*SYNTH, "train.epochs=2", "model.dropout=0.3", "train.seed=1"])
    train(other, tmp_path / "c", data_path=str(corpus), quiet=True, device="cpu")
    assert without_time(tmp_path / "c") != without_time(tmp_path / "a")


def test_nan_loss_stops_with_the_step_and_keeps_the_last_good_checkpoint(tmp_path, corpus, monkeypatch):
    real = trainer_module.Trainer._objective
    calls = {"n": 0}

    def poisoned(self, *args):
        objective, loss = real(self, *args)
        calls["n"] += 1
        if calls["n"] >= 12:
            return objective * float("nan"), loss * float("nan")
        return objective, loss

    monkeypatch.setattr(trainer_module.Trainer, "_objective", poisoned)
    cfg = load_config(TINY, [*SYNTH, "train.epochs=5"])
    with pytest.raises(TrainingDivergedError, match="the loss became nan at step 12"):
        train(cfg, tmp_path / "run", data_path=str(corpus), quiet=True, device="cpu")
    state = load_checkpoint(tmp_path / "run" / "checkpoints" / "last.pt")
    assert 0 < state["step"] < 12
    assert all(torch.isfinite(t).all() for t in state["model"].values())


def test_failed_checkpoint_write_keeps_the_previous_one(tmp_path, monkeypatch):
    path = tmp_path / "last.pt"
    save_checkpoint({"model": {"w": torch.ones(2)}, "step": 1}, path)

    def full_disk(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(checkpoint_module.torch, "save", full_disk)
    with pytest.raises(
        CheckpointWriteError, match="No space left on device; the previous checkpoint is kept"
    ):
        save_checkpoint({"model": {"w": torch.zeros(2)}, "step": 2}, path)
    monkeypatch.undo()
    assert load_checkpoint(path)["step"] == 1
    assert [p.name for p in tmp_path.iterdir()] == ["last.pt"]


def test_files_that_are_not_checkpoints_are_refused_cleanly(tmp_path):
    good = tmp_path / "good.pt"
    save_checkpoint({"model": {"w": torch.ones(2)}, "step": 1}, good)
    cases = {
        "empty.pt": b"",
        "text.pt": b"hello",
        "cut.pt": good.read_bytes()[:200],
        "noise.pt": bytes(range(256)) * 8,
    }
    for name, data in cases.items():
        (tmp_path / name).write_bytes(data)
        with pytest.raises(UserError, match="damaged, or not a PyTorch checkpoint"):
            load_checkpoint(tmp_path / name)
    torch.save({"model": [1, 2]}, tmp_path / "list.pt")
    with pytest.raises(UserError, match="not an attn-mt checkpoint"):
        load_checkpoint(tmp_path / "list.pt")


def test_kill_during_a_checkpoint_write_leaves_the_old_file(tmp_path):
    path = tmp_path / "last.pt"
    save_checkpoint({"model": {"w": torch.ones(3)}, "step": 1}, path)
    script = (
        "import sys, torch\n"
        "from attn_mt.run.checkpoint import save_checkpoint\n"
        "print('writing', flush=True)\n"
        f"save_checkpoint({{'model': {{'w': torch.randn(60_000_000)}}, 'step': 2}}, {str(path)!r})\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "writing"
    deadline = time.time() + 60
    while time.time() < deadline and not list(tmp_path.glob(".last.pt.*.tmp")):
        time.sleep(0.001)
    assert list(tmp_path.glob(".last.pt.*.tmp")), "the temporary file never appeared"
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    state = load_checkpoint(path)
    assert state["step"] == 1 and torch.equal(state["model"]["w"], torch.ones(3))


@pytest.mark.slow
def test_random_sigkills_then_resume_completes(tmp_path, corpus):
    run_dir = tmp_path / "run"
    base = [
        sys.executable,
        "-m",
        "attn_mt",
        "train",
        str(TINY),
        "--data",
        str(corpus),
        "--run-dir",
        str(run_dir),
        "--quiet",
        *[x for s in [*SYNTH, "train.epochs=60"] for x in ("--set", s)],
    ]
    rng = random.Random(0)
    kills = 0
    exits = []
    for _ in range(10):
        resume = (run_dir / "checkpoints" / "last.pt").exists()
        proc = subprocess.Popen(
            [*base, "--resume" if resume else "--overwrite"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        metrics = run_dir / "metrics.jsonl"
        seen = len(read_metrics(metrics))
        deadline = time.time() + 120
        while proc.poll() is None and time.time() < deadline and len(read_metrics(metrics)) <= seen:
            time.sleep(0.05)
        time.sleep(rng.uniform(0.0, 0.3))
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
            kills += 1
        proc.wait(timeout=60)
        if proc.returncode != -signal.SIGKILL:
            exits.append((proc.returncode, proc.stderr.read().decode()[-500:]))
        if (run_dir / "checkpoints" / "last.pt").exists():
            load_checkpoint(run_dir / "checkpoints" / "last.pt")
    assert kills >= 8, f"runs ended before they could be killed: {exits}"
    final = subprocess.run([*base, "--resume"], capture_output=True, text=True, timeout=600)
    assert final.returncode == 0, final.stderr
    state = load_checkpoint(run_dir / "checkpoints" / "last.pt")
    assert state["epoch"] == 60
    steps = [r["step"] for r in read_metrics(run_dir / "metrics.jsonl") if "loss" in r]
    assert steps == sorted(set(steps)), "metrics must not repeat steps redone after a kill"
    assert all(math.isfinite(r["loss"]) for r in read_metrics(run_dir / "metrics.jsonl") if "loss" in r)


def test_translate_survives_awkward_lines(tmp_path, corpus, capsys):
    cfg = load_config(ROOT / "configs" / "d2l_bahdanau.yaml", ["train.epochs=2"])
    train(cfg, tmp_path / "run", data_path=str(corpus), quiet=True, device="cpu")
    lines = ["", "zzz qqq xxx", " ".join(["alpha"] * 10_000), "Alpha bravo."]
    src = tmp_path / "in.txt"
    src.write_text("\n".join(lines) + "\n", encoding="utf-8")
    out = tmp_path / "out.txt"
    run_translate(tmp_path / "run", [], str(src), out, None, 1, "best", None, "cpu")
    produced = out.read_text(encoding="utf-8").split("\n")
    assert len(produced) == len(lines) + 1 and produced[-1] == ""
    assert produced[0] == "" and all(produced[1:4])
    err = capsys.readouterr().err
    assert "line 2: unknown source tokens, read as <unk>: zzz qqq xxx" in err
    assert "line 3: source cut to 10 tokens incl. <eos>" in err
    assert os.path.getsize(out) > 0


def test_translation_pauses_the_cyclic_collector_and_gives_it_back():
    """Inside `collections_paused` the collector is off and what existed is frozen; after it (also
    after an error) both are as they were, and cyclic garbage made inside is collected later.
    Where the collector was off already it changes nothing."""
    import gc
    import weakref

    from attn_mt.decoding.engine import collections_paused

    class Node:
        pass

    assert gc.isenabled()
    with pytest.raises(RuntimeError), collections_paused():
        assert not gc.isenabled() and gc.get_freeze_count() > 0
        node = Node()
        node.self = node  # a reference cycle: only the collector frees it
        alive = weakref.ref(node)
        del node
        garbage = [[] for _ in range(10 * gc.get_threshold()[0])]  # would start collections
        assert alive() is not None and garbage
        raise RuntimeError("a failed translation")
    assert gc.isenabled() and gc.get_freeze_count() == 0
    gc.collect()
    assert alive() is None
    gc.disable()  # a caller that keeps the collector off keeps it off, and nothing is frozen for it
    try:
        with collections_paused():
            assert gc.get_freeze_count() == 0
        assert not gc.isenabled()
    finally:
        gc.enable()
