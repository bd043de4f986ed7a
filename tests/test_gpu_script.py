"""scripts/gpu.py as far as the CPU can show it. `check`: every CPU row end to end, one table and JSON, a
failing row marked while the check goes on, the preflight, --rows. `profile`: every figure printed and in
profile.json, the traces, the FLOPs arithmetic, the synthetic batches, the GPU-busy sum and the attention
kernels (from made-up traces), the trainer's own step on train's batches, an epoch too short. `checkup`: the
dry run's commands, a part run for real, the budget, the targets. make's three targets. The GPU runs
themselves: docs/benchmarks.md, "One GPU: the check-up"."""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from support.helpers import load_script, make_dry_run
from support.synthetic import TINY, TINY_RUN_SETTINGS, write_corpus

from attn_mt.config import load_config
from attn_mt.models.build import build_model
from attn_mt.training.flops import ModelFlops
from attn_mt.training.launch import train
from attn_mt.training.trainer import Trainer

gpu = load_script("gpu")
ROOT = Path(__file__).resolve().parent.parent
SMALL = {
    "data.valid_size": 5,
    "data.test_size": 5,
    "data.vocab_size": 300,
    "data.max_tokens": 256,
    "model.num_hiddens": 16,
    "model.ffn_num_hiddens": 32,
    "train.valid_max_sentences": 5,
    "train.threads": 1,
}
SMALL_ARGS = [arg for key, value in SMALL.items() for arg in ("--set", f"{key}={value}")]
PROFILE_ARGS = [
    "--device",
    "cpu",
    "--warmup",
    "1",
    "--steps",
    "2",
    "--trace-steps",
    "1",
    "--set",
    "train.threads=1",
]


def table(stdout: str) -> dict[str, list[str]]:
    """The printed check table's rows by the check's name (before any ':'), each its other cells."""
    rows = [line for line in stdout.splitlines() if line.startswith("| ") and "---" not in line]
    assert rows[0].split("|")[1].strip() == "check"
    return {
        row.split("|")[1].strip().split(":")[0]: [c.strip() for c in row.split("|")[2:-1]] for row in rows[1:]
    }


