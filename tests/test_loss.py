"""The masked, label-smoothed cross-entropy and its CPU kernels: values and gradients against torch's."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from attn_mt.data.batch import Batch
from attn_mt.kernels.cpu.chunked_loss import (
    CpuLoss,
    LinearCrossEntropy,
    linear_chunk,
    output_layer_loss,
    row_chunk,
    token_cross_entropy,
)
from attn_mt.kernels.cpu.heap import keep_freed_memory, release_freed_memory
from attn_mt.run import device as device_module
from attn_mt.run.device import autocast_context, effective_amp, limit_kernel_cache
from attn_mt.training.loss import masked_cross_entropy


@pytest.mark.parametrize("smoothing", [0.0, 0.1, 0.3])
@pytest.mark.parametrize("rows", [1, 7, 300])
def test_token_cross_entropy_equals_torch_values_and_gradients(smoothing: float, rows: int) -> None:
    torch.manual_seed(rows)
    vocab = 5000  # 52 rows a chunk: 300 rows take several chunks and a partial last one
    logits = (torch.randn(rows, vocab, dtype=torch.float64) * 4).requires_grad_()
    target = torch.randint(0, vocab, (rows,))
    weights = torch.rand(rows, dtype=torch.float64)
    ours = token_cross_entropy(logits, target, smoothing)
    (ours * weights).sum().backward()
    ours_grad, logits.grad = logits.grad, None
    ref = F.cross_entropy(logits, target, reduction="none", label_smoothing=smoothing)
    (ref * weights).sum().backward()
    torch.testing.assert_close(ours, ref, rtol=0, atol=1e-10)
    torch.testing.assert_close(ours_grad, logits.grad, rtol=0, atol=1e-12)


def test_token_cross_entropy_hand_computed() -> None:
    logits = torch.tensor([[0.0, 0.0, 0.0, 0.0], [1.0, 2.0, 3.0, 4.0]], requires_grad=True)
    loss = token_cross_entropy(logits, torch.tensor([2, 3]), 0.0)
    lse = torch.log(torch.exp(torch.tensor([1.0, 2.0, 3.0, 4.0])).sum())
    torch.testing.assert_close(loss, torch.stack([torch.log(torch.tensor(4.0)), lse - 4.0]))
    loss[0].backward()
    torch.testing.assert_close(logits.grad[0], torch.tensor([0.25, 0.25, -0.75, 0.25]))
    torch.testing.assert_close(logits.grad[1], torch.zeros(4))


def test_bfloat16_logits_are_reduced_in_float32_and_get_bfloat16_gradients() -> None:
    torch.manual_seed(0)
    logits = torch.randn(64, 3000).bfloat16().requires_grad_()
    target = torch.randint(0, 3000, (64,))
    loss = token_cross_entropy(logits, target, 0.1)
    assert loss.dtype == torch.float32
    torch.testing.assert_close(
        loss, F.cross_entropy(logits.float(), target, reduction="none", label_smoothing=0.1)
    )
    loss.sum().backward()
    assert logits.grad.dtype == torch.bfloat16


def test_padding_positions_contribute_nothing() -> None:
    torch.manual_seed(0)
    logits = torch.randn(2, 5, 11, requires_grad=True)
    target = torch.randint(0, 11, (2, 5))
    lens = torch.tensor([5, 2])
    total = masked_cross_entropy(logits, target, lens, label_smoothing=0.1)
    total.backward()
    assert torch.count_nonzero(logits.grad[1, 2:]) == 0
    per_token = F.cross_entropy(
        logits.reshape(10, 11), target.reshape(10), reduction="none", label_smoothing=0.1
    )
    expected = per_token.reshape(2, 5)[0].sum() + per_token.reshape(2, 5)[1, :2].sum()
    torch.testing.assert_close(total, expected)
    unsmoothed = F.cross_entropy(logits.reshape(10, 11), target.reshape(10), reduction="none").reshape(2, 5)
    torch.testing.assert_close(
        masked_cross_entropy(logits, target, lens), unsmoothed[0].sum() + unsmoothed[1, :2].sum()
    )


def test_half_precision_logits_are_scored_in_float32() -> None:
    torch.manual_seed(1)
    logits = torch.randn(3, 4, 50).bfloat16()
    target, lens = torch.randint(0, 50, (3, 4)), torch.tensor([4, 1, 3])
    total = masked_cross_entropy(logits, target, lens, 0.1)
    assert total.dtype == torch.float32
    torch.testing.assert_close(total, masked_cross_entropy(logits.float(), target, lens, 0.1))


def output_grads(loss: torch.Tensor, *tensors: torch.Tensor) -> list[torch.Tensor]:
    """d loss / d tensors."""
    return list(torch.autograd.grad(loss, tensors))


@pytest.mark.parametrize("smoothing", [0.0, 0.1])
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("chunk_rows", [1, 3, 1000])
def test_linear_cross_entropy_equals_the_sum_over_logits(smoothing, bias, chunk_rows) -> None:
    torch.manual_seed(chunk_rows)
    X = torch.randn(10, 6, dtype=torch.float64, requires_grad=True)
    layer = torch.nn.Linear(6, 40, bias=bias).double()
    target = torch.randint(0, 40, (10,))
    inputs = (X, layer.weight) + ((layer.bias,) if bias else ())
    ours = LinearCrossEntropy.apply(X, layer.weight, layer.bias, target, smoothing, torch.float64, chunk_rows)
    ref = F.cross_entropy(layer(X), target, reduction="sum", label_smoothing=smoothing)
    torch.testing.assert_close(ours, ref, rtol=0, atol=1e-12)
    for got, want in zip(output_grads(ours * 0.7, *inputs), output_grads(ref * 0.7, *inputs), strict=True):
        torch.testing.assert_close(got, want, rtol=0, atol=1e-12)


def test_linear_cross_entropy_hand_computed() -> None:
    """One row, zero weights: uniform softmax over 4 words, loss log 4, gradients by hand."""
    X = torch.tensor([[1.0, 2.0]], requires_grad=True)
    weight = torch.zeros(4, 2, requires_grad=True)
    bias = torch.zeros(4, requires_grad=True)
    loss = LinearCrossEntropy.apply(X, weight, bias, torch.tensor([1]), 0.0, torch.float32, 64)
    torch.testing.assert_close(loss, torch.log(torch.tensor(4.0)))
    loss.backward()
    dlogits = torch.tensor([0.25, -0.75, 0.25, 0.25])  # softmax - one-hot
    torch.testing.assert_close(bias.grad, dlogits)
    torch.testing.assert_close(weight.grad, dlogits[:, None] * X.detach())
    torch.testing.assert_close(X.grad, torch.zeros(1, 2))  # W = 0


class OutputLayerModel(torch.nn.Module):
    """A stand-in model whose teacher-forced hidden states are given: forward applies the output layer."""

    def __init__(self, hidden: torch.Tensor, vocab: int):
        super().__init__()
        self.hidden = hidden  # (B, T, H)
        self.output_layer = torch.nn.Linear(hidden.shape[-1], vocab).to(hidden.dtype)

    def encode(self, src: torch.Tensor, src_lens: torch.Tensor) -> dict:
        return {}

    def decode_features(self, tgt_in: torch.Tensor, enc: dict) -> torch.Tensor:
        return self.hidden

    def forward(self, src: torch.Tensor, src_lens: torch.Tensor, tgt_in: torch.Tensor) -> torch.Tensor:
        return self.output_layer(self.hidden)  # (B, T, V)


def cpu_loss(through_output_layer: bool, min_logits_bytes: int) -> CpuLoss:
    """CpuLoss with its threshold for scoring through the output layer set to `min_logits_bytes`."""
    loss = CpuLoss(through_output_layer)
    loss.min_logits_bytes = min_logits_bytes
    return loss


def target_batch(target: torch.Tensor, lens: list[int]) -> Batch:
    """A batch of targets (B, T) with lengths `lens`; the stand-in model ignores its one-token sources."""
    sources = torch.zeros(len(lens), 1, dtype=torch.long)  # (B, 1)
    return Batch(sources, torch.ones(len(lens), dtype=torch.long), target, torch.tensor(lens))


@pytest.mark.parametrize("through_output_layer", [True, False])
@pytest.mark.parametrize("smoothing", [0.0, 0.2])
def test_cpu_loss_equals_torch_cross_entropy_over_the_logits(through_output_layer, smoothing) -> None:
    """Either way CpuLoss scores a batch (output layer chunk by chunk, or logits), the sum is torch's."""
    torch.manual_seed(3)
    hidden = torch.randn(4, 6, 5, dtype=torch.float64, requires_grad=True)  # (B, T, H)
    model = OutputLayerModel(hidden, 30)
    batch = target_batch(torch.randint(0, 30, (4, 6)), [6, 2, 0, 4])
    ours = cpu_loss(through_output_layer, 0)(model, batch, batch.tgt, smoothing)
    logits = model(batch.src, batch.src_lens, batch.tgt)  # (B, T, V)
    ref = masked_cross_entropy(logits, batch.tgt, batch.tgt_lens, smoothing)
    torch.testing.assert_close(ours, ref, rtol=0, atol=1e-12)
    inputs = (hidden, model.output_layer.weight, model.output_layer.bias)
    ours_grads = output_grads(ours, *inputs)
    for got, want in zip(ours_grads, output_grads(ref, *inputs), strict=True):
        torch.testing.assert_close(got, want, rtol=0, atol=1e-12)
    assert not ours_grads[0][1, 2:].any() and not ours_grads[0][2].any()  # padding: no gradient


