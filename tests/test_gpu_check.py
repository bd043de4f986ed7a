"""scripts/gpu_check.py on the CPU: the --quick rows, one table and JSON, the preflight, make's target."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

from support.helpers import load_script, make_dry_run
from support.synthetic import write_corpus

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
    "train.valid_max_sentences=5",
    "--set",
    "train.threads=1",
]


def _gpu_check(
    tmp_path: Path, *args: str, prelude: str = "", env: dict | None = None
) -> subprocess.CompletedProcess:
    """Run the check as a user would, from this checkout, with a private cache (and `prelude` run first)."""
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache"), **(env or {})}
    argv = ["gpu_check.py", "--device", "cpu", *args]
    script = str(ROOT / "scripts" / "gpu_check.py")
    code = (
        f"import runpy, sys\n{prelude}\nsys.argv = {argv!r}\nrunpy.run_path({script!r}, run_name='__main__')"
    )
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, check=False, cwd=tmp_path
    )


def table(stdout: str) -> dict[str, list[str]]:
    """The printed table's rows by the check's name (before any ':'), each its other cells."""
    rows = [line for line in stdout.splitlines() if line.startswith("| ") and "---" not in line]
    assert rows[0].split("|")[1].strip() == "check"
    return {
        row.split("|")[1].strip().split(":")[0]: [c.strip() for c in row.split("|")[2:-1]] for row in rows[1:]
    }


def test_cpu_quick_check_runs_every_row_that_applies_and_writes_one_json(tmp_path):
    corpus = write_corpus(tmp_path / "reverse.txt", n=200)
    report = tmp_path / "report.json"
    done = _gpu_check(
        tmp_path,
        "--quick",
        "--data",
        str(corpus),
        "--out",
        str(tmp_path / "runs"),
        "--json",
        str(report),
        *SMALL,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    rows = table(done.stdout)
    killed = [name for name in rows if name.startswith("SIGKILL at step")]
    assert set(rows) == {
        "d2l_bahdanau",
        "d2l_transformer",
        "transformer (amp auto)",
        "fp16 + scaler",
        "compile",
        *killed,
        "translate",
        "eval --split test --beam 4",
        "CTranslate2",
        "serve",
    }
    assert len(killed) == 1
    results = {name: cells[-1] for name, cells in rows.items()}
    assert results.pop("fp16 + scaler") == results.pop("compile") == "skip"
    assert set(results.values()) == {"pass"}
    steps, _, steady, loss, _, peak, amp, *_ = rows["transformer (amp auto)"]
    assert steps == "20" and float(loss) > 0 and peak == "-" and amp in ("none", "bf16")
    assert float(steady) > 0  # the steps after the first 10
    assert 0.0 <= float(rows["eval --split test --beam 4"][4]) <= 100.0
    saved = json.loads(report.read_text())
    assert saved["passed"] and saved["device"] == "cpu" and saved["quick"]
    assert [row["result"] for row in saved["rows"]].count("pass") == len(rows) - 2
    assert {
        "tokens_per_s",
        "steady_tokens_per_s",
        "peak_gpu_mb",
        "loss",
        "bleu",
        "amp",
        "seconds",
        "result",
    } <= set(saved["rows"][0])
    assert (tmp_path / "runs" / "transformer" / "eval" / "test" / "scores.json").is_file()
    resumed = read_lines(tmp_path / "runs" / "killed" / "train.log")
    assert any("resumed at step" in line for line in resumed)


def read_lines(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8").splitlines()


def test_a_failing_row_is_marked_and_the_check_goes_on(tmp_path):
    corpus = write_corpus(tmp_path / "reverse.txt", n=200)
    report = tmp_path / "report.json"
    bad = [
        "--set",
        "model.num_heads=5",
    ]  # 16 hidden units do not split into 5 heads: every transformer run fails
    done = _gpu_check(tmp_path, "--quick", "--data", str(corpus), "--json", str(report), *SMALL, *bad)
    assert done.returncode == 1
    rows = table(done.stdout)
    assert rows["d2l_bahdanau"][-1] == rows["d2l_transformer"][-1] == "pass"  # the rows before and beside
    assert rows["transformer (amp auto)"][-1] == "FAIL" and rows["serve"][-1] == "FAIL"
    assert "- serve (FAIL): needs the transformer (amp auto) row, which failed" in done.stdout
    assert "not divisible by model.num_heads" in done.stderr  # the failing command's own message
    assert not json.loads(report.read_text())["passed"]


def test_the_preflight_names_each_missing_package_with_its_pip_command(tmp_path):
    hide = "sys.modules['sacrebleu'] = None; sys.modules['uvicorn'] = None"
    done = _gpu_check(tmp_path, "--quick", prelude=hide)
    assert done.returncode == 1 and "|" not in done.stdout
    assert f"this Python ({sys.executable}) lacks what attn-mt needs" in done.stderr
    assert f"sacrebleu: {sys.executable} -m pip install 'sacrebleu>=2.3'" in done.stderr
    assert f"uvicorn: {sys.executable} -m pip install 'uvicorn>=0.29'" in done.stderr
    assert "typer" not in done.stderr


def test_the_preflight_names_a_package_that_is_installed_but_cannot_import(tmp_path):
    hide = "sys.modules['opentelemetry'] = None"  # fastapi imports it: a device image once lacked it
    done = _gpu_check(tmp_path, "--quick", prelude=hide)
    assert done.returncode == 1 and "|" not in done.stdout
    assert "fastapi: installed but does not import" in done.stderr and "opentelemetry" in done.stderr
    assert f"{sys.executable} -m pip install 'fastapi>=0.110'" in done.stderr


def test_the_preflight_says_how_to_make_attn_mt_importable(tmp_path):
    done = _gpu_check(tmp_path, "--quick", prelude="sys.modules['attn_mt'] = None")  # as if not installed
    assert done.returncode == 1 and "|" not in done.stdout
    assert f"does not import attn_mt: {sys.executable} -m pip install --no-deps -e {ROOT}" in done.stderr
    assert f"make gpu-check PYTHON={sys.executable}" in done.stderr


def test_the_preflight_refuses_a_torch_older_than_attn_mt_needs(tmp_path):
    done = _gpu_check(tmp_path, "--quick", prelude="import torch; torch.__version__ = '2.1.2+cu121'")
    assert done.returncode == 1 and "|" not in done.stdout
    assert "needs torch 2.4 or later" in done.stderr and "has 2.1.2+cu121" in done.stderr
    assert f"{sys.executable} -m pip install 'torch>=2.4'" in done.stderr


def test_without_a_corpus_the_check_stops_before_any_download(tmp_path):
    env = {key: value for key, value in os.environ.items() if key != "ATTN_MT_DATA"}
    env["XDG_CACHE_HOME"] = str(tmp_path / "empty-cache")
    argv = [sys.executable, str(ROOT / "scripts" / "gpu_check.py"), "--device", "cpu", "--quick"]
    done = subprocess.run(argv, capture_output=True, text=True, env=env, check=False, cwd=tmp_path)
    assert done.returncode == 1 and "no corpus found" in done.stderr
    assert "never downloads: pass --data FILE or set ATTN_MT_DATA" in done.stderr
    assert not (tmp_path / "empty-cache" / "attn-mt").exists()
    missing = _gpu_check(tmp_path, "--data", str(tmp_path / "missing.txt"))
    assert missing.returncode == 1 and "missing.txt" in missing.stderr


def test_make_gpu_check_with_a_python_sets_up_nothing(tmp_path):
    given = make_dry_run(tmp_path, "gpu-check", "PYTHON=/opt/cuda-python/bin/python3", "ARGS=--quick")
    assert given.strip().splitlines() == ["/opt/cuda-python/bin/python3 scripts/gpu_check.py --quick"]
    default = make_dry_run(tmp_path, "gpu-check")
    assert "-m venv .venv" in default and "pip install" in default  # the ordinary way still works
    assert default.strip().splitlines()[-1] == ".venv/bin/python scripts/gpu_check.py"


def test_rows_picks_the_rows_and_lists_the_others_as_not_asked_for(tmp_path):
    gpu_check = load_script("gpu_check")
    args = argparse.Namespace(quick=True, ranks=0, rows=["auto", "eval"], config=None, device="cuda")
    check = gpu_check.Check(args, tmp_path / "corpus.txt", tmp_path)
    skipped = {name: skip for _, name, _, _, skip in gpu_check.plan(check)}
    assert [name for name, skip in skipped.items() if skip is None] == [
        "transformer-gpu (amp auto)",
        "eval --split test --beam 4",
    ]
    assert skipped["serve"] == skipped["d2l_bahdanau"] == "not asked for (--rows)"
    refused = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "gpu_check.py"), "--rows", "auto,turbo"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert refused.returncode == 2 and "--rows: turbo not among book, auto" in refused.stderr
