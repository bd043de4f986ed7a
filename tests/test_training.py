"""Training end to end: the CLI run, learning, checkpoints, metrics, exact resume and Ctrl-C."""

from __future__ import annotations

import json
import logging
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import yaml
from support.synthetic import write_corpus

from attn_mt.config import load_config
from attn_mt.data.splits import EvalExample
from attn_mt.data.vocab import Vocab
from attn_mt.errors import UserError
from attn_mt.models.build import build_model
from attn_mt.run.checkpoint import load_checkpoint, snapshot
from attn_mt.run.run_dir import read_metrics
from attn_mt.training.launch import count_parameters, train
from attn_mt.training.optim import build_optimizer
from attn_mt.training.timeline import read_timeline
from attn_mt.training.validation import spread_subset

ROOT = Path(__file__).resolve().parent.parent
TINY = ROOT / "configs" / "tiny.yaml"
SYNTH = [
    "data.valid_size=10",
    "data.test_size=10",
    "data.max_tokens=200",
    "train.log_every=5",
    "train.valid_max_sentences=10",
]


@pytest.fixture
def corpus(tmp_path: Path) -> Path:
    return write_corpus(tmp_path / "reverse.txt", n=300)


def losses(run_dir: Path) -> list[tuple]:
    """Everything in metrics.jsonl except wall-clock figures."""
    return [
        tuple(sorted((k, v) for k, v in r.items() if k not in ("tokens_per_s", "elapsed_s")))
        for r in read_metrics(run_dir / "metrics.jsonl")
    ]


