"""Transformer blocks as single autograd functions (kernels/cpu/transformer_blocks.py) against the book's.

Shapes: B batch, S source steps, T target steps, H hidden, h heads.
"""

from __future__ import annotations

import pytest
import torch
from support.graphs import graph_names

from attn_mt.errors import UserError
from attn_mt.kernels.cpu import CpuSpeedups
from attn_mt.kernels.cpu.packed_attention import keys_first
from attn_mt.kernels.cpu.transformer_blocks import (
    DecoderBlockFunction,
    EncoderBlockFunction,
    decoder_block_params,
    encoder_block_params,
)
from attn_mt.models import AttentionMask
from attn_mt.models.transformer import DecoderBlock, EncoderBlock, Transformer
from attn_mt.training.speed import PlainTorch, choose_speed, kernels_apply

CPU = torch.device("cpu")
BLOCK_NODES = {"EncoderBlockFunctionBackward", "DecoderBlockFunctionBackward"}


def logits_and_grads(model: torch.nn.Module, params: list, src_lens: list[int]):
    """Logits of `model` from dropout seed 1, and the gradients of `params` under a fixed upstream."""
    src = torch.tensor([[1, 2, 3, 4, 0], [5, 6, 0, 0, 0], [7, 8, 9, 0, 0]])
    tgt_in = torch.tensor([[1, 2, 3, 4, 5, 6], [3, 4, 5, 0, 0, 0], [6, 7, 8, 9, 0, 0]])
    torch.manual_seed(1)  # the dropout masks: the same stream for both paths
    logits = model(src, torch.tensor(src_lens), tgt_in)  # (B, T, V)
    upstream = torch.randn(logits.shape, dtype=torch.float64, generator=torch.Generator().manual_seed(2))
    return logits, torch.autograd.grad(logits, params, upstream)


@pytest.mark.parametrize("layers", [2, (3, 1)], ids=["2-2", "3-1"])
@pytest.mark.parametrize("training", [True, False])
@pytest.mark.parametrize("src_lens", [[4, 2, 3], [5, 0, 3]], ids=["padded", "empty-source"])
def test_block_kernels_equal_the_book_blocks(training, src_lens, layers):
    """Same seed, same dropout masks: logits and every parameter's gradient agree to 1e-12."""
    torch.manual_seed(0)
    book = Transformer(11, 13, 16, 24, 4, layers, 0.2).double().train(training)
    fast = CpuSpeedups(1).wrap(book)  # the book model's dropouts now draw as the kernels
    params = list(book.parameters())
    kernel_logits, kernel_grads = logits_and_grads(fast, params, src_lens)
    book_logits, book_grads = logits_and_grads(book, params, src_lens)
    assert graph_names(kernel_logits) >= BLOCK_NODES
    assert not BLOCK_NODES & graph_names(book_logits)
    torch.testing.assert_close(kernel_logits, book_logits, rtol=0, atol=1e-12)
    for (name, _), got, want in zip(book.named_parameters(), kernel_grads, book_grads, strict=True):
        torch.testing.assert_close(got, want, rtol=0, atol=1e-12, msg=name)
    if training:  # dropout really ran: the same model in eval mode gives other logits
        assert not torch.allclose(kernel_logits, logits_and_grads(fast.eval(), params, src_lens)[0])


def test_the_switch_reference_and_cpu_give_the_same_model_without_dropout():
    """`reference` runs the book model itself; `cpu` without dropout computes the same numbers."""
    torch.manual_seed(0)
    book = Transformer(11, 13, 16, 24, 4, 2, 0.0).double()
    assert choose_speed("reference", CPU, False, 1).wrap(book) is book
    assert choose_speed("auto", CPU, True, 1).wrap(book) is book
    params = list(book.parameters())
    reference, reference_grads = logits_and_grads(book, params, [4, 2, 3])
    kernel, kernel_grads = logits_and_grads(choose_speed("auto", CPU, False, 1).wrap(book), params, [4, 2, 3])
    torch.testing.assert_close(kernel, reference, rtol=0, atol=1e-12)
    for got, want in zip(kernel_grads, reference_grads, strict=True):
        torch.testing.assert_close(got, want, rtol=0, atol=1e-12)


