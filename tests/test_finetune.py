"""Fine-tuning (--init-from): the parent's vocabularies and weights, a new optimiser, the lineage recorded."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from conftest import snapshot
from support.synthetic import MOTS, TINY, TINY_EVERY_STEP, WORDS, write_corpus

from attn_mt.config import load_config
from attn_mt.data.dataset import load_data
from attn_mt.run.checkpoint import load_checkpoint
from attn_mt.run.kept_checkpoints import INFERENCE_KEYS
from attn_mt.run.run_dir import read_metrics
from attn_mt.training.launch import train

SETTINGS = TINY_EVERY_STEP


@pytest.fixture(scope="module")
def parent(tmp_path_factory) -> Path:
    """tiny.yaml trained on the reverse task's eight words."""
    folder = tmp_path_factory.mktemp("parent")
    corpus = write_corpus(folder / "reverse.txt", n=300)
    train(load_config(TINY, SETTINGS), folder / "run", data_path=str(corpus), quiet=True, device="cpu")
    return folder / "run"


@pytest.fixture(scope="module")
def domain(tmp_path_factory) -> Path:
    """A new corpus: two known words and one the parent never saw in every sentence (4 tokens with '.')."""
    path = tmp_path_factory.mktemp("domain") / "domain.txt"
    lines = [
        f"{WORDS[i].capitalize()} {WORDS[j]} india.\tIndia {MOTS[j]} {MOTS[i]}.\n"
        for i in range(len(WORDS))
        for j in range(len(WORDS))
    ]
    path.write_text("".join(lines), encoding="utf-8")
    return path


def fine_tune(run_cli, parent_spec: str, domain: Path, run_dir: Path, *options: str):
    sets = [x for s in [*SETTINGS, "train.lr=0.000000001"] for x in ("--set", s)]
    args = ["train", str(TINY), "--data", str(domain), "--run-dir", str(run_dir), "-q", *sets]
    return run_cli(*args, "--init-from", parent_spec, *options)


def adam_steps(checkpoint: Path) -> int:
    return int(load_checkpoint(checkpoint)["optimizer"]["state"][0]["step"])


def test_fine_tuning_starts_from_the_parent_with_its_vocabularies(tmp_path, parent, domain, run_cli):
    child = tmp_path / "child"
    done = fine_tune(run_cli, str(parent), domain, child)
    assert done.returncode == 0, done.stderr
    for name in ("src_vocab.json", "tgt_vocab.json"):
        assert (child / name).read_text() == (parent / name).read_text()
    # the new corpus under the parent's vocabulary: "india" is <unk>, 1 token in 4 on both sides
    report = json.loads((child / "data_report.json").read_text())
    assert report["vocab_from"] == str(parent)
    for split in ("train", "valid", "test"):
        assert report["splits"][split]["unk_src"] == report["splits"][split]["unk_tgt"] == 0.25
    assert "vocabulary: source 13, target 13 tokens (the parent run's" in (child / "train.log").read_text()

    # the corpus prepared with its own words and with the parent's are two cache entries, in either order
    learned = load_data(load_config(TINY, SETTINGS).data, str(domain))
    assert "india" in learned.src_vocab.idx_to_token and "india" in learned.tgt_vocab.idx_to_token
    again = fine_tune(run_cli, str(parent), domain, tmp_path / "again")
    assert again.returncode == 0, again.stderr
    assert (
        json.loads((tmp_path / "again" / "data_report.json").read_text())["splits"]["train"]["unk_src"]
        == 0.25
    )

    # at lr 1e-9 the child's weights stay the parent's (best.pt) to 1e-6; a new model's would not
    weights = load_checkpoint(parent / "checkpoints" / "best.pt")["model"]
    tuned = load_checkpoint(child / "checkpoints" / "last.pt")["model"]
    assert all(torch.allclose(tuned[k], weights[k], rtol=0, atol=1e-6) for k in weights)
    steps = load_checkpoint(child / "checkpoints" / "last.pt")["step"]
    assert adam_steps(child / "checkpoints" / "last.pt") == steps  # a new optimiser: its own steps only
    assert [r["lr"] for r in read_metrics(child / "metrics.jsonl")] == [1e-9] * len(
        read_metrics(child / "metrics.jsonl")
    )

    parent_step = load_checkpoint(parent / "checkpoints" / "best.pt")["step"]
    validation = [
        r for r in read_metrics(parent / "metrics.jsonl") if "valid_loss" in r and r["step"] <= parent_step
    ]
    summary = json.loads((child / "run_summary.json").read_text())
    assert summary["parent"] == {
        "run_dir": str(parent.resolve()),
        "checkpoint": "best.pt",
        "step": parent_step,
        "scores": {"valid_loss": validation[-1]["valid_loss"], "valid_bleu": validation[-1]["valid_bleu"]},
        "optimizer": "new",
    }
    rows = json.loads(run_cli("runs", str(parent), str(child), "--json").stdout)
    assert [r["parent"] for r in rows] == [None, f"run@{parent_step}"]
    scored = run_cli(
        "eval", str(child), "--split", "test", "--device", "cpu"
    )  # held out under the parent's words
    assert scored.returncode == 0, scored.stderr
    assert len((child / "eval" / "test" / "hyp.txt").read_text().splitlines()) == 10
    assert run_cli("report", str(child)).returncode == 0
    page = (child / "report.html").read_text()
    assert f"fine-tuned from</th><td>{parent.resolve()} (best.pt, step {parent_step}, valid_loss" in page


