"""The GPU path (`train.kernels: gpu`, `auto` on CUDA), shown on the CPU: the same losses, gradients,
runs and checkpoints as the book's Transformer, bucketed shapes compiled once each, and the fused loss."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from support.synthetic import TINY, write_corpus
from support.tolerances import assert_float32_close, float32_approx

from attn_mt import load
from attn_mt.config import load_config
from attn_mt.data.batch import Batch
from attn_mt.kernels.cpu import CpuSpeedups
from attn_mt.kernels.gpu.smoothed_loss import smoothed_cross_entropy_sum
from attn_mt.kernels.gpu.transformer_pass import (
    GpuTransformer,
    PreparedBatch,
    bucket_rows,
    bucket_shape,
    prepare_batch,
    source_bias,
)
from attn_mt.models import GRUBahdanau, Transformer
from attn_mt.run.checkpoint import load_checkpoint
from attn_mt.run.run_dir import read_metrics
from attn_mt.training import speed as speed_module
from attn_mt.training.launch import train
from attn_mt.training.run_state import STEADY_AFTER, Session
from attn_mt.training.speed import GpuPath, PlainTorch, choose_speed

VOCAB, HIDDEN, FFN, HEADS, LAYERS = 40, 32, 64, 4, 2


def transformer(dropout: float = 0.0, tie: bool = True) -> Transformer:
    """A small seeded Transformer (tied embeddings, as configs/transformer-gpu.yaml)."""
    torch.manual_seed(0)
    return Transformer(VOCAB, VOCAB, HIDDEN, FFN, HEADS, LAYERS, dropout, tie_embeddings=tie)


def ragged_batch(rows: int = 6, seed: int = 1) -> tuple[Batch, torch.Tensor]:
    """Padded source and target ids of lengths 1.. (the padding is random ids: no path may read it)."""
    generator = torch.Generator().manual_seed(seed)
    src = torch.randint(3, VOCAB, (rows, 9), generator=generator)  # (B, S)
    tgt = torch.randint(3, VOCAB, (rows, 7), generator=generator)  # (B, T)
    src_lens = torch.tensor([9, 1, 4, 7, 2, 5][:rows])  # (B,)
    tgt_lens = torch.tensor([3, 7, 1, 6, 2, 7][:rows])  # (B,)
    tgt_in = torch.cat([torch.ones(rows, 1, dtype=torch.long), tgt[:, :-1]], dim=1)  # (B, T)
    return Batch(src, src_lens, tgt, tgt_lens), tgt_in


def loss_and_grads(speed, model: Transformer, batch: Batch, tgt_in: torch.Tensor, smoothing: float = 0.1):
    """The speed object's summed loss of `batch` and every parameter's gradient, by name."""
    model.zero_grad()
    loss = speed.loss(speed.wrap(model), batch, tgt_in, smoothing)
    loss.backward()
    return loss.detach(), {name: p.grad.clone() for name, p in model.named_parameters()}


# ----- the choice -----
def test_auto_takes_only_a_path_verified_on_a_card_and_gpu_opts_in_with_one_notice(monkeypatch, caplog):
    assert speed_module.VERIFIED_ON_CARDS["gpu"] == ()  # until a card meets the check-up's targets
    cuda = torch.device("cuda")  # a device object only: the choice never touches a GPU
    with caplog.at_level(logging.INFO, logger="attn_mt"):
        assert type(choose_speed("auto", cuda, False, 1)) is PlainTorch
    assert [r.levelname for r in caplog.records] == ["INFO"]
    assert "reference path on cuda: it trained faster than the GPU path on an H200" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="attn_mt"):
        assert isinstance(choose_speed("gpu", cuda, False, 1), GpuPath)
    assert [r.levelname for r in caplog.records] == ["WARNING"]
    assert "passed gpu_check on an H200 but trained slower" in caplog.records[0].getMessage()
    caplog.clear()
    monkeypatch.setitem(speed_module.GPU_PATH_RAN_ON, "cuda", "")  # a card type the GPU path has not run on
    with caplog.at_level(logging.INFO, logger="attn_mt"):
        assert type(choose_speed("auto", cuda, False, 1)) is PlainTorch
        assert isinstance(choose_speed("gpu", cuda, False, 1), GpuPath)
    assert "has not yet passed gpu_check" in caplog.records[0].getMessage()
    assert "has not yet been run on a cuda device" in caplog.records[1].getMessage()
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="attn_mt"):
        assert type(choose_speed("reference", cuda, False, 1)) is PlainTorch
        assert isinstance(choose_speed("auto", torch.device("cpu"), False, 1), CpuSpeedups)
        assert isinstance(choose_speed("gpu", torch.device("cpu"), False, 1), GpuPath)
    assert not caplog.records  # nothing to explain: the CPU paths are verified by the tests
    monkeypatch.setitem(speed_module.VERIFIED_ON_CARDS, "gpu", ("cuda",))  # the run that verifies it
    with caplog.at_level(logging.INFO, logger="attn_mt"):
        assert isinstance(choose_speed("auto", cuda, False, 1), GpuPath)
        assert isinstance(choose_speed("gpu", cuda, False, 1), GpuPath)
    assert not caplog.records
    assert type(choose_speed("auto", torch.device("mps"), False, 1)) is PlainTorch
    graphs = choose_speed("gpu", torch.device("cpu"), True, 1, "reduce-overhead", pad_id=1)
    assert isinstance(graphs, GpuPath) and graphs.bucket
    assert graphs.compile_options == {"dynamic": False, "mode": "reduce-overhead"}
    compiled = choose_speed("gpu", torch.device("cpu"), True, 1)
    assert not compiled.bucket and compiled.compile_options == {"dynamic": True}


def test_a_model_without_a_gpu_pass_trains_as_the_reference():
    speed = GpuPath(1, compile=False)
    torch.manual_seed(0)
    model = GRUBahdanau(VOCAB, VOCAB, 8, 16, 1, 0.0, True)
    assert speed.wrap(model) is model and not speed.applies
    batch, _ = ragged_batch()
    assert speed.prepare(batch, True) is batch


# ----- the same maths -----
@pytest.mark.parametrize("tie", [True, False])
@pytest.mark.parametrize("bucket", [False, True])
def test_loss_and_every_gradient_equal_the_book_path_in_float32(tie, bucket):
    model = transformer(tie=tie)
    batch, tgt_in = ragged_batch()
    expected_loss, expected = loss_and_grads(PlainTorch(), model, batch, tgt_in)
    speed = GpuPath(1, compile=bucket, compile_mode="reduce-overhead", pad_id=1)
    speed.wrap(model)
    prepared = speed.prepare(batch, trim_source=True)
    assert isinstance(prepared, PreparedBatch)
    if bucket:
        assert prepared.src.shape == (8, 16) and prepared.tgt.shape == (8, 8)
    prepared_in = torch.cat([torch.ones_like(prepared.tgt[:, :1]), prepared.tgt[:, :-1]], dim=1)
    loss, grads = loss_and_grads(speed, model, prepared, prepared_in)
    terms = 4 * (HIDDEN + FFN + VOCAB)  # the widest dot products and softmaxes a value passes through
    assert float(loss) == float32_approx(float(expected_loss), terms=terms * int(batch.tgt_lens.sum()))
    for name, grad in grads.items():
        assert_float32_close(grad, expected[name], terms=terms * int(batch.tgt_lens.sum()), msg=name)


def test_through_the_forward_ddp_style_gives_the_same_loss_and_gradients():
    model = transformer()
    batch, tgt_in = ragged_batch()
    loss, grads = loss_and_grads(GpuPath(1, compile=False), model, batch, tgt_in)
    loss_ddp, grads_ddp = loss_and_grads(GpuPath(2, compile=False), model, batch, tgt_in)
    terms = 4 * (HIDDEN + FFN + VOCAB) * int(batch.tgt_lens.sum())
    assert float(loss_ddp) == float32_approx(float(loss), terms=terms)
    for name, grad in grads.items():
        assert_float32_close(grads_ddp[name], grad, terms=terms, msg=name)


def test_the_teacher_forced_logits_are_the_book_models():
    model = transformer().eval()
    batch, tgt_in = ragged_batch()
    with torch.no_grad():
        expected = model(batch.src, batch.src_lens, tgt_in)  # (B, T, V)
        logits = GpuTransformer(model)(batch.src, batch.src_lens, tgt_in)
    real = torch.arange(tgt_in.shape[1])[None, :] < batch.tgt_lens[:, None]  # (B, T)
    assert_float32_close(logits[real], expected[real], terms=4 * (HIDDEN + FFN + VOCAB))


def test_bf16_autocast_stays_within_a_stated_bound_and_keeps_the_stream_in_bf16():
    """bf16 keeps 8 mantissa bits (relative rounding 2**-9 a value): through 2 x 2 blocks of a few
    roundings each, the summed loss of ~25 tokens stays within 2% of float32, and every gradient
    points the same way (cosine > 0.99)."""
    model = transformer()
    batch, tgt_in = ragged_batch()
    expected_loss, expected = loss_and_grads(PlainTorch(), model, batch, tgt_in)
    seen = []
    handle = model.decoder.blks.block0.addnorm1.ln.register_forward_hook(lambda *_: seen.append(1))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        hidden = GpuTransformer(model)(batch.src, batch.src_lens, tgt_in, features=True)
        loss, grads = loss_and_grads(GpuPath(1, compile=False), model, batch, tgt_in)
    handle.remove()
    assert hidden.dtype == torch.bfloat16  # the residual stream, layer norms included
    assert not seen  # the layer norm ran as F.layer_norm on bf16 input, not the module under autocast
    assert loss.dtype == torch.float32
    assert float(loss) == pytest.approx(float(expected_loss), rel=0.02)
    for name, grad in grads.items():
        assert grad.dtype == torch.float32
        cosine = F.cosine_similarity(grad.flatten().double(), expected[name].flatten().double(), dim=0)
        assert float(cosine) > 0.99, name


def test_attention_dropout_runs_inside_the_fused_kernel_in_training_only():
    model = transformer(dropout=0.3)
    net = GpuTransformer(model)
    batch, tgt_in = ragged_batch()
    with torch.no_grad():
        model.eval()
        evaluated = [net(batch.src, batch.src_lens, tgt_in) for _ in range(2)]
        model.train()
        trained = [net(batch.src, batch.src_lens, tgt_in) for _ in range(2)]
    assert torch.equal(*evaluated)
    assert not torch.equal(*trained)


# ----- shapes -----
def test_rows_and_lengths_round_up_to_a_few_sizes():
    assert [bucket_rows(n) for n in (1, 8, 9, 16, 17, 20, 21, 33, 1000, 1025, 1440)] == [
        8, 8, 10, 16, 20, 20, 24, 40, 1024, 1280, 1536,
    ]  # fmt: skip
    assert bucket_shape(1440, 11, 13) == (1536, 16, 16)
    assert len({bucket_rows(n) for n in range(400, 6000)}) <= 4 * 4 + 1  # four sizes an octave
    assert all(bucket_rows(n) >= n for n in range(1, 3000))


def test_a_bucketed_batch_adds_rows_that_carry_no_loss_and_lists_its_real_positions():
    batch, _ = ragged_batch()
    prepared = prepare_batch(batch, pad_id=0, trim_source=True, bucket=True)
    assert prepared.src.shape == (8, 16) and prepared.tgt.shape == (8, 8)
    assert prepared.src_lens.tolist() == [*batch.src_lens.tolist(), 1, 1]
    assert prepared.tgt_lens.tolist() == [*batch.tgt_lens.tolist(), 0, 0]
    assert prepared.num_tgt_tokens == batch.num_tgt_tokens == len(prepared.real)
    rows, columns = prepared.real // 8, prepared.real % 8
    assert torch.equal(prepared.tgt[rows, columns], batch.tgt[rows, columns])
    assert prepared.trimmed() is prepared  # the trainer's trim keeps the bucket's shape
    moved = prepared.to("cpu")
    assert isinstance(moved, PreparedBatch) and torch.equal(moved.real, prepared.real)


def test_the_source_bias_blocks_exactly_the_padding():
    bias = source_bias(torch.tensor([3, 1]), 4, torch.bfloat16)  # (B, 1, 1, S)
    assert bias.shape == (2, 1, 1, 4) and bias.dtype == torch.bfloat16
    assert bias[:, 0, 0].isinf().tolist() == [[False, False, False, True], [False, True, True, True]]
    assert bias.stride() == (16, 16, 16, 1)  # aligned rows: the fused kernel need not pad a copy


SHAPES = [(6, 9, 7), (5, 10, 8), (6, 12, 6), (12, 3, 4), (11, 4, 2)]  # rows, source and target widths


def compiled_graphs(mode: str | None) -> list:
    """The graphs torch.compile builds for the GPU path over batches of SHAPES, under `mode`."""
    model = transformer()
    speed = GpuPath(1, compile=True, compile_mode=mode, pad_id=1)
    speed.cross_entropy = smoothed_cross_entropy_sum  # the model's graphs only (the loss's: the test below)
    graphs = []

    def counting_backend(graph: torch.fx.GraphModule, example_inputs: list) -> object:
        graphs.append(graph)
        return graph.forward

    torch._dynamo.reset()
    net = torch.compile(speed.wrap(model), backend=counting_backend, dynamic=speed.compile_options["dynamic"])
    for rows, src_width, tgt_width in SHAPES:
        src = torch.randint(3, VOCAB, (rows, src_width))
        tgt = torch.randint(3, VOCAB, (rows, tgt_width))
        lens = torch.full((rows,), min(src_width, tgt_width))
        prepared = speed.prepare(Batch(src, lens, tgt, lens), trim_source=True)
        tgt_in = torch.cat([torch.ones_like(prepared.tgt[:, :1]), prepared.tgt[:, :-1]], dim=1)
        speed.loss(net, prepared, tgt_in, 0.1).backward()
    torch._dynamo.reset()
    return graphs


def test_compiled_with_dynamic_shapes_the_step_is_built_once():
    assert len(compiled_graphs(None)) == 1


def test_for_cuda_graphs_each_bucket_is_compiled_once():
    """Batches of five shapes in two buckets, (8, 16, 8) and (16, 8, 8): two graphs, no recompilation."""
    assert len(compiled_graphs("reduce-overhead")) == 2


# ----- the fused loss -----
@pytest.mark.parametrize("smoothing", [0.0, 0.1])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_the_fused_loss_equals_torch_cross_entropy(smoothing, dtype):
    torch.manual_seed(0)
    logits = (torch.randn(30, 50) * 3).to(dtype).requires_grad_()
    target = torch.randint(0, 50, (30,))
    loss = smoothed_cross_entropy_sum(logits, target, smoothing)
    loss.backward()
    wide = logits.detach().float().requires_grad_()
    expected = F.cross_entropy(wide, target, reduction="sum", label_smoothing=smoothing)
    expected.backward()
    assert loss.dtype == torch.float32 and logits.grad.dtype == dtype
    assert float(loss.detach()) == float32_approx(float(expected.detach()), terms=30 * 50)
    if dtype == torch.float32:
        assert_float32_close(logits.grad, wide.grad, terms=50)
    else:  # the gradient rounded once to bfloat16
        torch.testing.assert_close(logits.grad.float(), wide.grad, rtol=2**-8, atol=1e-6)


def test_the_fused_loss_compiles_once_for_every_number_of_tokens():
    """What GpuPath compiles under train.compile: one graph whatever M, the same sums as eager."""
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    compiled = torch.compile(smoothed_cross_entropy_sum, dynamic=True, backend="aot_eager")
    for rows in (30, 47, 12):
        logits = torch.randn(rows, 50, dtype=torch.bfloat16, requires_grad=True)
        target = torch.randint(0, 50, (rows,))
        loss = compiled(logits, target, 0.1)
        loss.backward()
        eager = logits.detach().clone().requires_grad_()
        expected = smoothed_cross_entropy_sum(eager, target, 0.1)
        expected.backward()
        assert float(loss.detach()) == float(expected.detach())
        assert torch.equal(logits.grad, eager.grad)
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] == 1
    torch._dynamo.reset()


# ----- whole runs -----
def test_the_steady_state_leaves_out_a_sessions_first_steps():
    session = Session(training_start=0.0)
    for _ in range(STEADY_AFTER):
        session.time_step(5.0, 100)  # warm-up: compiling, autotuning
    assert session.steady_tokens_per_s is None
    session.time_step(0.5, 1000)
    session.time_step(1.5, 3000)
    assert session.steady_tokens_per_s == 2000.0


RUN = [
    "data.valid_size=10",
    "data.test_size=10",
    "data.max_tokens=200",
    "train.epochs=3",
    "train.log_every=1",
    "train.lr=0.001",  # at tiny.yaml's 0.005 Adam amplifies the paths' float32 rounding within an epoch
    "train.label_smoothing=0.1",
    "train.threads=1",
    "model.num_layers=2",
]


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Path]]:
    """The same tiny run trained on the GPU path and on the reference path."""
    root = tmp_path_factory.mktemp("gpu-runs")
    corpus = write_corpus(root / "reverse.txt", n=200)
    dirs = {}
    for kernels in ("gpu", "reference"):
        dirs[kernels] = root / kernels
        cfg = load_config(TINY, [*RUN, f"train.kernels={kernels}"])
        train(cfg, dirs[kernels], data_path=str(corpus), quiet=True, device="cpu")
    return corpus, dirs


def test_a_run_on_the_gpu_path_follows_the_reference_run_and_translates_the_same(runs):
    _, dirs = runs
    losses = {
        kernels: [r["loss"] for r in read_metrics(run_dir / "metrics.jsonl") if "loss" in r]
        for kernels, run_dir in dirs.items()
    }
    assert len(losses["gpu"]) >= 8
    torch.testing.assert_close(losses["gpu"], losses["reference"], rtol=1e-4, atol=1e-5)
    summary = json.loads((dirs["gpu"] / "run_summary.json").read_text())
    assert summary["kernels"] == "gpu" and summary["steady_tokens_per_s"] > 0
    sentences = ["alpha bravo charlie .", "delta echo .", "hotel golf foxtrot echo delta ."]
    outputs = {k: load(d, checkpoint="last").translate(sentences, beam=2) for k, d in dirs.items()}
    assert outputs["gpu"] == outputs["reference"]


def test_checkpoints_load_both_ways(runs):
    corpus, dirs = runs
    gpu, reference = (load_checkpoint(dirs[k] / "checkpoints" / "last.pt")["model"] for k in dirs)
    assert list(gpu) == list(reference)  # the book's names either way
    for kernels, other in (("gpu", "reference"), ("reference", "gpu")):
        cfg = load_config(TINY, [*RUN, "train.epochs=4", f"train.kernels={other}"])
        result = train(cfg, dirs[kernels], data_path=str(corpus), quiet=True, device="cpu", resume=True)
        assert result.epoch == 4


def test_bucketing_pads_rows_and_columns_with_the_given_pad_id():
    batch, _ = ragged_batch()
    speed = GpuPath(1, compile=True, compile_mode="reduce-overhead", pad_id=7)
    speed.wrap(transformer())
    prepared = speed.prepare(batch, trim_source=True)
    assert prepared.src.shape == (8, 16) and prepared.tgt.shape == (8, 8)
    assert (prepared.src[6:] == 7).all() and (prepared.src[:6, 9:] == 7).all()  # rows and columns added
    assert (prepared.tgt[6:] == 7).all() and (prepared.tgt[:6, 7:] == 7).all()
    assert prepared.src_lens[6:].tolist() == [1, 1] and prepared.tgt_lens[6:].tolist() == [0, 0]
    with pytest.raises(ValueError, match="<pad>"):
        GpuPath(1, compile=True, compile_mode="reduce-overhead")
