"""train.capture_step: the GRU model's whole step in the form a CUDA graph holds. On the CPU, where nothing is
captured: its encoder gives the packed encoder's numbers, the step gives the eager step's losses and weights,
it runs no op that reads the device back or packs by the lengths, and a refused capture falls back to it."""

from __future__ import annotations

import contextlib
import logging

import pytest
import torch
from support.synthetic import TINY, TINY_EVERY_STEP, write_corpus
from support.tolerances import assert_float32_close, float32_approx
from torch.utils._python_dispatch import TorchDispatchMode

from attn_mt.config import ConfigError, load_config
from attn_mt.data.dataset import load_data
from attn_mt.kernels.cuda import captured_bahdanau
from attn_mt.kernels.cuda.captured_bahdanau import CapturedBahdanau, for_capture, layered_gru
from attn_mt.models import attention
from attn_mt.models.bahdanau import GRUBahdanau
from attn_mt.run.run_dir import RunPaths
from attn_mt.training import checkpointing, whole_step
from attn_mt.training.trainer import Trainer
from attn_mt.training.whole_step import WholeStep

GRU = ["model.type=gru_bahdanau", "model.num_layers=2", "model.pack_padded=true", "train.grad_clip=0.5"]
REFERENCE = ["train.kernels=reference"]  # what `auto` is on a card (on the CPU it is the CPU's kernels)
SHAPES = ["data.batch_shapes=2", "data.max_tokens=120"]
CAPTURE = ["train.capture_step=true"]
# ops a captured graph cannot replay for another batch: a value read back to the host, a size taken from
# the data, the packing the lengths decide
NOT_CAPTURABLE = {
    "aten::_local_scalar_dense",
    "aten::nonzero",
    "aten::masked_select",
    "aten::_pack_padded_sequence",
    "aten::_unique2",
}


def gru_model(dropout: float = 0.0, layers: int | tuple[int, int] = 2) -> GRUBahdanau:
    """A small packed GRU model with random weights."""
    torch.manual_seed(0)
    return GRUBahdanau(30, 40, 8, 12, layers, dropout, pack_padded=True)


def batch() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """src (4, 6) with lengths 6, 3, 1 (an empty row of a fixed shape has 1) and 4; tgt_in (4, 5)."""
    torch.manual_seed(1)
    return torch.randint(4, 30, (4, 6)), torch.tensor([6, 3, 1, 4]), torch.randint(4, 40, (4, 5))


@pytest.mark.parametrize("layers", [2, (3, 2)])
def test_the_layered_encoder_gives_the_packed_encoders_outputs_states_and_gradients(layers):
    model = gru_model(layers=layers)
    src, lens, tgt_in = batch()
    packed, layered = model.encode(src, lens), CapturedBahdanau(model).encode(src, lens)
    assert layered["hidden"].shape == packed["hidden"].shape == (2, 4, 12)
    assert_float32_close(layered["memory"], packed["memory"], terms=50)
    assert_float32_close(layered["hidden"], packed["hidden"], terms=50)
    assert not layered["memory"][1, 3:].any() and not layered["memory"][2, 1:].any()  # zero past each length
    grads = []
    for net in (model, CapturedBahdanau(model)):
        model.zero_grad()
        net(src, lens, tgt_in).square().mean().backward()
        grads.append([p.grad.clone() for p in model.parameters()])
    for got, want in zip(*grads, strict=True):
        assert_float32_close(got, want, terms=200)


def test_with_dropout_the_layered_encoder_drops_between_layers_and_evaluates_as_the_packed_one():
    model = gru_model(dropout=0.5)
    src, lens, _ = batch()
    rnn, embedded = model.encoder.rnn, model.encoder.embedding(src)
    torch.manual_seed(2)
    first = layered_gru(rnn, embedded, lens)[0]
    torch.manual_seed(3)
    assert not torch.equal(first, layered_gru(rnn, embedded, lens)[0])  # other draws, other outputs
    model.eval()
    packed, layered = model.encode(src, lens), CapturedBahdanau(model).encode(src, lens)
    assert_float32_close(layered["hidden"], packed["hidden"], terms=50)


def test_only_the_packed_gru_model_takes_another_form():
    model = gru_model()
    assert isinstance(for_capture(model), CapturedBahdanau)
    book = GRUBahdanau(30, 40, 8, 12, 2, 0.0, pack_padded=False)
    assert for_capture(book) is book  # the book's GRU reads its padding: already nothing host-side