def test_fine_tuning_can_keep_the_optimiser_and_resumes(tmp_path, parent, domain, run_cli):
    child = tmp_path / "child"
    started = fine_tune(
        run_cli,
        f"{parent}:last",
        domain,
        child,
        "--keep-optimizer",
        "--set",
        "train.max_steps=3",
        "--set",
        "train.epochs=6",
    )
    assert started.returncode == 0, started.stderr
    parent_steps = load_checkpoint(parent / "checkpoints" / "last.pt")["step"]
    assert adam_steps(child / "checkpoints" / "last.pt") == parent_steps + 3  # the parent's moments went on
    resumed = run_cli(
        "train",
        "--resume",
        "--run-dir",
        str(child),
        "--data",
        str(domain),
        "-q",
        "--set",
        "train.max_steps=5",
    )
    assert resumed.returncode == 0, resumed.stderr
    assert adam_steps(child / "checkpoints" / "last.pt") == parent_steps + 5
    assert json.loads((child / "run_summary.json").read_text())["parent"]["optimizer"] == "kept"
    assert [r["step"] for r in read_metrics(child / "metrics.jsonl") if "loss" in r] == [1, 2, 3, 4, 5]


def test_fine_tuning_names_every_difference_of_the_model(tmp_path, parent, domain, run_cli):
    refused = fine_tune(
        run_cli,
        str(parent),
        domain,
        tmp_path / "child",
        "--set",
        "model.num_hiddens=32",
        "--set",
        "model.num_heads=4",
    )
    assert refused.returncode == 2
    assert (
        f"--init-from: the model must be the parent run's (its weights and vocabularies are reused): "
        f"model.num_hiddens is 16 in {parent} but 32 here; model.num_heads is 2 in {parent} but 4 here"
    ) in refused.stderr
    assert not (tmp_path / "child").exists()
    dropout = fine_tune(run_cli, str(parent), domain, tmp_path / "child", "--set", "model.dropout=0.1")
    assert dropout.returncode == 0, dropout.stderr  # dropout changes no weight: it may be set anew
    other_optimizer = fine_tune(
        run_cli, str(parent), domain, tmp_path / "other", "--keep-optimizer", "--set", "train.optimizer=adamw"
    )
    assert other_optimizer.returncode == 2
    assert "--keep-optimizer: the parent run trained with train.optimizer 'adam'" in other_optimizer.stderr
    both = fine_tune(run_cli, str(parent), domain, tmp_path / "other", "--resume")
    assert both.returncode == 2 and "--init-from starts a new run from another one" in both.stderr
    alone = run_cli("train", str(TINY), "--run-dir", str(tmp_path / "other"), "--keep-optimizer")
    assert alone.returncode == 2 and "give --init-from" in alone.stderr


def test_refusals_leave_the_parent_and_the_run_directory_untouched(tmp_path, parent, domain, run_cli):
    """A checkpoint without optimiser state under --keep-optimizer, and a --run-dir that is the parent or
    holds it (which --overwrite would delete and --auto-resume would go on training), are refused at once."""
    own = Path(shutil.copytree(parent, tmp_path / "parent"))
    state = load_checkpoint(own / "checkpoints" / "last.pt")
    kept = own / "checkpoints" / "step-10.pt"  # as train.keep_checkpoints writes it: no optimiser state
    torch.save({k: state[k] for k in INFERENCE_KEYS}, kept)
    before = snapshot(own)

    no_state = fine_tune(run_cli, f"{own}:step-10", domain, tmp_path / "child", "--keep-optimizer")
    assert no_state.returncode == 2, no_state.stderr
    assert f"--keep-optimizer: {kept} holds no optimiser state" in no_state.stderr
    assert no_state.stderr.count("\n") == 1
    assert not (tmp_path / "child").exists()

    for run_dir, mode in ((own, "--overwrite"), (own, "--auto-resume"), (tmp_path, "--overwrite")):
        refused = fine_tune(run_cli, str(own), domain, run_dir, mode)
        assert refused.returncode == 2, refused.stderr
        assert f"--init-from {own}: --run-dir {run_dir} is the parent run or holds it" in refused.stderr
        assert snapshot(own) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["parent"]
