"""DDP with Gloo on CPU: two processes follow one process's losses, write one set of files, resume."""

from __future__ import annotations

import math
import os
import random
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from support.synthetic import TINY_EVERY_STEP, write_corpus

from attn_mt.config import load_config
from attn_mt.run.checkpoint import load_checkpoint
from attn_mt.run.run_dir import read_metrics
from attn_mt.training.launch import train

TINY = Path(__file__).resolve().parent.parent / "configs" / "tiny.yaml"
COMMON = TINY_EVERY_STEP
COMPARED = ("step", "epoch", "loss", "epoch_loss", "valid_loss", "valid_bleu", "train_loss", "lr")


def torchrun_command(nproc: int, *args: str, launcher: tuple[str, ...] = ("--standalone",)) -> list[str]:
    return [
        sys.executable,
        "-m",
        "torch.distributed.run",
        *launcher,
        f"--nproc_per_node={nproc}",
        "-m",
        "attn_mt",
        *args,
    ]


WORKER_ENV = {**os.environ, "OMP_NUM_THREADS": "1"}


def torchrun(nproc: int, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        torchrun_command(nproc, *args), capture_output=True, text=True, timeout=400, env=WORKER_ENV
    )


def trajectory(run_dir: Path) -> list[dict]:
    return [{k: r[k] for k in COMPARED if k in r} for r in read_metrics(run_dir / "metrics.jsonl")]


def assert_same_trajectory(a: list[dict], b: list[dict]) -> None:
    assert len(a) == len(b) and a
    for x, y in zip(a, b, strict=True):
        assert x.keys() == y.keys()
        for key in x:
            assert math.isclose(x[key], y[key], rel_tol=1e-5, abs_tol=1e-5), (key, x, y)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    return write_corpus(tmp_path_factory.mktemp("ddp") / "reverse.txt", n=300)


@pytest.fixture(scope="module")
def single_run(tmp_path_factory, corpus) -> Path:
    run_dir = tmp_path_factory.mktemp("single") / "run"
    cfg = load_config(TINY, [*COMMON, "train.accum_steps=2"])
    train(cfg, run_dir, data_path=str(corpus), quiet=True, device="cpu")
    return run_dir


def overrides(*extra: str) -> list[str]:
    return [item for s in [*COMMON, *extra] for item in ("--set", s)]


def train_args(corpus: Path, run_dir: Path, *extra: str) -> list[str]:
    """`attn-mt train` of tiny.yaml on `corpus` into `run_dir`, as every torchrun of this module runs it."""
    return [
        "train",
        str(TINY),
        "--data",
        str(corpus),
        "--run-dir",
        str(run_dir),
        "--quiet",
        "--device",
        "cpu",
        *extra,
    ]


@pytest.fixture(scope="module")
def two_process_run(tmp_path_factory, corpus) -> Path:
    """tiny.yaml trained by two Gloo processes on one machine (torchrun --standalone)."""
    run_dir = tmp_path_factory.mktemp("ddp") / "run"
    result = torchrun(2, *train_args(corpus, run_dir, *overrides()))
    assert result.returncode == 0, result.stderr[-3000:]
    return run_dir


def test_two_gloo_processes_match_one_process(two_process_run, single_run):
    run_dir = two_process_run
    assert_same_trajectory(trajectory(run_dir), trajectory(single_run))
    assert sorted(p.name for p in run_dir.iterdir()) == sorted(p.name for p in single_run.iterdir())
    assert sorted(p.name for p in (run_dir / "checkpoints").iterdir()) == ["best.pt", "last.pt"]
    assert (run_dir / "train.log").read_text().count("model transformer with") == 1


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_two_machines_match_two_processes_on_one(tmp_path, corpus, two_process_run):
    """Two torchrun launchers meeting at a c10d rendezvous, each a "machine" with its own disk.

    Each has its own cache (XDG_CACHE_HOME) and its own --run-dir path, as two machines without a
    shared disk would: each prepares its own corpus, and only the machine of global rank 0 writes
    a run directory.
    """
    launcher = (
        "--nnodes=2",
        "--rdzv-backend=c10d",
        f"--rdzv-endpoint=127.0.0.1:{free_port()}",
        "--rdzv-id=two-machines",
    )
    machines = [tmp_path / name for name in ("a", "b")]
    jobs = [
        subprocess.Popen(
            torchrun_command(1, *train_args(corpus, machine / "run", *overrides()), launcher=launcher),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            env={**WORKER_ENV, "XDG_CACHE_HOME": str(machine / "cache")},
        )
        for machine in machines
    ]
    try:
        errors = [job.communicate(timeout=400)[1] for job in jobs]
    finally:
        for job in jobs:
            if job.poll() is None:
                job.kill()
    assert [job.returncode for job in jobs] == [0, 0], errors
    written = [machine for machine in machines if (machine / "run").exists()]
    assert len(written) == 1, "one run directory, written by global rank 0's machine alone"
    assert trajectory(written[0] / "run") == trajectory(two_process_run)
    for machine in machines:  # each machine prepared its own corpus into its own cache
        assert len(list((machine / "cache" / "attn-mt" / "prepared").glob("*/header.json"))) == 1