# ----- check -----
def test_check_on_the_cpu_runs_every_row_that_applies_and_writes_one_json(tmp_path):
    corpus = write_corpus(tmp_path / "reverse.txt", n=200)
    report = tmp_path / "report.json"
    command = [sys.executable, str(ROOT / "scripts" / "gpu.py"), "check", "--device", "cpu", "--quick"]
    command += ["--data", str(corpus), "--out", str(tmp_path / "runs"), "--json", str(report), *SMALL_ARGS]
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache")}
    done = subprocess.run(command, capture_output=True, text=True, env=env, check=False, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    rows = table(done.stdout)
    killed = [name for name in rows if name.startswith("SIGKILL at step")]
    assert len(killed) == 1
    assert set(rows) == {
        *("d2l_bahdanau", "d2l_transformer", "transformer (amp auto)", "fp16 + scaler", "compile", *killed),
        *("translate", "eval --split test --beam 4", "CTranslate2", "serve"),
    }
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
    assert {"tokens_per_s", "steady_tokens_per_s", "peak_gpu_mb", "loss", "bleu", "amp", "result"} <= set(
        saved["rows"][0]
    )
    assert (tmp_path / "runs" / "transformer" / "eval" / "test" / "scores.json").is_file()
    resumed = (tmp_path / "runs" / "killed" / "train.log").read_text(encoding="utf-8")
    assert "resumed at step" in resumed


def test_a_failing_row_is_marked_with_its_commands_error_and_the_check_goes_on(tmp_path, monkeypatch, capsys):
    corpus = write_corpus(tmp_path / "reverse.txt", n=20)
    report = tmp_path / "report.json"
    ran = []

    def book(self, config):
        ran.append(config)
        return gpu.Row(config, steps=3, loss=1.5)

    def auto(self):  # a real attn-mt-like command that fails with its own message
        failing = "import sys; sys.exit('model.num_hiddens 16 is not divisible by model.num_heads 5')"
        gpu.run([sys.executable, "-c", failing], "amp auto")

    monkeypatch.setattr(gpu.Check, "book", book)
    monkeypatch.setattr(gpu.Check, "auto", auto)
    argv = ["check", "--device", "cpu", "--quick", "--data", str(corpus), "--json", str(report)]
    assert gpu.main([*argv, "--rows", "book,auto,translate,serve"]) == 1
    printed = capsys.readouterr()
    rows = table(printed.out)
    assert ran == ["d2l_bahdanau", "d2l_transformer"]  # the rows beside the failing one ran
    assert rows["d2l_bahdanau"][-1] == rows["d2l_transformer"][-1] == "pass"
    assert rows["transformer (amp auto)"][-1] == rows["serve"][-1] == rows["translate"][-1] == "FAIL"
    assert rows["eval --split test --beam 4"][-1] == "skip"
    assert "- serve (FAIL): needs the transformer (amp auto) row, which failed" in printed.out
    assert "not divisible by model.num_heads" in printed.err  # the failing command's own message
    saved = json.loads(report.read_text())
    assert not saved["passed"] and saved["rows"][2]["result"] == "FAIL"
    assert "not divisible by model.num_heads" in saved["rows"][2]["note"]


@pytest.mark.parametrize(
    ("hidden", "expected"),
    [
        (
            ("sacrebleu", "uvicorn"),
            ["lacks what attn-mt needs", "sacrebleu: {py} -m pip install 'sacrebleu>=2.3'"],
        ),
        (
            ("attn_mt",),
            ["does not import attn_mt: {py} -m pip install --no-deps -e", "make gpu-check PYTHON={py}"],
        ),
    ],
)
def test_the_preflight_names_what_is_missing_and_the_command_for_it(monkeypatch, hidden, expected):
    for module in hidden:  # as if not installed
        monkeypatch.setitem(sys.modules, module, None)
    with pytest.raises(SystemExit) as stopped:
        gpu.preflight("cpu", corpus=True)
    for text in expected:
        assert text.format(py=sys.executable) in str(stopped.value.code)
    assert "typer" not in str(stopped.value.code)


def test_a_package_that_is_installed_but_cannot_import_is_named_with_its_error(tmp_path, monkeypatch):
    (tmp_path / "needy").mkdir()  # as fastapi without opentelemetry-api, which a device image once lacked
    (tmp_path / "needy" / "__init__.py").write_text("import opentelemetry_missing_here\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    [line] = gpu.missing_packages({"needy": "needy>=1", "json": "json"})
    assert line.startswith(
        "  needy: installed but does not import (No module named 'opentelemetry_missing_here')"
    )
    assert line.endswith(f"{sys.executable} -m pip install 'needy>=1'")


def test_the_preflight_refuses_an_old_torch_and_finds_no_corpus_without_downloading(tmp_path, monkeypatch):
    monkeypatch.setattr(torch, "__version__", "2.1.2+cu121")
    with pytest.raises(SystemExit) as old:
        gpu.preflight("cpu")
    assert "needs torch 2.4 or later" in old.value.code and "has 2.1.2+cu121" in old.value.code
    monkeypatch.undo()
    monkeypatch.delenv("ATTN_MT_DATA", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "empty-cache"))
    with pytest.raises(SystemExit) as none:
        gpu.preflight("cpu", corpus=True)
    assert "no corpus found" in none.value.code
    assert "never downloads: pass --data FILE or set ATTN_MT_DATA" in none.value.code
    assert not (tmp_path / "empty-cache" / "attn-mt").exists()
    with pytest.raises(SystemExit) as missing:
        gpu.preflight("cpu", tmp_path / "missing.txt", corpus=True)
    assert "missing.txt" in missing.value.code


def test_rows_picks_the_rows_and_lists_the_others_as_not_asked_for(tmp_path, capsys):
    args = argparse.Namespace(quick=True, ranks=0, rows=["auto", "eval"], config=None, device="cuda")
    check = gpu.Check(args, tmp_path / "corpus.txt", tmp_path)
    skipped = {name: skip for _, name, _, _, skip in gpu.plan_rows(check)}
    assert [name for name, skip in skipped.items() if skip is None] == [
        "transformer-gpu (amp auto)",
        "eval --split test --beam 4",
    ]
    assert skipped["serve"] == skipped["d2l_bahdanau"] == "not asked for (--rows)"
    with pytest.raises(SystemExit) as refused:
        gpu.parse_args(["check", "--rows", "auto,turbo"])
    assert refused.value.code == 2 and "--rows: turbo not among book, auto" in capsys.readouterr().err


# ----- profile -----
def test_a_cpu_profile_prints_and_writes_every_figure(tmp_path, capsys):
    out = tmp_path / "profile"
    status = gpu.main(
        [
            "profile",
            str(TINY),
            *PROFILE_ARGS,
            "--variants",
            "reference,auto",
            "--vocab",
            "60",
            "--out",
            str(out),
        ]
    )
    printed = capsys.readouterr().out
    assert status == 0
    assert "== reference" in printed and "== auto" in printed  # the book's modules, the CPU kernels
    assert len(re.findall(r"[\d.]+ ms a step, [\d,]+ target tokens/s", printed)) == 2
    assert printed.count("MFU n/a (cpu)") == 2
    assert "kernels a step n/a, GPU busy n/a, host syncs a step n/a" in printed
    assert "top ops by self CPU time" in printed and "MFLOP a target token" in printed
    summary = json.loads((out / "profile.json").read_text())
    assert summary["device"] == "cpu" and summary["peak_tflops"] is None and summary["flops_per_step"] > 0
    assert [v["variant"] for v in summary["variants"]] == ["reference", "auto"]
    for variant in summary["variants"]:
        assert variant["ok"] and variant["ms_per_step"] > 0 and variant["tokens_per_s"] > 0
        assert variant["mfu"] is None and variant["gpu_busy"] is None and variant["kernels_per_step"] is None
        assert 0 < variant["loss_share"] < 1 and 0 < variant["attention_share"] < 1
        assert variant["top_cpu"] and variant["top_device"] == []
        assert 0 < variant["real_share"] <= 1
        trace = json.loads(Path(variant["trace"]).read_text())
        assert any(str(e.get("name", "")).startswith("aten::") for e in trace["traceEvents"])
        assert variant["attention_kernels"] == {}  # kernel names are a GPU's
    with pytest.raises(SystemExit) as refused:
        gpu.parse_args(["profile", str(TINY), "--variants", "reference,turbo"])
    assert refused.value.code == 2 and "turbo" in capsys.readouterr().err


def test_the_printed_flops_are_the_trainers_definition_with_its_arithmetic():
    cfg = load_config(TINY, ["model.num_layers=2"])
    counts = ModelFlops.of(build_model(cfg.model, 60, 60))
    train_set = gpu.synthetic_train_set(256, 12, gpu.synthetic_vocab(60), seed=0)
    batches = [train_set.collate(ix) for ix in train_set.plan(0, 0)[:3]]
    flops, text = gpu.step_flops(counts, batches)
    assert flops == pytest.approx(sum(counts.step(b.src_lens, b.tgt_lens) for b in batches))
    src = sum(int(b.src_lens.sum()) for b in batches)
    tgt = sum(int(b.tgt_lens.sum()) for b in batches)
    assert f"{src:,} source tokens" in text and f"{tgt:,} target tokens" in text
    assert gpu.step_flops(None, batches)[0] == 0.0  # a GRU: no MFU


def test_attention_kernels_are_counted_by_backend_from_their_names():
    names = [
        "flash_fwd_kernel<Flash_fwd_kernel_traits<64, 128>>",
        "flash_bwd_dq_dk_dv_loop_seqk_parallel_kernel",
        "fmha_cutlassF_bf16_aligned_64x64_rf_sm80",
        "fmha_cutlassB_bf16_aligned_64x64_k64_sm80",
        "cudnn_generated_fort_native_sdpa_sm90_flash_fprop",
        "ampere_bf16_s16816gemm_bf16_128x64",
    ]
    trace = {"traceEvents": [{"ph": "X", "cat": "kernel", "name": n, "ts": 0, "dur": 1} for n in names]}
    trace["traceEvents"].append({"ph": "X", "cat": "cpu_op", "name": "flash_fwd_kernel", "ts": 0, "dur": 1})
    assert gpu.attention_kernels(trace, steps=2) == {"cudnn": 0.5, "flash": 1.0, "efficient": 1.0}


def test_synthetic_batches_follow_the_budget_and_the_length_limit():
    train_set = gpu.synthetic_train_set(512, 12, gpu.synthetic_vocab(100), seed=3)
    batches = [train_set.collate(ix) for ix in train_set.plan(0, 0)[:30]]
    assert len(batches) == 30
    for batch in batches:
        longest = torch.maximum(batch.src_lens, batch.tgt_lens).max()
        assert len(batch.src) * longest <= 512 or len(batch.src) == 1
        assert int(batch.src_lens.max()) <= 12 and int(batch.tgt_lens.max()) <= 12
        rows = torch.arange(len(batch.src))
        assert (batch.src[rows, batch.src_lens - 1] == 3).all()  # <eos> ends every sentence
        assert (batch.tgt[rows, batch.tgt_lens - 1] == 3).all()
        assert int(batch.src.max()) < 100
    stored = json.loads(gpu.LENGTHS.read_text())
    assert sum(n for _, _, n in stored["joint"]) == stored["pairs"]


def test_gpu_busy_is_the_union_of_the_kernels_over_the_profiled_wall_time():
    assert gpu.merged_length([(0, 4), (2, 6), (8, 9), (8.5, 8.7)]) == 7
    trace = {
        "traceEvents": [
            {"ph": "X", "name": "ProfilerStep#0", "cat": "user_annotation", "ts": 0, "dur": 10},
            {"ph": "X", "name": "ProfilerStep#1", "cat": "user_annotation", "ts": 10, "dur": 8},
            {"ph": "X", "name": "gemm", "cat": "kernel", "ts": 2, "dur": 6},
            {"ph": "X", "name": "softmax", "cat": "kernel", "ts": 5, "dur": 5},
            {"ph": "X", "name": "add", "cat": "kernel", "ts": 15, "dur": 5},
            {"ph": "X", "name": "aten::mm", "cat": "cpu_op", "ts": 1, "dur": 3},
        ]
    }
    kernels, busy = gpu.trace_figures(trace, steps=2)
    assert kernels == 1.5
    assert busy == pytest.approx(13 / 20)  # kernels cover 2..10 and 15..20 of 0..20
    assert gpu.trace_figures({"traceEvents": []}, steps=2) == (None, None)


def test_the_peak_comes_from_the_card_name_or_the_command_line(monkeypatch):
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device: "NVIDIA H100 PCIe")
    assert gpu.card_peak(torch.device("cuda"), None) == (756.0, "NVIDIA H100 PCIe")
    assert gpu.card_peak(torch.device("cpu"), None) == (None, "cpu")
    assert gpu.card_peak(torch.device("cpu"), 2.5) == (2.5, "cpu")