def test_block_kernels_only_where_they_apply():
    """Attention maps, autocast and wide heads keep the book path; CPU training takes the kernels."""
    torch.manual_seed(0)
    model = CpuSpeedups(1).wrap(Transformer(11, 13, 16, 24, 4, 1, 0.1).train())
    src, lens, tgt_in = torch.tensor([[1, 2, 3]]), torch.tensor([3]), torch.tensor([[1, 2]])
    assert "EncoderBlockFunctionBackward" in graph_names(model(src, lens, tgt_in))
    maps = model.attention_maps(src, lens, tgt_in)
    assert maps["cross"].grad_fn is not None and not BLOCK_NODES & graph_names(maps["cross"])
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert not BLOCK_NODES & graph_names(model(src, lens, tgt_in))
    wide = CpuSpeedups(1).wrap(Transformer(11, 13, 64, 24, 2, 1, 0.1).train())
    assert not BLOCK_NODES & graph_names(wide(src, lens, tgt_in))  # heads of 32 channels


def test_block_functions_pass_gradcheck_with_fixed_dropout_masks():
    """Hand-written backward of both block functions against finite differences (float64)."""
    torch.manual_seed(0)
    batch, src_steps, tgt_steps, hidden, heads = 2, 3, 4, 8, 2
    encoder = EncoderBlock(hidden, 12, heads, 0.0).double()
    decoder = DecoderBlock(hidden, 12, heads, 0.0).double()
    for param in [*encoder.parameters(), *decoder.parameters()]:  # LayerNorm starts at 1 and 0
        param.data.normal_(0, 0.5)
    X = torch.randn(batch, src_steps, hidden, dtype=torch.float64, requires_grad=True)
    Y = torch.randn(batch, tgt_steps, hidden, dtype=torch.float64, requires_grad=True)
    src_masks = keys_first(AttentionMask.from_valid_lens(torch.tensor([3, 1]), 1, src_steps).with_heads())
    self_masks = keys_first(AttentionMask.causal(tgt_steps).with_heads())

    def keep(*shape):
        return (torch.rand(shape) > 0.3).double() / 0.7

    enc_keeps = (
        keep(batch, src_steps, src_steps, heads),
        keep(batch, src_steps, hidden),
        keep(batch, src_steps, hidden),
    )
    dec_keeps = (
        keep(batch, tgt_steps, tgt_steps, heads),
        keep(batch, tgt_steps, hidden),
        keep(batch, src_steps, tgt_steps, heads),
        keep(batch, tgt_steps, hidden),
        keep(batch, tgt_steps, hidden),
    )
    enc_params, dec_params = encoder_block_params(encoder), decoder_block_params(decoder)
    assert torch.autograd.gradcheck(
        lambda x, *p: EncoderBlockFunction.apply(x, src_masks, enc_keeps, heads, 1e-5, *p), (X, *enc_params)
    )
    assert torch.autograd.gradcheck(
        lambda y, x, *p: DecoderBlockFunction.apply(y, x, self_masks, src_masks, dec_keeps, heads, 1e-5, *p),
        (Y, X, *dec_params),
    )


def test_auto_means_the_book_path_on_cuda_and_under_compile_on_the_cpu():
    """`auto` uses the CPU kernels on the CPU only and never under compile, the book's own modules on CUDA
    (no kernel dropout); `cpu` elsewhere is a user error."""
    cuda = torch.device("cuda")
    assert kernels_apply("auto", CPU, compile=False) and kernels_apply("cpu", CPU, compile=False)
    assert not kernels_apply("auto", cuda, compile=False)
    assert not kernels_apply("auto", CPU, compile=True) and not kernels_apply("reference", CPU, compile=False)
    with pytest.raises(UserError, match="train.kernels: cpu runs on the CPU only"):
        kernels_apply("cpu", cuda, compile=False)
    book = Transformer(11, 13, 16, 24, 4, 1, 0.1)
    speed = choose_speed("auto", cuda, False, 1)
    assert speed.name == "reference" and speed.wrap(book) is book
    assert type(choose_speed("auto", CPU, True, 1)) is PlainTorch
    assert all(type(m) is torch.nn.Dropout for m in book.modules() if isinstance(m, torch.nn.Dropout))
