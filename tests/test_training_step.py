"""What the training step does for speed keeps the maths: trimmed padding, `train.kernels: cpu`.

Shapes: B batch, S source steps, T target steps, V target vocabulary.
`reference` is the book and torch only; `cpu` (every CPU speed measure of attn_mt/kernels) must
compute the same losses and gradients.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from support.graphs import graph_names
from support.synthetic import write_corpus

from attn_mt.config import load_config
from attn_mt.data.batch import Batch
from attn_mt.data.dataset import load_data
from attn_mt.data.vocab import Vocab
from attn_mt.kernels.cpu import chunked_loss as kernel_loss
from attn_mt.kernels.cpu import dropout as kernel_dropout
from attn_mt.kernels.cpu.chunked_loss import CpuLoss
from attn_mt.kernels.cpu.flat_parameters import FlatParameters
from attn_mt.models import GRUBahdanau, Transformer
from attn_mt.run import device as device_module
from attn_mt.run.run_dir import RunPaths, read_metrics
from attn_mt.training import precision as precision_module
from attn_mt.training import trainer as trainer_module
from attn_mt.training.launch import train
from attn_mt.training.loss import masked_cross_entropy
from attn_mt.training.optim import build_optimizer, xavier_init_
from attn_mt.training.precision import faster_mode, time_modes
from attn_mt.training.speed import PlainTorch
from attn_mt.training.trainer import Trainer

ROOT = Path(__file__).resolve().parent.parent
TINY = ROOT / "configs" / "tiny.yaml"


def book_batch() -> Batch:
    """Four sentences padded to a book-mode width of 10 although the longest are 6 and 5 tokens."""
    torch.manual_seed(0)
    src_lens, tgt_lens = torch.tensor([6, 2, 4, 1]), torch.tensor([3, 5, 1, 2])
    src = torch.randint(3, 20, (4, 10)) * (torch.arange(10) < src_lens[:, None])  # pad id 0
    tgt = torch.randint(3, 20, (4, 10)) * (torch.arange(10) < tgt_lens[:, None])
    return Batch(src, src_lens, tgt, tgt_lens)


def book_loss(model: torch.nn.Module, batch: Batch, width: int) -> torch.Tensor:
    """The book's loss (each sentence averaged over `width` steps, summed over the batch)."""
    tgt_in = torch.cat([torch.ones(batch.tgt.shape[0], 1, dtype=torch.long), batch.tgt[:, :-1]], dim=1)
    logits = model(batch.src, batch.src_lens, tgt_in)  # (B, T, V)
    return masked_cross_entropy(logits, batch.tgt, batch.tgt_lens) / width


def test_trimmed_drops_only_all_padding_columns():
    batch = book_batch()
    both, target_only = batch.trimmed(source=True), batch.trimmed(source=False)
    assert both.src.shape == (4, 6) and both.tgt.shape == (4, 5)
    assert target_only.src.shape == (4, 10) and target_only.tgt.shape == (4, 5)
    assert torch.equal(both.src, batch.src[:, :6]) and both.num_tgt_tokens == batch.num_tgt_tokens


@pytest.mark.parametrize("kind", ["transformer", "bahdanau"])
def test_trimming_keeps_the_book_loss_and_its_gradients(kind):
    torch.manual_seed(1)
    if kind == "transformer":
        model = Transformer(20, 20, 8, 16, 2, 2, 0.0).double()
    else:
        model = GRUBahdanau(20, 20, 6, 8, 2, 0.0, pack_padded=False).double()
    xavier_init_(model)
    batch = book_batch()
    full = book_loss(model, batch, 10)
    trimmed = book_loss(model, batch.trimmed(source=not model.reads_source_padding), 10)
    torch.testing.assert_close(trimmed, full, rtol=1e-12, atol=1e-12)
    params = list(model.parameters())
    for a, b in zip(torch.autograd.grad(trimmed, params), torch.autograd.grad(full, params), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-12)


def test_the_book_gru_reads_its_source_padding():
    """Why Bahdanau keeps its source width: the unpacked GRU's final state has read the padding."""
    torch.manual_seed(2)
    book = GRUBahdanau(20, 20, 6, 8, 2, 0.0, pack_padded=False).double()
    packed = GRUBahdanau(20, 20, 6, 8, 2, 0.0, pack_padded=True).double()
    assert book.reads_source_padding and not packed.reads_source_padding
    assert not Transformer(20, 20, 8, 16, 2, 2, 0.0).reads_source_padding
    batch = book_batch()
    cut = batch.trimmed(source=True)
    assert not torch.allclose(book_loss(book, cut, 10), book_loss(book, batch, 10))
    torch.testing.assert_close(book_loss(packed, cut, 10), book_loss(packed, batch, 10))