def test_ddp_run_resumes_with_another_process_count(tmp_path, corpus, single_run):
    run_dir = tmp_path / "ddp"
    first = torchrun(2, *train_args(corpus, run_dir, *overrides("train.max_steps=4")))
    assert first.returncode == 0, first.stderr[-3000:]
    assert load_checkpoint(run_dir / "checkpoints" / "last.pt")["step"] == 4
    second = train(
        None,
        run_dir,
        overrides=["train.max_steps=0", "train.accum_steps=2"],
        data_path=str(corpus),
        resume=True,
        quiet=True,
        device="cpu",
    )
    assert second.stopped_because == "epochs"
    assert_same_trajectory(trajectory(run_dir), trajectory(single_run))


def worker_cli(*args: str) -> subprocess.CompletedProcess:
    """`python -m attn_mt ARGS` as torchrun would start rank 1 of 2 (no process group needed here)."""
    env = {**os.environ, "WORLD_SIZE": "2", "RANK": "1", "LOCAL_RANK": "1"}
    cmd = [sys.executable, "-m", "attn_mt", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=env)


def test_worker_process_keeps_exit_codes_and_flushes_output(tmp_path):
    ok = worker_cli("validate", str(TINY))
    assert ok.returncode == 0, ok.stderr
    assert ok.stdout.startswith("data:") and ok.stdout.rstrip().endswith("beam_stop: bound")  # all of it
    missing = worker_cli("validate", str(tmp_path / "nope.yaml"))
    assert missing.returncode == 2
    assert "attn-mt: error:" in missing.stderr and "nope.yaml" in missing.stderr
    usage = worker_cli("no-such-command")
    assert usage.returncode == 2 and "No such command" in usage.stderr


class _ModelBuiltError(Exception):
    """Raised by the stand-in Trainer once _train has chosen the device."""


@pytest.mark.parametrize(("flag", "expected"), [("cpu", "cpu"), ("auto", "cuda:1"), ("cuda", "cuda:1")])
def test_torchrun_worker_follows_device_flag(tmp_path, corpus, monkeypatch, flag, expected):
    """Rank 0 of two on local rank 1, CUDA reported present: --device picks as in one process."""
    import torch
    import torch.distributed as dist

    from attn_mt.training import distributed, launch

    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("LOCAL_RANK", "1")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    calls: dict[str, object] = {}
    monkeypatch.setattr(torch.cuda, "set_device", lambda index: calls.setdefault("set_device", index))
    monkeypatch.setattr(dist, "is_initialized", lambda: False)
    monkeypatch.setattr(dist, "init_process_group", lambda backend: calls.setdefault("backend", backend))
    monkeypatch.setattr(dist, "new_group", lambda **options: calls.setdefault("waiting_group", options))
    monkeypatch.setattr(dist, "barrier", lambda: None)

    def built(cfg, paths, data, device, quiet, ctx):
        calls["device"] = str(device)
        raise _ModelBuiltError

    monkeypatch.setattr(launch, "Trainer", built)
    cfg = load_config(TINY, COMMON)
    with pytest.raises(_ModelBuiltError):
        train(cfg, tmp_path / "run", data_path=str(corpus), quiet=True, device=flag)
    on_cuda = expected.startswith("cuda")
    assert calls == {
        "backend": "nccl" if on_cuda else "gloo",
        "device": expected,
        **({"set_device": 1} if on_cuda else {}),
        # rank 0 validates while the others wait on Gloo with a long timeout, never under NCCL's watchdog
        "waiting_group": {"backend": "gloo", "timeout": distributed.MAIN_RANK_WAIT},
    }
    assert distributed.rank_device(flag, distributed.DistContext(0, 2, 1)) == torch.device(expected)


def workers(launcher: subprocess.Popen) -> dict[int, int]:
    """The launcher's worker processes now, as {process id: global rank}, from /proc."""
    found = {}
    for entry in Path("/proc").iterdir():
        try:
            parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            environ = (entry / "environ").read_bytes().split(b"\0")
        except (OSError, IndexError, ValueError):
            continue
        ranks = [int(item[5:]) for item in environ if item.startswith(b"RANK=")]
        if parent == launcher.pid and ranks:
            found[int(entry.name)] = ranks[0]
    return found


