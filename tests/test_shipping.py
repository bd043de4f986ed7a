"""Shipping a model: kept checkpoints and averaging, int8 inference, the one-file export, ONNX."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from synthetic import write_corpus
from test_training import SYNTH, TINY, cli

from attn_mt.config import load_config
from attn_mt.errors import UserError
from attn_mt.shipping.average import average_checkpoints, average_run
from attn_mt.training.checkpoint import load_checkpoint, save_checkpoint
from attn_mt.training.run_dir import load_run
from attn_mt.training.trainer import train

SHIP = [
    *SYNTH,
    "model.num_hiddens=32",
    "model.ffn_num_hiddens=64",
    "model.num_layers=2",
    "train.epochs=12",
    "train.keep_checkpoints=3",
    "train.checkpoint_minutes=0",
]
SENTENCES = ["Alpha bravo.", "Charlie delta echo.", "Golf hotel alpha bravo.", "Echo foxtrot.",
             "Delta delta golf.", "Hotel charlie bravo alpha echo."]


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> Path:
    """A small Transformer trained on the reverse task, keeping its last 3 validation checkpoints."""
    folder = tmp_path_factory.mktemp("shipping")
    corpus = write_corpus(folder / "reverse.txt", n=300)
    cfg = load_config(TINY, [*SHIP, "train.lr=0.005"])
    train(cfg, folder / "run", data_path=str(corpus), quiet=True, device="cpu")
    return folder / "run"


def _state(values: dict[str, list[float]], config: dict | None = None, tgt: list[str] | None = None) -> dict:
    """A hand-made checkpoint state."""
    return {
        "model": {name: torch.tensor(v) for name, v in values.items()},
        "config": config or {"data": {"max_len": 10}, "model": {"type": "transformer", "num_hiddens": 2}},
        "src_vocab": ["<unk>", "<pad>", "a"],
        "tgt_vocab": tgt or ["<unk>", "<pad>", "b"],
        "step": 1,
    }


def test_keep_checkpoints_keeps_the_newest_named_by_step(trained):
    kept = sorted((trained / "checkpoints").glob("step-*.pt"), key=lambda p: int(p.stem.split("-")[1]))
    assert len(kept) == 3
    steps = [load_checkpoint(p)["step"] for p in kept]
    assert [p.name for p in kept] == [f"step-{s}.pt" for s in steps]
    assert steps[-1] == load_checkpoint(trained / "checkpoints" / "last.pt")["step"]
    state = load_checkpoint(kept[0])
    assert "optimizer" not in state and "valid_loss" in state["scores"]


def test_average_of_two_hand_made_checkpoints_is_the_elementwise_mean(tmp_path):
    first, second = tmp_path / "a.pt", tmp_path / "b.pt"
    save_checkpoint(_state({"w": [1.0, 2.0, 4.0], "b": [0.5]}), first)
    save_checkpoint(_state({"w": [3.0, -2.0, 5.0], "b": [1.5]}), second)
    averaged = average_checkpoints([first, second])
    assert torch.equal(averaged["model"]["w"], torch.tensor([2.0, 0.0, 4.5]))
    assert torch.equal(averaged["model"]["b"], torch.tensor([1.0]))
    assert averaged["averaged"] == ["a.pt", "b.pt"]


@pytest.mark.parametrize(
    ("other", "named"),
    [
        (_state({"w": [1.0, 2.0]}, config={"data": {"max_len": 10},
                                           "model": {"type": "transformer", "num_hiddens": 4}}),
         "model.num_hiddens is 2 in one and 4 in the other"),
        (_state({"w": [1.0, 2.0]}, tgt=["<unk>", "<pad>", "c"]), "tgt_vocab token 2 is 'b' in one and 'c'"),
        (_state({"w": [1.0, 2.0, 3.0]}), "weight w is (2,)"),
        (_state({"v": [1.0, 2.0]}), "weight v is in only one of them"),
    ],
)
def test_averaging_refuses_mismatches_naming_the_difference(tmp_path, other, named):
    save_checkpoint(_state({"w": [1.0, 2.0]}), tmp_path / "a.pt")
    save_checkpoint(other, tmp_path / "b.pt")
    with pytest.raises(UserError, match="cannot average a.pt with b.pt") as info:
        average_checkpoints([tmp_path / "a.pt", tmp_path / "b.pt"])
    assert named in str(info.value)


def test_average_command_writes_a_checkpoint_translate_accepts(trained):
    result = cli("average", str(trained), "--last", "3", "--out", "avg3")
    assert result.returncode == 0, result.stderr
    kept = sorted((trained / "checkpoints").glob("step-*.pt"))
    expected = average_checkpoints(kept)["model"]
    run = load_run(trained, "avg3")
    assert run.checkpoint.name == "avg3.pt"
    for name, tensor in run.model.state_dict().items():
        assert torch.allclose(tensor, expected[name]), name
    out = cli("translate", str(trained), "--checkpoint", "avg3", "--device", "cpu", *SENTENCES[:2])
    assert out.returncode == 0, out.stderr
    assert len(out.stdout.splitlines()) == 2


def test_average_best_ranks_by_the_runs_metric(trained):
    kept = sorted((trained / "checkpoints").glob("step-*.pt"))
    losses = {p: load_checkpoint(p)["scores"]["valid_loss"] for p in kept}
    best_two = sorted(kept, key=losses.get)[:2]
    path = average_run(trained, None, 2, "best2")
    assert sorted(load_checkpoint(path)["averaged"]) == sorted(p.name for p in best_two)


def test_average_refuses_too_few_kept_checkpoints(trained):
    result = cli("average", str(trained), "--last", "4")
    assert result.returncode == 2
    assert "holds 3 kept checkpoints (step-*.pt), fewer than 4" in result.stderr
    both = cli("average", str(trained), "--last", "2", "--best", "2")
    assert both.returncode == 2 and "give one of --last N or --best N" in both.stderr