def test_cli_trains_tiny_config_end_to_end(tmp_path, corpus, run_cli):
    run_dir = tmp_path / "run"
    result = run_cli(
        "train",
        str(TINY),
        "--data",
        str(corpus),
        "--run-dir",
        str(run_dir),
        "--quiet",
        *sum((["--set", s] for s in SYNTH), []),
    )
    assert result.returncode == 0, result.stderr
    for name in (
        "config.yaml",
        "src_vocab.json",
        "tgt_vocab.json",
        "metrics.jsonl",
        "train.log",
        "data_report.json",
        "curves.png",
        "checkpoints/last.pt",
        "checkpoints/best.pt",
    ):
        assert (run_dir / name).is_file(), name
    assert (run_dir / "curves.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    records = read_metrics(run_dir / "metrics.jsonl")
    train_records = [r for r in records if "loss" in r]
    assert train_records, records
    for r in train_records:
        assert {"step", "epoch", "loss", "tokens_per_s", "lr", "elapsed_s"} <= set(r)
        assert r["loss"] > 0 and r["tokens_per_s"] > 0
    valid = [r for r in records if "valid_bleu" in r]
    assert len(valid) == 3 and all(r["valid_loss"] > 0 for r in valid)
    # it learns: the last validation scores better than the first on both counts
    assert (
        valid[-1]["valid_loss"] < valid[0]["valid_loss"] and valid[-1]["valid_bleu"] > valid[0]["valid_bleu"]
    )
    state = load_checkpoint(run_dir / "checkpoints" / "last.pt")
    assert {
        "model",
        "optimizer",
        "scheduler",
        "rng",
        "step",
        "epoch",
        "config",
        "src_vocab",
        "tgt_vocab",
    } <= set(state)
    assert state["epoch"] == 3 and state["config"]["model"]["type"] == "transformer"
    assert state["tgt_vocab"][:4] == ["<unk>", "<pad>", "<bos>", "<eos>"]
    assert "model transformer with" in (run_dir / "train.log").read_text()

    again = run_cli("train", str(TINY), "--data", str(corpus), "--run-dir", str(run_dir))
    assert again.returncode == 2 and "already exists" in again.stderr and "Traceback" not in again.stderr


def test_train_without_a_config_runs_exactly_the_shipped_book_config(tmp_path, corpus, run_cli):
    run_dir = tmp_path / "run"
    result = run_cli(
        "train", "--data", str(corpus), "--run-dir", str(run_dir), "--quiet", "--set", "train.epochs=1"
    )
    assert result.returncode == 0, result.stderr
    saved = yaml.safe_load((run_dir / "config.yaml").read_text(encoding="utf-8"))
    assert saved == load_config(ROOT / "configs" / "d2l_bahdanau.yaml", ["train.epochs=1"]).to_dict()
    default, shipped = tmp_path / "default.json", tmp_path / "shipped.json"
    for extra, out in (([], default), ([str(ROOT / "configs" / "d2l_bahdanau.yaml")], shipped)):
        report = run_cli("data-report", *extra, "--data", str(corpus), "--json", str(out))
        assert report.returncode == 0, report.stderr
    untimed = [json.loads(out.read_text()) | {"seconds": 0} for out in (default, shipped)]
    assert untimed[0] == untimed[1]


@pytest.mark.parametrize("model_type", ["gru_bahdanau", "transformer"])
def test_loss_falls_on_reverse_task(tmp_path, corpus, model_type):
    sizes = ["model.num_hiddens=32", "model.embed_size=32", "model.num_layers=2", "model.ffn_num_hiddens=64"]
    rate = "train.lr=0.01" if model_type == "gru_bahdanau" else "train.lr=0.005"
    cfg = load_config(TINY, [*SYNTH, f"model.type={model_type}", *sizes, rate, "train.epochs=15"])
    result = train(cfg, tmp_path / "run", data_path=str(corpus), quiet=True, device="cpu")
    records = [r for r in read_metrics(tmp_path / "run" / "metrics.jsonl") if "epoch_loss" in r]
    assert records[-1]["epoch_loss"] < 0.4 * records[0]["epoch_loss"], records
    valid = [r for r in read_metrics(tmp_path / "run" / "metrics.jsonl") if "valid_bleu" in r]
    assert valid[-1]["valid_loss"] < valid[0]["valid_loss"], valid
    assert max(r["valid_bleu"] for r in valid) > valid[0]["valid_bleu"], valid
    assert result.stopped_because == "epochs"
    summary = json.loads((tmp_path / "run" / "run_summary.json").read_text(encoding="utf-8"))
    model = build_model(
        cfg.model,
        len(Vocab.load(tmp_path / "run" / "src_vocab.json")),
        len(Vocab.load(tmp_path / "run" / "tgt_vocab.json")),
    )
    assert summary["model"] == model_type and summary["parameters"] == count_parameters(model)
    assert summary["steps"] == result.step and summary["stop_reason"] == "epochs"
    assert summary["tokens_per_s"] == round(result.tokens_per_s, 1) > 0
    assert summary["kernels"] == "cpu" and summary["device"] == "cpu"


RESUME_CASES = {
    "tiny": (TINY, ["model.dropout=0.2"]),
    # the plateau schedule of configs/bahdanau.yaml, shrunk: every validation can halve the lr
    "bahdanau-plateau": (
        ROOT / "configs" / "bahdanau.yaml",
        [
            "model.embed_size=16",
            "model.num_hiddens=16",
            "data.vocab_size=300",
            "train.amp=none",
            "train.threads=1",
            "train.plateau_patience=0",
            "train.best_metric=valid_loss",
            "train.lr=0.05",
        ],
    ),
}


@pytest.mark.parametrize("case", sorted(RESUME_CASES))
def test_resume_reproduces_uninterrupted_run_exactly(tmp_path, corpus, case):
    """Stopped by max_steps between two validations (which validates once more), then resumed."""
    config, extra = RESUME_CASES[case]
    overrides = [
        *SYNTH,
        "train.epochs=2",
        "train.log_every=1",
        "train.valid_every=3",
        "train.timeline=true",
        *extra,
    ]
    straight = tmp_path / "straight"
    train(load_config(config, overrides), straight, data_path=str(corpus), quiet=True, device="cpu")
    resumed = tmp_path / "resumed"
    first = train(
        load_config(config, [*overrides, "train.max_steps=5"]),
        resumed,
        data_path=str(corpus),
        quiet=True,
        device="cpu",
    )
    assert first.stopped_because == "max_steps" and first.step == 5
    assert [r["step"] for r in read_metrics(resumed / "metrics.jsonl") if r.get("final")] == [5]
    second = train(
        None,
        resumed,
        overrides=["train.max_steps=0"],
        data_path=str(corpus),
        resume=True,
        quiet=True,
        device="cpu",
    )
    assert second.stopped_because == "epochs"
    assert losses(resumed) == losses(straight)
    # the timeline too: the first session's final point (step 5) is dropped on resume, as in metrics.jsonl
    timelines = [read_timeline(run / "timeline.jsonl") for run in (straight, resumed)]
    assert [[(p.step, p.outputs, p.scores) for p in t.points] for t in timelines if t] == 2 * [
        [(p.step, p.outputs, p.scores) for p in timelines[0].points]
    ]
    lrs = {r["lr"] for r in read_metrics(straight / "metrics.jsonl")}
    assert len(lrs) > 1 if case == "bahdanau-plateau" else lrs == {0.005}
    a = load_checkpoint(straight / "checkpoints" / "last.pt")
    b = load_checkpoint(resumed / "checkpoints" / "last.pt")
    assert a["model"].keys() == b["model"].keys()
    assert all(torch.equal(a["model"][k], b["model"][k]) for k in a["model"])
    assert a["scheduler"] == b["scheduler"]
    assert {k: v for k, v in a["progress"].items() if k != "elapsed_s"} == {
        k: v for k, v in b["progress"].items() if k != "elapsed_s"
    }


def test_resume_refuses_model_changes(tmp_path, corpus):
    run_dir = tmp_path / "run"
    train(
        load_config(TINY, [*SYNTH, "train.max_steps=2"]),
        run_dir,
        data_path=str(corpus),
        quiet=True,
        device="cpu",
    )
    with pytest.raises(UserError, match="may not change the model section"):
        train(
            None, run_dir, overrides=["model.num_hiddens=32"], data_path=str(corpus), resume=True, quiet=True
        )


def test_resume_records_the_config_it_runs_with(tmp_path, corpus):
    """--resume --set and --resume CONFIG change train/decode keys; config.yaml and its history say so."""
    from attn_mt.run.run_dir import load_run

    run_dir = tmp_path / "run"
    first = load_config(TINY, [*SYNTH, "train.log_every=1", "train.max_steps=2"])
    train(first, run_dir, data_path=str(corpus), quiet=True, device="cpu")
    changed = ["decode.beam_size=5", "train.max_steps=4"]
    train(None, run_dir, overrides=changed, data_path=str(corpus), resume=True, quiet=True, device="cpu")
    expected = load_config(TINY, [*SYNTH, "train.log_every=1", *changed])
    assert load_run(run_dir).config.to_dict() == expected.to_dict()
    log = (run_dir / "train.log").read_text(encoding="utf-8")
    assert "--resume: from step 2 the run uses train.max_steps 2 -> 4; decode.beam_size 2 -> 5" in log

    edited = tmp_path / "edited.yaml"
    text = TINY.read_text(encoding="utf-8")
    edited.write_text(text.replace("beam_size: 2", "beam_size: 3"), encoding="utf-8")
    given = load_config(edited, [*SYNTH, "train.log_every=1", "train.max_steps=6"])
    result = train(given, run_dir, data_path=str(corpus), resume=True, quiet=True, device="cpu")
    assert result.step == 6
    assert load_run(run_dir).config.to_dict() == given.to_dict()
    assert load_checkpoint(run_dir / "checkpoints" / "last.pt")["config"] == given.to_dict()
    history = [json.loads(line) for line in (run_dir / "config_history.jsonl").read_text().splitlines()]
    assert history == [
        {"step": 2, "changes": {"train.max_steps": [2, 4], "decode.beam_size": [2, 5]}},
        {"step": 4, "changes": {"train.max_steps": [4, 6], "decode.beam_size": [5, 3]}},
    ]
    for how in ("--set", "CONFIG"):
        new_lr = load_config(edited, [*SYNTH, "train.log_every=1", "train.max_steps=8", "train.lr=0.002"])
        with pytest.raises(UserError, match="train.lr cannot change in a resumed run"):
            train(
                new_lr if how == "CONFIG" else None,
                run_dir,
                overrides=["train.lr=0.002"] if how == "--set" else [],
                data_path=str(corpus),
                resume=True,
                quiet=True,
            )
    assert load_run(run_dir).config.to_dict() == given.to_dict()

    # a run saved before the decode bounds existed: resumed with its beam brought to 16, and recorded so
    saved = yaml.safe_load((run_dir / "config.yaml").read_text(encoding="utf-8"))
    saved["decode"]["beam_size"] = 20
    (run_dir / "config.yaml").write_text(yaml.safe_dump(saved, sort_keys=False), encoding="utf-8")
    result = train(
        None,
        run_dir,
        overrides=["train.max_steps=7"],
        data_path=str(corpus),
        resume=True,
        quiet=True,
        device="cpu",
    )
    assert result.step == 7 and load_config(run_dir / "config.yaml").decode.beam_size == 16
    last = json.loads((run_dir / "config_history.jsonl").read_text().splitlines()[-1])
    assert last == {"step": 6, "changes": {"train.max_steps": [6, 7], "decode.beam_size": [20, 16]}}
    with pytest.raises(UserError, match="decode.beam_size: must be from 1 to 16, got 17"):
        train(
            None, run_dir, overrides=["decode.beam_size=17"], data_path=str(corpus), resume=True, quiet=True
        )


def test_sigint_saves_last_checkpoint_and_resume_finishes(tmp_path, corpus, run_cli):
    run_dir = tmp_path / "run"
    args = [
        "train",
        str(TINY),
        "--data",
        str(corpus),
        "--run-dir",
        str(run_dir),
        "--quiet",
        *sum((["--set", s] for s in SYNTH), []),
        "--set",
        "train.epochs=400",
        "--set",
        "train.log_every=1",
    ]
    proc = subprocess.Popen(
        [sys.executable, "-m", "attn_mt", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    metrics = run_dir / "metrics.jsonl"
    deadline = time.time() + 120
    while time.time() < deadline and (not metrics.exists() or len(metrics.read_text().splitlines()) < 3):
        time.sleep(0.1)
    proc.send_signal(signal.SIGINT)
    _, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 130, stderr
    assert f"attn-mt train --resume --run-dir {run_dir}" in stderr
    state = load_checkpoint(run_dir / "checkpoints" / "last.pt")
    assert 0 < state["step"] < 400 * 20
    done = run_cli(
        "train",
        "--resume",
        "--run-dir",
        str(run_dir),
        "--data",
        str(corpus),
        "--quiet",
        "--set",
        "train.epochs=" + str(state["epoch"] + 1),
    )
    assert done.returncode == 0, done.stderr
    assert load_checkpoint(run_dir / "checkpoints" / "last.pt")["epoch"] == state["epoch"] + 1


def test_snapshot_is_not_changed_by_later_training():
    """The best state kept in memory must not follow the live weights, optimiser state or lists."""
    weight = torch.ones(3)
    state = {"model": {"w": weight}, "betas": (0.9, 0.98), "vocab": ["<unk>", "va"], "step": 4}
    kept = snapshot(state)
    weight.add_(1.0)
    state["vocab"].append("!")
    assert torch.equal(kept["model"]["w"], torch.ones(3))
    assert kept["vocab"] == ["<unk>", "va"]
    assert kept["betas"] == (0.9, 0.98) and isinstance(kept["betas"], tuple)
    assert kept["step"] == 4


def test_optimizer_is_fused_on_cpu():
    """CPU training uses the single-kernel Adam, and it updates like the per-tensor one."""
    cfg = load_config(None, ["train.lr=0.1"]).train
    torch.manual_seed(0)
    fused_model, plain_model = torch.nn.Linear(4, 3), torch.nn.Linear(4, 3)
    plain_model.load_state_dict(fused_model.state_dict())
    fused = build_optimizer(fused_model, cfg)
    plain = torch.optim.Adam(plain_model.parameters(), lr=0.1, foreach=False)
    assert fused.defaults["fused"] is True
    x = torch.randn(5, 4)
    for model, optimizer in ((fused_model, fused), (plain_model, plain)):
        for _ in range(3):
            optimizer.zero_grad()
            model(x).pow(2).sum().backward()
            optimizer.step()
    for a, b in zip(fused_model.parameters(), plain_model.parameters(), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


def test_validation_subset_spreads_over_the_held_out_list():
    examples = [EvalExample(f"s{i}", [f"r{i}"]) for i in range(10)]
    assert [e.src for e in spread_subset(examples, 4)] == ["s0", "s2", "s5", "s7"]
    assert spread_subset(examples, 0) == examples
    assert spread_subset(examples, 50) == examples


def test_auto_resume_starts_resumes_or_refuses_with_one_command_line(tmp_path, corpus, run_cli):
    """--auto-resume: a new run where there is none, the same run continued, other folders kept."""
    run_dir = tmp_path / "run"
    settings = [*SYNTH, "train.log_every=1", "train.epochs=2"]
    straight = tmp_path / "straight"
    train(load_config(TINY, settings), straight, data_path=str(corpus), quiet=True, device="cpu")

    def auto(*extra: str):
        sets = [x for s in [*settings, *extra] for x in ("--set", s)]
        return run_cli(
            "train", str(TINY), "--data", str(corpus), "--run-dir", str(run_dir), "-q", "--auto-resume", *sets
        )

    assert auto("train.max_steps=3").returncode == 0  # no run directory: a new run
    assert load_checkpoint(run_dir / "checkpoints" / "last.pt")["step"] == 3
    assert auto().returncode == 0  # the same command line, without the step limit: resumed from step 3
    assert losses(run_dir) == losses(straight)
    assert "resumed at step 3" in (run_dir / "train.log").read_text(encoding="utf-8")

    new_lr = auto("train.lr=0.5")  # a resumed run's refusals name the option given
    assert new_lr.returncode == 2 and "--auto-resume: train.lr cannot change" in new_lr.stderr

    (run_dir / "checkpoints" / "last.pt").unlink()  # a trained run without last.pt keeps its checkpoints
    before = {p: p.read_bytes() for p in run_dir.rglob("*") if p.is_file()}
    kept = auto()
    assert kept.returncode == 2
    assert f"--auto-resume: {run_dir} has checkpoints (best.pt) but no last.pt" in kept.stderr
    assert {p: p.read_bytes() for p in run_dir.rglob("*") if p.is_file()} == before

    shutil.rmtree(run_dir / "checkpoints")  # a run lost before its first checkpoint is started again
    assert auto().returncode == 0
    assert losses(run_dir) == losses(straight)
    assert (run_dir / "train.log").read_text(encoding="utf-8").count("(new run)") == 1

    other = tmp_path / "other"
    other.mkdir()
    (other / "notes.txt").write_text("mine", encoding="utf-8")
    run_dir = other
    refused = auto()
    assert refused.returncode == 2
    assert "--auto-resume: " in refused.stderr and "not an attn-mt run directory" in refused.stderr
    assert (other / "notes.txt").read_text(encoding="utf-8") == "mine"
    both = run_cli("train", str(TINY), "--run-dir", str(other), "--auto-resume", "--resume")
    assert both.returncode == 2 and "contradict each other" in both.stderr


def test_in_process_training_leaves_no_log_file_attached(tmp_path, corpus):
    """train() detaches train.log from the attn_mt logger when it ends, also when it fails midway."""

    def file_handlers() -> list[logging.Handler]:
        return [h for h in logging.getLogger("attn_mt").handlers if isinstance(h, logging.FileHandler)]

    cfg = load_config(TINY, [*SYNTH, "train.max_steps=2", "train.valid_every=1"])
    train(cfg, tmp_path / "run", data_path=str(corpus), quiet=True, device="cpu")
    assert file_handlers() == []

    def fail(trainer) -> None:
        raise RuntimeError("stopped by the test")

    with pytest.raises(RuntimeError, match="stopped by the test"):
        train(cfg, tmp_path / "failed", data_path=str(corpus), quiet=True, device="cpu", on_validation=fail)
    assert (tmp_path / "failed" / "train.log").exists()
    assert file_handlers() == []


def test_the_first_validation_writes_last_pt_whatever_checkpoint_minutes_says(tmp_path, corpus):
    """A kept step-N.pt never exists without a last.pt: a run killed after its first validation is one
    that --auto-resume continues, not one it refuses."""
    seen: list[tuple[int, bool, bool]] = []

    def look(trainer) -> None:
        folder = trainer.paths.checkpoints
        seen.append((trainer.progress.step, (folder / "last.pt").exists(), any(folder.glob("step-*.pt"))))

    settings = [*SYNTH, "train.max_steps=4", "train.valid_every=2", "train.keep_checkpoints=2"]
    cfg = load_config(TINY, [*settings, "train.checkpoint_minutes=60"])
    train(cfg, tmp_path / "run", data_path=str(corpus), quiet=True, device="cpu", on_validation=look)
    assert seen[0] == (2, True, True)
    assert load_checkpoint(tmp_path / "run" / "checkpoints" / "last.pt")["step"] == 4


def test_a_refusal_before_the_first_checkpoint_leaves_no_run_directory(tmp_path, corpus, monkeypatch):
    """A new run refused while training, before it saved anything, is removed (an empty directory given
    for it is emptied again), so the same command starts it afresh without --overwrite."""
    from attn_mt.training import validation

    def refuse(self):
        raise UserError("refused at the first validation")

    cfg = load_config(TINY, [*SYNTH, "train.epochs=1"])
    given = tmp_path / "given"
    given.mkdir()
    with monkeypatch.context() as patch:
        patch.setattr(validation.Validator, "run", refuse)
        for run_dir in (tmp_path / "new", given):
            with pytest.raises(UserError, match="refused at the first validation"):
                train(cfg, run_dir, data_path=str(corpus), quiet=True, device="cpu")
    assert not (tmp_path / "new").exists() and given.is_dir() and not any(given.iterdir())
    train(cfg, tmp_path / "new", data_path=str(corpus), quiet=True, device="cpu")
    assert (tmp_path / "new" / "checkpoints" / "last.pt").is_file()


def test_a_run_stopped_before_its_first_log_line_reports_its_loss(tmp_path, corpus):
    cfg = load_config(TINY, [*SYNTH, "train.max_steps=2", "train.log_every=100", "train.valid_every=0"])
    result = train(cfg, tmp_path / "run", data_path=str(corpus), quiet=True, device="cpu")
    summary = json.loads((tmp_path / "run" / "run_summary.json").read_text(encoding="utf-8"))
    assert result.step == 2 and summary["stop_reason"] == "max_steps"
    assert not any("epoch_loss" in r for r in read_metrics(tmp_path / "run" / "metrics.jsonl"))
    assert summary["final_loss"] is not None and 0 < summary["final_loss"] == round(result.final_loss, 5)