def trainer(tmp_path, name: str, settings: list[str]) -> Trainer:
    """tiny.yaml's GRU model on a reverse-task corpus, fixed batch shapes, with `settings`."""
    corpus = write_corpus(tmp_path / "reverse.txt", n=120)
    cfg = load_config(TINY, [*TINY_EVERY_STEP, *GRU, *SHAPES, *REFERENCE, *settings])
    paths = RunPaths(tmp_path / name)
    paths.root.mkdir()
    return Trainer(cfg, paths, load_data(cfg.data, str(corpus)), torch.device("cpu"), quiet=True)


def capturable_step(made: Trainer) -> WholeStep:
    """The step a card captures, built on the CPU (where the trainer itself runs the plain step)."""
    return WholeStep(
        made.model,
        made.optimizer,
        made.params.tensors,
        made.cfg.train,
        made.amp,
        made.data.tgt_vocab.bos_id,
        static_shapes=True,
    )


def losses(made: Trainer, count: int) -> list[float]:
    """The losses of the first `count` steps of epoch 0, taken as fit takes them."""
    plan = made.data.train.plan(0, made.cfg.train.seed)
    return [float(made._step([made.collate(plan[i])], False, 0.0)[0]) for i in range(count)]


def test_on_the_cpu_the_trainer_says_it_runs_the_plain_step(tmp_path, caplog):
    made = trainer(tmp_path, "run", CAPTURE)
    with caplog.at_level(logging.INFO, logger="attn_mt"):
        made.start()
    assert made.whole_step is None
    assert (
        "train.capture_step: the step runs uncaptured: train.capture_step captures CUDA graphs, but the "
        "device is cpu" in caplog.text
    )
    assert all(loss > 0 for loss in losses(made, 2))


def test_the_step_a_card_captures_gives_the_eager_steps_losses_and_weights(tmp_path):
    eager = trainer(tmp_path, "eager", [])
    whole = trainer(tmp_path, "whole", CAPTURE)
    whole.model.load_state_dict(eager.model.state_dict())
    eager.start(), whole.start()
    whole.whole_step = capturable_step(whole)
    assert (
        isinstance(whole.whole_step.net, CapturedBahdanau)
        and whole.whole_step.compiled == whole.whole_step.train
    )
    eager_losses, whole_losses = losses(eager, 4), losses(whole, 4)
    assert whole_losses == float32_approx(eager_losses, terms=2000)
    for got, want in zip(whole.model.parameters(), eager.model.parameters(), strict=True):
        assert_float32_close(got, want, terms=2000)
    assert float(whole.grad_norm) == float32_approx(float(eager.grad_norm), terms=2000)


class Ops(TorchDispatchMode):
    """The aten ops run under it, by name."""

    def __init__(self):
        super().__init__()
        self.names: set[str] = set()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.names.add(f"aten::{func.__name__.split('.')[0]}")
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("model", ["gru_bahdanau", "transformer"])
def test_the_step_a_card_captures_reads_nothing_back_and_packs_nothing(tmp_path, monkeypatch, model):
    """The GRU model's, and the Transformer's (which a card compiles before capturing: the same function)."""
    monkeypatch.setattr(attention, "reads_back", lambda device: False)  # as on CUDA: no check of empty rows
    made = trainer(tmp_path, "run", [*CAPTURE, f"model.type={model}", "model.dropout=0.1"])
    made.start()
    step = capturable_step(made)
    tensors = made.collate(made.data.train.plan(0, 0)[0]).tensors()
    with Ops() as plain:
        made.untraced_passes([made.collate(made.data.train.plan(0, 0)[0])], made.amp)
    with Ops() as captured:
        total, norm = step.train(*tensors)
    packs = "aten::_pack_padded_sequence" in plain.names  # the book's packed encoder: no graph replays it
    assert packs == (model == "gru_bahdanau")
    assert not NOT_CAPTURABLE & captured.names, NOT_CAPTURABLE & captured.names
    assert "aten::_fused_adam_" in captured.names and total.dim() == norm.dim() == 0