def test_flat_parameters_train_exactly_like_separate_ones():
    cfg = load_config(None, ["train.lr=0.01", "train.optimizer=adamw", "train.weight_decay=0.01"]).train
    torch.manual_seed(3)
    flat_model = Transformer(20, 20, 8, 16, 2, 2, 0.0)
    plain_model = Transformer(20, 20, 8, 16, 2, 2, 0.0)
    plain_model.load_state_dict(flat_model.state_dict())
    flat = FlatParameters(flat_model)
    flat_opt = build_optimizer(flat.tensors, cfg)
    plain_opt = build_optimizer(plain_model, cfg)
    batch = book_batch()
    for _ in range(3):
        flat.zero_grad()
        plain_opt.zero_grad(set_to_none=True)
        book_loss(flat_model, batch, 10).backward()
        flat.gather_grads()
        book_loss(plain_model, batch, 10).backward()
        torch.nn.utils.clip_grad_norm_([flat.flat], 1.0)
        torch.nn.utils.clip_grad_norm_(list(plain_model.parameters()), 1.0)
        flat_opt.step()
        plain_opt.step()
    for (name, a), b in zip(flat_model.state_dict().items(), plain_model.state_dict().values(), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6, msg=name)
    per_param = flat.to_checkpoint(flat_opt.state_dict())
    plain_state = plain_opt.state_dict()
    assert per_param["param_groups"] == plain_state["param_groups"]
    for i, state in plain_state["state"].items():
        for key, value in state.items():
            torch.testing.assert_close(per_param["state"][i][key], value, rtol=1e-5, atol=1e-7)
    reloaded = build_optimizer(flat.tensors, cfg)
    reloaded.load_state_dict(flat.from_checkpoint(per_param))
    for key, value in flat_opt.state_dict()["state"][0].items():
        assert torch.equal(reloaded.state_dict()["state"][0][key], value)


@pytest.mark.parametrize("model_type", ["transformer", "gru_bahdanau"])
def test_cpu_kernels_train_like_the_reference_path(tmp_path, monkeypatch, model_type):
    """train.kernels: cpu (kernels, output-layer loss, flat parameters) follows `reference` step by step."""
    corpus = write_corpus(tmp_path / "reverse.txt", n=200)
    calls = []
    loss = kernel_loss.output_layer_loss

    def spy(*args):
        calls.append(args[0].shape)
        return loss(*args)

    monkeypatch.setattr(kernel_loss, "output_layer_loss", spy)
    overrides = [
        f"model.type={model_type}",
        "data.valid_size=10",
        "data.test_size=10",
        "data.max_tokens=200",
        "train.epochs=2",
        "train.log_every=1",
        "train.label_smoothing=0.1",
        "model.dropout=0.0",  # the kernels draw dropout masks differently from torch's nn.Dropout
    ]
    losses = {}
    monkeypatch.setattr(CpuLoss, "min_logits_bytes", 0)  # these batches' logits are tiny
    for kernels in ("cpu", "reference"):
        calls.clear()
        run_dir = tmp_path / kernels
        cfg = load_config(TINY, [*overrides, f"train.kernels={kernels}"])
        train(cfg, run_dir, data_path=str(corpus), quiet=True, device="cpu")
        losses[kernels] = [r["loss"] for r in read_metrics(run_dir / "metrics.jsonl") if "loss" in r]
        assert bool(calls) == (kernels == "cpu")  # the output-layer loss really ran (or really did not)
        summary = json.loads((run_dir / "run_summary.json").read_text())
        assert summary["kernels"] == kernels
    assert len(losses["cpu"]) >= 8
    torch.testing.assert_close(losses["cpu"], losses["reference"], rtol=1e-4, atol=1e-5)


