"""scripts/profile_step.py on the CPU: every figure printed and in profile.json, the traces, the FLOPs
arithmetic, the synthetic batches and the GPU-busy sum (from a made-up trace)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import torch
from support.helpers import load_script
from support.synthetic import TINY, TINY_RUN_SETTINGS, write_corpus

from attn_mt.config import load_config
from attn_mt.models.build import build_model
from attn_mt.training.flops import ModelFlops
from attn_mt.training.launch import train
from attn_mt.training.trainer import Trainer

profile_step = load_script("profile_step")
TINY_ARGS = [
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


def test_a_cpu_profile_prints_and_writes_every_figure(tmp_path, capsys):
    out = tmp_path / "profile"
    status = profile_step.main(
        [str(TINY), *TINY_ARGS, "--variants", "reference,auto", "--vocab", "60", "--out", str(out)]
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


def test_a_given_peak_gives_an_mfu_and_a_wrong_variant_is_refused(tmp_path, capsys):
    out = tmp_path / "profile"
    args = [str(TINY), *TINY_ARGS, "--variants", "reference", "--vocab", "60", "--out", str(out)]
    assert profile_step.main([*args, "--peak-tflops", "1.0"]) == 0
    variant = json.loads((out / "profile.json").read_text())["variants"][0]
    assert variant["mfu"] == pytest.approx(variant["tflops"] / 1.0) and variant["mfu"] > 0
    with pytest.raises(SystemExit) as refused:
        profile_step.parse_args([str(TINY), "--variants", "reference,turbo"])
    assert refused.value.code == 2 and "turbo" in capsys.readouterr().err


def test_the_printed_flops_are_the_trainers_definition_with_its_arithmetic():
    cfg = load_config(TINY, ["model.num_layers=2"])
    counts = ModelFlops.of(build_model(cfg.model, 60, 60))
    batches = profile_step.synthetic_batches(3, 256, 12, 60, seed=0)
    flops, text = profile_step.step_flops(counts, batches)
    assert flops == pytest.approx(sum(counts.step(b.src_lens, b.tgt_lens) for b in batches))
    src = sum(int(b.src_lens.sum()) for b in batches)
    tgt = sum(int(b.tgt_lens.sum()) for b in batches)
    assert f"{src:,} source tokens" in text and f"{tgt:,} target tokens" in text
    assert profile_step.step_flops(None, batches)[0] == 0.0  # a GRU: no MFU


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
    assert profile_step.attention_kernels(trace, steps=2) == {"cudnn": 0.5, "flash": 1.0, "efficient": 1.0}


def test_synthetic_batches_follow_the_budget_and_the_length_limit():
    batches = profile_step.synthetic_batches(30, 512, 12, 100, seed=3)
    assert len(batches) == 30
    for batch in batches:
        longest = torch.maximum(batch.src_lens, batch.tgt_lens).max()
        assert len(batch.src) * longest <= 512 or len(batch.src) == 1
        assert int(batch.src_lens.max()) <= 12 and int(batch.tgt_lens.max()) <= 12
        rows = torch.arange(len(batch.src))
        assert (batch.src[rows, batch.src_lens - 1] == 3).all() and (
            batch.tgt[rows, batch.tgt_lens - 1] == 3
        ).all()
        assert int(batch.src.max()) < 100
    stored = json.loads(profile_step.LENGTHS.read_text())
    assert sum(n for _, _, n in stored["joint"]) == stored["pairs"]


def test_gpu_busy_is_the_union_of_the_kernels_over_the_profiled_wall_time():
    assert profile_step.merged_length([(0, 4), (2, 6), (8, 9), (8.5, 8.7)]) == 7
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
    kernels, busy = profile_step.trace_figures(trace, steps=2)
    assert kernels == 1.5
    assert busy == pytest.approx(13 / 20)  # kernels cover 2..10 and 15..20 of 0..20
    assert profile_step.trace_figures({"traceEvents": []}, steps=2) == (None, None)


def test_the_peak_comes_from_the_card_name_or_the_command_line(monkeypatch):
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device: "NVIDIA H100 PCIe")
    assert profile_step.card_peak(torch.device("cuda"), None) == (756.0, "NVIDIA H100 PCIe")
    assert profile_step.card_peak(torch.device("cpu"), None) == (None, "cpu")
    assert profile_step.card_peak(torch.device("cpu"), 2.5) == (2.5, "cpu")


def test_the_profile_times_the_trainers_own_step_on_the_batches_train_trains_on(tmp_path, monkeypatch):
    """`attn-mt train` and the profile on one corpus: the same Trainer.train_step over the same batches, in
    the same order, with the same loss totals and metrics lines (their ms a step: docs/gpu.md)."""
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
    args = ["--warmup", "1", "--steps", "2", "--trace-steps", "1", "--variants", "reference"]
    overrides = [arg for setting in settings for arg in ("--set", setting)]
    assert (
        profile_step.main(
            [str(TINY), "--device", "cpu", "--data", str(corpus), *args, *overrides, "--out", str(out)]
        )
        == 0
    )
    assert calls == {"train": 4, "profile": 4}  # 1 warm-up + 2 timed + 1 traced
    assert len(seen["profile"]) == len(seen["train"]) == 4
    for ours, theirs in zip(seen["profile"], seen["train"], strict=True):
        for (src, tgt), (src_t, tgt_t) in zip(ours, theirs, strict=True):
            assert torch.equal(src, src_t) and torch.equal(tgt, tgt_t)
    profiled = [json.loads(line) for line in (out / "reference" / "metrics.jsonl").read_text().splitlines()]
    trained = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in profiled] == [r["step"] for r in trained if "loss" in r] == [2, 4]
    assert [r["loss"] for r in profiled] == [
        r["loss"] for r in trained if "loss" in r
    ]  # the same loss totals


def test_more_steps_than_one_epoch_holds_is_refused_with_the_epochs_size(tmp_path, capsys):
    corpus = write_corpus(tmp_path / "reverse.txt", n=300)
    settings = [*TINY_RUN_SETTINGS[:3], "train.threads=1"]
    overrides = [arg for setting in settings for arg in ("--set", setting)]
    args = ["--device", "cpu", "--data", str(corpus), "--variants", "reference", "--out", str(tmp_path)]
    status = profile_step.main([str(TINY), *args, *overrides, "--warmup", "0", "--steps", "500"])
    error = capsys.readouterr().err
    assert status == 2
    match = re.search(r"the training set's epoch has (\d+) batches, fewer than the 503 steps asked", error)
    assert match and 0 < int(match.group(1)) < 503
    assert "--warmup 0 + --steps 500 + --trace-steps 3" in error