def test_cpu_loss_scores_through_the_output_layer_only_batches_with_large_logits() -> None:
    """Below min_logits_bytes (or with several processes) the logits are computed; above, never."""
    hidden = torch.randn(2, 3, 4)
    model = OutputLayerModel(hidden, 10)  # float32 logits of 2 x 3 x 10 x 4 = 240 bytes
    batch = target_batch(torch.randint(0, 10, (2, 3)), [3, 2])
    calls = []
    model.output_layer.register_forward_hook(lambda *args: calls.append("logits"))
    cpu_loss(True, 240)(model, batch, batch.tgt, 0.0)
    assert calls == []
    cpu_loss(True, 241)(model, batch, batch.tgt, 0.0)
    cpu_loss(False, 0)(model, batch, batch.tgt, 0.0)
    assert calls == ["logits", "logits"]


def test_output_layer_loss_takes_bfloat16_products_under_autocast() -> None:
    torch.manual_seed(4)
    hidden = torch.randn(8, 5, 32, requires_grad=True)
    layer = torch.nn.Linear(32, 500)
    target, lens = torch.randint(0, 500, (8, 5)), torch.tensor([5, 4, 3, 5, 1, 2, 5, 5])
    keep, tokens = torch.arange(5)[None, :] < lens[:, None], int(lens.sum())  # (B, T), 30
    with torch.autocast("cpu", dtype=torch.bfloat16):  # token means below
        ours = output_layer_loss(hidden[keep], layer, target[keep], 0.1) / tokens
        ref = masked_cross_entropy(layer(hidden), target, lens, 0.1) / tokens
    exact = masked_cross_entropy(layer(hidden), target, lens, 0.1) / tokens
    assert ours.dtype == torch.float32
    torch.testing.assert_close(ours, ref, rtol=0, atol=1e-4)  # the same bfloat16 products
    assert 1e-5 < abs(float(ours.detach() - exact.detach())) < 0.05  # ... which are not the float32 ones
    grads = output_grads(ours, hidden, layer.weight, layer.bias)
    assert [g.dtype for g in grads] == [torch.float32] * 3
    for got, want in zip(grads, output_grads(exact, hidden, layer.weight, layer.bias), strict=True):
        torch.testing.assert_close(got, want, rtol=0.05, atol=2e-3)