def test_small_logits_take_the_logits_path_and_large_ones_the_output_layer(tmp_path, monkeypatch):
    """Batches are scored through the output layer only when their logits would reach min_logits_bytes."""
    corpus = write_corpus(tmp_path / "reverse.txt", n=200)
    calls = []
    through_layer, over_logits = kernel_loss.output_layer_loss, kernel_loss.token_cross_entropy

    def layer_spy(hidden, *args):
        calls.append(("output layer", hidden.shape))
        return through_layer(hidden, *args)

    def logits_spy(logits, *args):
        calls.append(("logits", logits.shape))
        return over_logits(logits, *args)

    monkeypatch.setattr(kernel_loss, "output_layer_loss", layer_spy)
    monkeypatch.setattr(kernel_loss, "token_cross_entropy", logits_spy)
    overrides = ["data.valid_size=10", "data.test_size=10", "train.epochs=1", "train.max_steps=2"]
    cfg = load_config(TINY, overrides)
    train(cfg, tmp_path / "plain", data_path=str(corpus), quiet=True, device="cpu")
    vocab = len(Vocab.load(tmp_path / "plain" / "tgt_vocab.json"))
    assert vocab != cfg.model.num_hiddens
    assert calls and all(kind == "logits" and shape[-1] == vocab for kind, shape in calls)  # (N, V)
    calls.clear()
    monkeypatch.setattr(CpuLoss, "min_logits_bytes", 1)
    train(cfg, tmp_path / "chunked", data_path=str(corpus), quiet=True, device="cpu")
    assert calls and all(kind == "output layer" for kind, _ in calls)
    assert all(shape[-1] == cfg.model.num_hiddens for _, shape in calls)  # (M, H) hidden states


KERNEL_NODES = {
    f"{name}Backward"
    for name in (
        "_EncoderLoop",
        "_DecoderLoop",
        "EncoderBlockFunction",
        "DecoderBlockFunction",
        "_PackedAttention",
        "TokenCrossEntropy",
        "LinearCrossEntropy",
    )
}
DOUBLE_RUN = [
    "data.valid_size=10",
    "data.test_size=10",
    "model.num_layers=2",  # dropout between GRU layers too
    "model.pack_padded=false",  # the unpacked encoder has its own kernel
    "model.dropout=0.2",
    "train.label_smoothing=0.1",  # the CPU path's chunked cross-entropy
]


def double_trainer(tmp_path: Path, monkeypatch, corpus: Path, kernels: str, model_type: str) -> Trainer:
    """A Trainer of a float64 model, seeded as every other: the same initial weights whatever `kernels`."""
    cfg = load_config(TINY, [*DOUBLE_RUN, f"model.type={model_type}", f"train.kernels={kernels}"])
    build = trainer_module.build_model
    monkeypatch.setattr(trainer_module, "build_model", lambda *args: build(*args).double())
    torch.manual_seed(0)
    return Trainer(cfg, RunPaths(tmp_path / kernels), load_data(cfg.data, str(corpus)), torch.device("cpu"))


def torch_dropout_with_kernel_masks(x, p=0.5, training=True, inplace=False):
    """torch.nn.Dropout's F.dropout, drawing its mask as kernels/cpu/dropout.py does (see the test below)."""
    return kernel_dropout.dropout(x, p, training)


@pytest.mark.parametrize("through_output_layer", [False, True], ids=["logits", "output-layer"])
@pytest.mark.parametrize("model_type", ["gru_bahdanau", "transformer"])
def test_cpu_step_equals_the_reference_step_in_float64_with_dropout(
    tmp_path, monkeypatch, model_type, through_output_layer
):
    """One training step's loss and every parameter's gradient: `cpu` equals `reference` to 1e-6.

    Dropout is on. The kernels draw a Bernoulli mask from torch.rand where torch's CPU dropout
    draws it with bernoulli_ (kernels/cpu/dropout.py); the reference run's nn.Dropout draws it the
    kernels' way here, so both paths drop the same elements and every other number must agree.
    The reference step's autograd graph holds no kernel node, the cpu step's does.
    """
    corpus = write_corpus(tmp_path / "reverse.txt", n=120)
    if through_output_layer:
        monkeypatch.setattr(CpuLoss, "min_logits_bytes", 0)
    results = {}
    for kernels in ("cpu", "reference"):
        trainer = double_trainer(tmp_path, monkeypatch, corpus, kernels, model_type)
        trainer.model.train()
        batch = trainer.data.train.collate(trainer.data.train.plan(0, 0)[0])
        with monkeypatch.context() as patch:
            if kernels == "reference":
                patch.setattr(F, "dropout", torch_dropout_with_kernel_masks)
            torch.manual_seed(5)
            objective, loss = trainer._objective(batch, "none")
        objective.backward()
        trainer.params.gather_grads()
        grads = {name: p.grad.clone() for name, p in trainer.model.named_parameters()}
        results[kernels] = (objective, loss, grads, graph_names(objective), trainer)
    cpu, ref = results["cpu"], results["reference"]
    assert isinstance(ref[4].speed, PlainTorch) and not KERNEL_NODES & ref[3]
    assert KERNEL_NODES & cpu[3] and ("LinearCrossEntropyBackward" in cpu[3]) == through_output_layer
    torch.testing.assert_close(cpu[0], ref[0], rtol=0, atol=1e-6)
    assert abs(cpu[1] - ref[1]) < 1e-6
    for name, grad in ref[2].items():
        torch.testing.assert_close(cpu[2][name], grad, rtol=0, atol=1e-6, msg=name)
    flat = cpu[4].params.tensors[0].grad  # (N,): the flat gradient the optimiser steps on
    torch.testing.assert_close(flat, torch.cat([g.reshape(-1) for g in ref[2].values()]), rtol=0, atol=1e-6)
    with torch.no_grad():  # dropout really ran: without it the loss differs
        ref[4].model.eval()
        assert abs(float(ref[4]._objective(batch, "none")[0]) - float(ref[0])) > 1e-4


