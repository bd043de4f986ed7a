"""scripts/gpu_check.py on the CPU with the smallest budgets: every check runs and one table comes out."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from synthetic import write_corpus

from attn_mt.machine import cpu_has_native_bf16

ROOT = Path(__file__).resolve().parent.parent
SMALL = [
    "--set",
    "data.valid_size=5",
    "--set",
    "data.test_size=5",
    "--set",
    "data.vocab_size=300",
    "--set",
    "data.max_tokens=256",
    "--set",
    "model.num_hiddens=16",
    "--set",
    "model.ffn_num_hiddens=32",
    "--set",
    "decode.beam_size=2",
]


def _gpu_check(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    """Run the check as a user would, with this checkout first on the path and a private cache."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "XDG_CACHE_HOME": str(tmp_path / "cache")}
    return subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "gpu_check.py"), "--device", "cpu", *args],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )


def test_cpu_check_runs_every_step_and_prints_one_table(tmp_path):
    corpus = write_corpus(tmp_path / "reverse.txt", n=200)
    done = _gpu_check(
        tmp_path,
        "--data",
        str(corpus),
        "--epochs",
        "1",
        "--steps",
        "2",
        "--ranks",
        "0",
        "--out",
        str(tmp_path / "runs"),
        *SMALL,
    )
    assert done.returncode == 0, done.stderr
    rows = [line for line in done.stdout.splitlines() if line.startswith("| ") and "---" not in line]
    assert rows[0].split("|")[1].strip() == "check" and len(rows) == 1 + 5
    named = {row.split("|")[1].strip().split(":")[0]: row.split("|")[2:-1] for row in rows[1:]}
    assert set(named) == {
        "d2l_bahdanau",
        "d2l_transformer",
        "transformer (amp auto)",
        "translate",
        "eval --split test",
    }
    steps, _, loss, _, peak, amp, _ = (cell.strip() for cell in named["transformer (amp auto)"])
    # amp auto times bf16 against float32 on a CPU with native bf16 and keeps the faster: either may win
    assert (
        steps == "2"
        and float(loss) > 0
        and peak == "-"
        and amp in ("none", "bf16" if cpu_has_native_bf16() else "none")
    )
    assert 0.0 <= float(named["eval --split test"][3]) <= 100.0
    assert (tmp_path / "runs" / "transformer" / "eval" / "test" / "scores.json").is_file()


def test_a_failing_step_stops_the_check_with_its_error(tmp_path):
    done = _gpu_check(tmp_path, "--data", str(tmp_path / "missing.txt"), "--epochs", "1", "--ranks", "0")
    assert done.returncode == 1 and "|" not in done.stdout
    assert "gpu_check FAILED: d2l_bahdanau failed (exit" in done.stderr
    assert "corpus file not found" in done.stderr  # the failing command's own message