def test_a_refused_capture_says_so_once_and_every_step_runs_uncaptured(tmp_path, monkeypatch, caplog):
    eager = trainer(tmp_path, "eager", [])
    made = trainer(tmp_path, "run", CAPTURE)
    made.model.load_state_dict(eager.model.state_dict())
    eager.start(), made.start()
    made.whole_step = capturable_step(made)
    made.whole_step.capture = True  # as on a card

    def refuse(*args, **kwargs):
        raise RuntimeError("CUDA error: operation not permitted when stream is capturing\nmore lines")

    monkeypatch.setattr(whole_step, "CapturedStep", refuse)
    with caplog.at_level(logging.WARNING, logger="attn_mt"):
        got = losses(made, 3)
    assert got == float32_approx(losses(eager, 3), terms=2000)
    assert made.whole_step.capture is False and caplog.text.count("CUDA refused to capture") == 1
    assert (
        "(operation not permitted when stream is capturing): every step runs uncaptured"
        in caplog.text.replace("CUDA error: ", "")
    )


def test_capture_step_is_checked_against_compiling_the_kernels_and_the_shapes():
    with pytest.raises(ConfigError) as error:
        load_config(TINY, [*GRU, *CAPTURE, "train.compile=true"])
    assert "compile_mode: cuda-graphs" in str(error.value) and "give data.batch_shapes" in str(error.value)
    with pytest.raises(ConfigError, match="train.kernels: cpu cannot run inside it"):
        load_config(TINY, [*GRU, *CAPTURE, *SHAPES, "train.kernels=cpu"])
    assert load_config(TINY, [*GRU, *CAPTURE, *SHAPES]).train.capture_step


def test_the_kernel_module_is_reached_through_its_package():
    assert captured_bahdanau.__name__ == "attn_mt.kernels.cuda.captured_bahdanau"


class FakeStream:
    """A CUDA stream's calls that CapturedStep makes, doing nothing (the CPU runs in order)."""

    def wait_stream(self, other: object) -> None:
        """Nothing to wait for."""


def test_each_warm_up_step_and_the_capture_start_from_no_gradients(tmp_path, monkeypatch):
    """Otherwise the backward adds into the last step's gradients, and every replay adds again."""
    made = trainer(tmp_path, "run", CAPTURE)
    made.start()
    step = capturable_step(made)
    fresh = []

    def watched(*inputs):
        fresh.append(all(p.grad is None for p in step.params))
        return step.train(*inputs)

    monkeypatch.setattr(torch.cuda, "Stream", FakeStream)
    monkeypatch.setattr(torch.cuda, "current_stream", FakeStream)
    monkeypatch.setattr(torch.cuda, "stream", lambda stream: contextlib.nullcontext())
    monkeypatch.setattr(torch.cuda, "CUDAGraph", object)
    monkeypatch.setattr(torch.cuda, "graph", lambda graph, pool=None: contextlib.nullcontext())
    batch = made.collate(made.data.train.plan(0, 0)[0])
    captured = whole_step.CapturedStep(watched, batch, step.params, pool=None)
    assert fresh == [True, True, True]  # two warm-up steps, then the capture
    assert all(p.grad is not None for p in step.params) and captured.outputs[0].dim() == 0


def test_under_bf16_autocast_on_a_card_the_layered_gru_runs_in_float32_as_the_books(monkeypatch):
    """The branch CUDA's bf16 autocast takes (run_gru's), run on the CPU by saying it applies."""
    from attn_mt.models import bahdanau

    monkeypatch.setattr(bahdanau, "gru_in_float32", lambda device_type: True)
    monkeypatch.setattr(captured_bahdanau, "gru_in_float32", lambda device_type: True)
    model = gru_model()
    src, lens, _ = batch()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        packed, layered = model.encode(src, lens), CapturedBahdanau(model).encode(src, lens)
    assert layered["memory"].dtype == layered["hidden"].dtype == torch.float32
    assert_float32_close(layered["memory"], packed["memory"], terms=50)
    assert_float32_close(layered["hidden"], packed["hidden"], terms=50)


def test_a_checkpoint_of_a_captured_run_restores_an_optimiser_that_captures_nothing(tmp_path):
    """Off CUDA, foreach Adam refuses capturable=True; a resumed run that captures sets it again."""
    made = trainer(tmp_path, "captured", CAPTURE)
    made.start()
    made.whole_step = capturable_step(made)
    made.optimizer.param_groups[0]["capturable"] = True  # as WholeStep leaves it on a card
    losses(made, 1)
    state = checkpointing.trainer_state(made)
    assert state["optimizer"]["param_groups"][0]["capturable"] is True
    resumed = trainer(tmp_path, "resumed", [])
    checkpointing.restore_trainer(resumed, state)
    assert [group["capturable"] for group in resumed.optimizer.param_groups] == [False]
    assert losses(resumed, 1)[0] > 0