REFERENCE_STEP = """
import json, sys
from pathlib import Path
from attn_mt.config import load_config
from attn_mt.training.launch import train
from attn_mt.training.speed import choose_speed
import torch

config, corpus, run_dir = sys.argv[1:4]
for model_type in ("gru_bahdanau", "transformer"):
    overrides = ["data.valid_size=10", "data.test_size=10", "model.dropout=0.1", "train.max_steps=1",
                 "train.kernels=reference", "train.label_smoothing=0.1", f"model.type={model_type}"]
    cfg = load_config(config, overrides)
    train(cfg, Path(run_dir) / model_type, data_path=corpus, quiet=True, device="cpu")
after_reference = sorted(name for name in sys.modules if name.startswith("attn_mt.kernels"))
choose_speed("cpu", torch.device("cpu"), False, 1)
after_cpu = sorted(name for name in sys.modules if name.startswith("attn_mt.kernels"))
print(json.dumps([after_reference, after_cpu]))
"""


def test_a_reference_run_never_imports_the_kernels(tmp_path):
    """A fresh process trains a reference step of both models without loading a module of attn_mt/kernels."""
    corpus = write_corpus(tmp_path / "reverse.txt", n=120)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run(
        [sys.executable, "-c", REFERENCE_STEP, str(TINY), str(corpus), str(tmp_path / "runs")],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    after_reference, after_cpu = json.loads(done.stdout.strip().splitlines()[-1])
    assert after_reference == []
    assert (
        "attn_mt.kernels" in after_cpu and "attn_mt.kernels.cpu.kernel_models" in after_cpu
    )  # `cpu` does import them
    for model_type in ("gru_bahdanau", "transformer"):
        summary = json.loads((tmp_path / "runs" / model_type / "run_summary.json").read_text())
        assert summary["kernels"] == "reference" and summary["steps"] == 1


def test_amp_probe_times_modes_interleaved_and_prefers_float32_unless_clearly_slower():
    """time_modes warms each mode up, then alternates them; bf16 needs a >5% lead to be chosen."""
    calls = []

    def run_pass(mode: str) -> None:
        calls.append(mode)
        time.sleep(0.02 if mode == "bf16" else 0.0)

    seconds = time_modes(run_pass, ("none", "bf16"), rounds=2)
    assert calls == ["none", "bf16"] * 3
    assert seconds["bf16"] >= 0.02 > seconds["none"]
    assert faster_mode(seconds) == "none"
    assert faster_mode({"none": 1.0, "bf16": 0.9}) == "bf16"
    assert faster_mode({"none": 1.0, "bf16": 0.97}) == "none"  # within the margin: keep float32


@pytest.mark.parametrize("chosen", ["none", "bf16"])
def test_amp_auto_trains_exactly_like_the_mode_it_picks(tmp_path, monkeypatch, chosen):
    """train.amp=auto's timing passes leave no trace: the run equals one configured with its choice."""
    corpus = write_corpus(tmp_path / "reverse.txt", n=200)
    monkeypatch.setattr(device_module, "cpu_has_native_bf16", lambda: True)
    timed = []

    def pick(seconds: dict[str, float]) -> str:
        timed.append(seconds)
        return chosen

    monkeypatch.setattr(precision_module, "faster_mode", pick)
    overrides = ["data.valid_size=10", "data.test_size=10", "train.epochs=1", "train.max_steps=4"]
    weights = {}
    for amp in ("auto", chosen):
        run_dir = tmp_path / amp
        train(load_config(TINY, [*overrides, f"train.amp={amp}"]), run_dir, data_path=str(corpus), quiet=True)
        weights[amp] = torch.load(run_dir / "checkpoints" / "last.pt", weights_only=False)["model"]
    assert len(timed) == 1 and set(timed[0]) == {"none", "bf16"}  # only the auto run timed both
    said = "train.amp=auto: " + ("bf16" if chosen == "bf16" else "float32")
    assert said in (tmp_path / "auto" / "train.log").read_text()
    for name, tensor in weights[chosen].items():
        assert torch.equal(weights["auto"][name], tensor), name
