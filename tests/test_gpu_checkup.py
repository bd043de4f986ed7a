"""scripts/gpu_checkup.py as far as the CPU can show it: the parts and their commands, a part run for real
on the CPU into the table (which says it holds no GPU figure), the budget that stops a part, the targets'
verdicts and make's target. The GPU run itself: docs/benchmarks.md, "One GPU: the check-up"."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from support.helpers import load_script, make_dry_run

checkup = load_script("gpu_checkup")
ROOT = Path(__file__).resolve().parent.parent


def test_the_dry_run_lists_the_three_parts_within_the_budget_and_runs_nothing(capsys, monkeypatch):
    monkeypatch.setattr(subprocess, "run", lambda *a, **k: (_ for _ in ()).throw(AssertionError("ran")))
    assert checkup.main(["--dry-run", "--data", "corpus.zip"]) == 0
    lines = capsys.readouterr().out.splitlines()
    names = [line.split(" ")[0] for line in lines[:-1]]
    assert names == ["check", "profile-eager", "profile-step"]
    check, eager, step = lines[:3]
    assert "gpu_check.py --device cuda --quick --data corpus.zip" in check
    assert "train.kernels" not in check and "ctranslate2" in check and "eval" in check
    assert "--variants reference " in eager and "transformer-gpu.yaml --device cuda" in eager
    assert "--variants reference+step-capture --set data.batch_shapes=8" in step
    assert lines[-1].startswith("budget 9 minutes")


def test_a_part_runs_for_real_on_the_cpu_and_the_table_says_no_gpu_figure(tmp_path, capsys):
    out = tmp_path / "checkup"
    assert checkup.main(["--device", "cpu", "--parts", "profile-eager", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "on the CPU: a smoke run of the check-up, no GPU figure" in printed
    rows = [line for line in printed.splitlines() if line.startswith("| profile-eager")]
    assert [row.split("|")[2].strip() for row in rows] == ["reference"]
    for row in rows:
        cells = [c.strip() for c in row.split("|")[1:-1]]
        assert (
            float(cells[4]) > 0 and cells[6] == "-" and cells[-1] == "pass"
        )  # ms a step; no GPU busy on a CPU
    assert (out / "checkup.md").read_text() == printed
    assert "targets" not in printed  # nothing to judge them by on a CPU
    assert json.loads((out / "profile-eager" / "profile.json").read_text())["device"] == "cpu"


def test_a_part_past_the_budget_is_stopped_and_the_next_is_not_started(tmp_path, capsys):
    out = tmp_path / "checkup"
    status = checkup.main(
        ["--device", "cpu", "--parts", "profile-eager,check", "--minutes", "0.02", "--out", str(out)]
    )
    printed = capsys.readouterr().out
    assert status == 1
    assert "check cut at the budget (1 s)" in printed  # the parts run in their order, not --parts'
    assert "profile-eager not run: no budget left" in printed


def test_the_targets_are_judged_from_the_parts_figures(tmp_path):
    (tmp_path / "profile-eager").mkdir()
    (tmp_path / "profile-step").mkdir()
    (tmp_path / "check.json").write_text(
        json.dumps(
            {
                "rows": [
                    {"check": "transformer-gpu (amp auto)", "steady_tokens_per_s": 1_450_000.0, "bleu": "-"},
                    {"check": "eval --split test --beam 4", "steady_tokens_per_s": "-", "bleu": 53.2},
                ]
            }
        )
    )
    eager = [{"variant": "reference", "ok": True, "gpu_busy": 0.62, "host_syncs_per_step": 1.0}]
    step = [
        {"variant": "reference+step-capture", "ok": True, "gpu_busy": 0.93, "host_syncs_per_step": 0.0},
        {"variant": "reference+step", "ok": False, "gpu_busy": 0.99, "host_syncs_per_step": 0.0},  # failed
    ]
    (tmp_path / "profile-eager" / "profile.json").write_text(json.dumps({"variants": eager}))
    (tmp_path / "profile-step" / "profile.json").write_text(json.dumps({"variants": step}))
    assert checkup.targets(tmp_path) == [
        "- steady_tokens_per_s: 1450000.0 (met; aim 1.3e+06)",
        "- gpu_busy: 0.93 (met; aim 0.9)",  # the best variant that ran, not a failed one's figure
        "- host_syncs_per_step: 0.0 (met; aim 0)",
        "- bleu: 53.2 (missed; aim 53.5)",
    ]


def test_make_gpu_checkup_with_a_python_sets_up_nothing(tmp_path):
    given = make_dry_run(tmp_path, "gpu-checkup", "PYTHON=/opt/cuda/bin/python3", "ARGS=--data fra-eng.zip")
    assert given.strip().splitlines() == ["/opt/cuda/bin/python3 scripts/gpu_checkup.py --data fra-eng.zip"]