def metric_lines(run_dir: Path) -> int:
    return len(read_metrics(run_dir / "metrics.jsonl"))


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/environ").exists(), reason="finds the ranks' processes in /proc")
def test_torchrun_restarts_after_sigkills_and_finishes_the_uninterrupted_run(tmp_path, corpus):
    """Three SIGKILLs of a rank: torchrun restarts the group, --auto-resume continues from last.pt."""
    steady = overrides("train.epochs=40", "train.checkpoint_minutes=0")
    args = ["train", str(TINY), "--data", str(corpus), "--quiet", "--device", "cpu", "--auto-resume", *steady]
    reference = torchrun(2, *args, "--run-dir", str(tmp_path / "reference"))
    assert reference.returncode == 0, reference.stderr[-3000:]
    run_dir = tmp_path / "killed"
    launcher = ("--standalone", "--max-restarts=5", "--monitor-interval=0.1")
    job = subprocess.Popen(
        torchrun_command(2, *args, "--run-dir", str(run_dir), launcher=launcher),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env=WORKER_ENV,
    )
    rng, earlier, deadline = random.Random(0), set(), time.time() + 300
    try:
        for rank in (1, 0, 1):  # a rank of each kind; each kill after a few steps of the new group
            pids: list[int] = []
            while not pids and job.poll() is None and time.time() < deadline:
                pids = [pid for pid, r in workers(job).items() if r == rank and pid not in earlier]
                time.sleep(0.02)
            seen = metric_lines(run_dir)
            while job.poll() is None and metric_lines(run_dir) < seen + 5 and time.time() < deadline:
                time.sleep(0.02)
            time.sleep(rng.uniform(0.0, 0.3))
            assert job.poll() is None and pids, "the job ended before three kills"
            earlier |= set(workers(job))  # this attempt's processes, the killed one's peer included
            os.kill(pids[0], signal.SIGKILL)
        stderr = job.communicate(timeout=300)[1]
    finally:
        if job.poll() is None:
            job.kill()
    assert job.returncode == 0, stderr[-3000:]
    assert "Traceback" not in stderr, stderr[-3000:]
    assert "lost contact with another process of the job" in stderr
    steps = [r["step"] for r in read_metrics(run_dir / "metrics.jsonl") if "loss" in r]
    assert steps == list(range(1, steps[-1] + 1)), "a step is missing or repeated"
    assert [
        (r["step"], r.get("loss"), r.get("valid_loss")) for r in read_metrics(run_dir / "metrics.jsonl")
    ] == [
        (r["step"], r.get("loss"), r.get("valid_loss"))
        for r in read_metrics(tmp_path / "reference" / "metrics.jsonl")
    ]


def test_a_lost_peer_is_one_line_and_other_errors_keep_their_traceback(monkeypatch):
    """The errors a surviving rank meets when its peer died, as torch 2.13's gloo words them."""
    import torch.distributed as dist

    from attn_mt.training.distributed import lost_peer_message

    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    reset = RuntimeError(
        "[/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:537] "
        "Read error [127.0.0.1]:29604: Connection reset by peer. This is typically caused by a remote "
        "worker hanging or bugs in the application."
    )
    assert lost_peer_message(reset) == (
        "rank 1 of 2 stops: lost contact with another process of the job (Read error [127.0.0.1]:29604: "
        "Connection reset by peer); torchrun restarts the group when --max-restarts allows "
        "(--auto-resume continues from last.pt)"
    )
    refused = RuntimeError(
        "[../third_party/gloo/gloo/transport/tcp/pair.cc:144] connect [127.0.0.1]:5: Connection refused"
    )
    assert "(connect [127.0.0.1]:5: Connection refused)" in lost_peer_message(refused)
    assert "(store timed out\n" not in lost_peer_message(dist.DistStoreError("store timed out\nmore"))
    assert lost_peer_message(RuntimeError("shape mismatch: [2, 3] vs [3]")) is None
    assert lost_peer_message(ValueError("Connection reset")) is None


def test_each_torchrun_attempt_keeps_its_store_keys_apart(monkeypatch):
    """Under torchrun's shared store a restarted group writes its peers' addresses under its own prefix."""
    import torch.distributed as dist

    from attn_mt.training.distributed import attempt_store

    server = dist.TCPStore("127.0.0.1", 0, 1, is_master=True, wait_for_workers=False)
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    monkeypatch.setenv("MASTER_PORT", str(server.port))
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "job")
    monkeypatch.delenv("TORCHELASTIC_USE_AGENT_STORE", raising=False)
    assert attempt_store(0, 2) is None  # not torchrun's shared store: env:// as usual
    monkeypatch.setenv("TORCHELASTIC_USE_AGENT_STORE", "True")
    for attempt in ("0", "1"):
        monkeypatch.setenv("TORCHELASTIC_RESTART_COUNT", attempt)
        attempt_store(0, 2).set("rank_0", f"address of attempt {attempt}")
    assert server.get("attn_mt/job/attempt_0/rank_0") == b"address of attempt 0"
    assert server.get("attn_mt/job/attempt_1/rank_0") == b"address of attempt 1"