def test_the_profile_times_the_trainers_own_step_on_the_batches_train_trains_on(tmp_path, monkeypatch):
    """`attn-mt train` and the profile on one corpus: the same Trainer.train_step over the same batches, in
    the same order, with the same loss totals and metrics lines (their ms a step: docs/gpu.md); a given
    peak gives the MFU of training/flops.py."""
    corpus = write_corpus(tmp_path / "reverse.txt", n=300)
    settings = [*TINY_RUN_SETTINGS[:3], "train.threads=1", "train.log_every=2", "train.kernels=reference"]
    seen: dict[str, list] = {"train": [], "profile": []}
    calls: dict[str, int] = {"train": 0, "profile": 0}
    step, train_step = Trainer._step, Trainer.train_step
    who = ["train"]

    def recorded_step(self, batches, *args):
        seen[who[0]].append([(b.src.clone(), b.tgt.clone()) for b in batches])
        return step(self, batches, *args)

    def counted_train_step(self, *args):
        calls[who[0]] += 1
        return train_step(self, *args)

    monkeypatch.setattr(Trainer, "_step", recorded_step)
    monkeypatch.setattr(Trainer, "train_step", counted_train_step)
    cfg = load_config(TINY, [*settings, "train.max_steps=4", "train.valid_every=0"])
    train(cfg, tmp_path / "run", data_path=str(corpus), quiet=True, device="cpu")
    who[0] = "profile"
    out = tmp_path / "profile"
    args = [
        "--warmup",
        "1",
        "--steps",
        "2",
        "--trace-steps",
        "1",
        "--variants",
        "reference",
        "--peak-tflops",
        "1",
    ]
    overrides = [arg for setting in settings for arg in ("--set", setting)]
    command = ["profile", str(TINY), "--device", "cpu", "--data", str(corpus), *args, *overrides]
    assert gpu.main([*command, "--out", str(out)]) == 0
    assert calls == {"train": 4, "profile": 4}  # 1 warm-up + 2 timed + 1 traced
    assert len(seen["profile"]) == len(seen["train"]) == 4
    for ours, theirs in zip(seen["profile"], seen["train"], strict=True):
        for (src, tgt), (src_t, tgt_t) in zip(ours, theirs, strict=True):
            assert torch.equal(src, src_t) and torch.equal(tgt, tgt_t)
    profiled = [json.loads(line) for line in (out / "reference" / "metrics.jsonl").read_text().splitlines()]
    trained = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in profiled] == [r["step"] for r in trained if "loss" in r] == [2, 4]
    assert [r["loss"] for r in profiled] == [r["loss"] for r in trained if "loss" in r]  # the same totals
    variant = json.loads((out / "profile.json").read_text())["variants"][0]
    assert variant["mfu"] == pytest.approx(variant["tflops"] / 1.0) and variant["mfu"] > 0