def test_linear_chunk_holds_about_eight_megabytes_of_logits() -> None:
    assert linear_chunk(9300) == 225 and linear_chunk(200) == 10485 and linear_chunk(10**6) == 64


def test_row_chunk_fits_a_megabyte() -> None:
    assert row_chunk(9268) == (1 << 20) // (4 * 9268)
    assert row_chunk(10_000_000) == 1


def test_bf16_autocast_applies_on_cpus_with_native_bf16_and_fp16_does_not(monkeypatch) -> None:
    cpu = torch.device("cpu")
    monkeypatch.setattr(device_module, "cpu_has_native_bf16", lambda: True)
    assert effective_amp(cpu, "bf16") == "bf16"
    monkeypatch.setattr(device_module, "cpu_has_native_bf16", lambda: False)
    assert effective_amp(cpu, "bf16") == "none"  # emulated bfloat16 is many times slower
    assert effective_amp(cpu, "fp16") == "none"
    assert effective_amp(cpu, "none") == "none"
    assert effective_amp(cpu, "auto") == "none"  # nothing to time without native bf16
    monkeypatch.setattr(device_module, "cpu_has_native_bf16", lambda: True)
    assert effective_amp(cpu, "auto") == "auto"  # the trainer times both (training/precision.py)
    layer = torch.nn.Linear(8, 8)
    with autocast_context(cpu, "bf16"):
        assert layer(torch.randn(2, 8)).dtype == torch.bfloat16
    with autocast_context(cpu, "none"):
        assert layer(torch.randn(2, 8)).dtype == torch.float32


def test_kernel_cache_is_limited_unless_the_user_sized_it(monkeypatch) -> None:
    monkeypatch.delenv("ONEDNN_PRIMITIVE_CACHE_CAPACITY", raising=False)
    assert limit_kernel_cache() == "16" and os.environ["ONEDNN_PRIMITIVE_CACHE_CAPACITY"] == "16"
    monkeypatch.setenv("ONEDNN_PRIMITIVE_CACHE_CAPACITY", "512")
    assert limit_kernel_cache() == "512" and os.environ["ONEDNN_PRIMITIVE_CACHE_CAPACITY"] == "512"


def test_keep_freed_memory_applies_on_linux() -> None:
    assert keep_freed_memory() is sys.platform.startswith("linux")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc_trim")
def test_release_freed_memory_hands_kept_heap_holes_back() -> None:
    """Freed tensors stay resident while freed memory is kept; release_freed_memory returns them."""
    page = os.sysconf("SC_PAGE_SIZE")

    def resident_mb() -> float:
        return int(Path("/proc/self/statm").read_text().split()[1]) * page / 2**20

    assert keep_freed_memory()
    blocks = [torch.ones(1 << 20) for _ in range(64)]  # 64 x 4 MiB from the heap, touched
    pin = torch.ones(1 << 10)  # allocated above them, so the freed blocks become a hole, not the top
    del blocks
    before = resident_mb()
    assert release_freed_memory()
    assert resident_mb() < before - 128
    assert float(pin.sum()) == 1024