def test_more_steps_than_one_epoch_holds_is_refused_with_the_epochs_size(tmp_path, capsys):
    corpus = write_corpus(tmp_path / "reverse.txt", n=300)
    settings = [*TINY_RUN_SETTINGS[:3], "train.threads=1"]
    overrides = [arg for setting in settings for arg in ("--set", setting)]
    args = ["--device", "cpu", "--data", str(corpus), "--variants", "reference", "--out", str(tmp_path)]
    status = gpu.main(["profile", str(TINY), *args, *overrides, "--warmup", "0", "--steps", "500"])
    error = capsys.readouterr().err
    assert status == 2
    match = re.search(r"the training set's epoch has (\d+) batches, fewer than the 503 steps asked", error)
    assert match and 0 < int(match.group(1)) < 503
    assert "--warmup 0 + --steps 500 + --trace-steps 3" in error


# ----- checkup -----
def test_the_dry_run_lists_the_four_parts_within_the_budget_and_runs_nothing(capsys, monkeypatch):
    monkeypatch.setattr(subprocess, "run", lambda *a, **k: (_ for _ in ()).throw(AssertionError("ran")))
    assert gpu.main(["checkup", "--dry-run", "--data", "corpus.zip"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split(" ")[0] for line in lines[:-1]] == [
        "check",
        "profile-eager",
        "profile-gru",
        "profile-step",
    ]
    check, eager, gru, step = lines[:4]
    assert "bahdanau-gpu.yaml --device cuda" in gru and "--variants reference,reference+capture" in gru
    assert "gpu.py check --device cuda --quick --data corpus.zip --rows auto,fp16,resume," in check
    assert "ctranslate2" in check and "eval" in check
    assert "gpu.py profile" in eager and "transformer-gpu.yaml --device cuda" in eager
    assert "--variants reference " in eager
    assert (
        "--variants reference+step-capture --set data.batch_shapes=2 --set train.compile_shapes=static"
        in step
    )
    assert lines[-1].startswith("budget 9 minutes")


def test_a_checkup_part_runs_for_real_on_the_cpu_and_the_table_says_no_gpu_figure(tmp_path, capsys):
    out = tmp_path / "checkup"
    assert gpu.main(["checkup", "--device", "cpu", "--parts", "profile-eager", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "on the CPU: a smoke run of the check-up, no GPU figure" in printed
    assert "command: python3 scripts/gpu.py checkup --device cpu --parts profile-eager" in printed
    rows = [line for line in printed.splitlines() if line.startswith("| profile-eager")]
    assert [row.split("|")[2].strip() for row in rows] == ["reference"]
    cells = [c.strip() for c in rows[0].split("|")[1:-1]]
    assert float(cells[4]) > 0 and cells[6] == "-" and cells[-1] == "pass"  # ms a step; no GPU busy on a CPU
    assert (out / "checkup.md").read_text() == printed
    assert "targets" not in printed  # nothing to judge them by on a CPU
    assert json.loads((out / "profile-eager" / "profile.json").read_text())["device"] == "cpu"


def test_a_part_past_the_budget_is_stopped_and_the_next_is_not_started(tmp_path, capsys):
    out = tmp_path / "checkup"
    argv = ["checkup", "--device", "cpu", "--parts", "profile-eager,check", "--minutes", "0.02"]
    assert gpu.main([*argv, "--out", str(out)]) == 1
    printed = capsys.readouterr().out
    assert "check cut at the budget (1 s)" in printed  # the parts run in their order, not --parts'
    assert "profile-eager not run: no budget left" in printed


def test_the_targets_are_judged_from_the_parts_figures(tmp_path):
    (tmp_path / "profile-eager").mkdir()
    (tmp_path / "profile-step").mkdir()
    rows = [
        {"check": "transformer-gpu (amp auto)", "steady_tokens_per_s": 1_450_000.0, "bleu": "-"},
        {"check": "eval --split test --beam 4", "steady_tokens_per_s": "-", "bleu": 53.2},
    ]
    (tmp_path / "check.json").write_text(json.dumps({"rows": rows}))
    eager = [{"variant": "reference", "ok": True, "gpu_busy": 0.62, "host_syncs_per_step": 1.0}]
    step = [
        {"variant": "reference+step-capture", "ok": True, "gpu_busy": 0.93, "host_syncs_per_step": 0.0},
        {"variant": "reference+step", "ok": False, "gpu_busy": 0.99, "host_syncs_per_step": 0.0},  # failed
    ]
    (tmp_path / "profile-eager" / "profile.json").write_text(json.dumps({"variants": eager}))
    (tmp_path / "profile-step" / "profile.json").write_text(json.dumps({"variants": step}))
    assert gpu.targets(tmp_path) == [
        "- steady_tokens_per_s: 1450000.0 (met; aim 1.3e+06)",
        "- gpu_busy: 0.93 (met; aim 0.9)",  # the best variant that ran, not a failed one's figure
        "- host_syncs_per_step: 0.0 (met; aim 0)",
        "- bleu: 53.2 (missed; aim 53.5)",
    ]


# ----- make -----
def test_makes_gpu_targets_run_the_one_script_and_with_a_python_set_up_nothing(tmp_path):
    python = "PYTHON=/opt/cuda/bin/python3"
    check = make_dry_run(tmp_path, "gpu-check", python, "ARGS=--quick")
    assert check.strip().splitlines() == ["/opt/cuda/bin/python3 scripts/gpu.py check --quick"]
    checkup = make_dry_run(tmp_path, "gpu-checkup", python, "ARGS=--data fra-eng.zip")
    assert checkup.strip().splitlines() == ["/opt/cuda/bin/python3 scripts/gpu.py checkup --data fra-eng.zip"]
    profile = make_dry_run(tmp_path, "profile-step", python).strip().splitlines()
    assert profile == [
        "TORCH_LOGS=recompiles /opt/cuda/bin/python3 scripts/gpu.py profile --out runs/profile"
    ]
    default = make_dry_run(tmp_path, "gpu-check")
    assert "-m venv .venv" in default and "pip install" in default  # the ordinary way still works
    assert default.strip().splitlines()[-1] == ".venv/bin/python scripts/gpu.py check"
