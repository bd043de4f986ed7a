"""Transformer blocks as single autograd functions (CPU training) against the per-module path.

Shapes: B batch, S source steps, T target steps, H hidden, h heads.
"""

from __future__ import annotations

import pytest
import torch

from attn_mt.models import AttentionMask
from attn_mt.models.fused_blocks import DecoderBlockFunction, EncoderBlockFunction
from attn_mt.models.transformer import DecoderBlock, EncoderBlock, Transformer, _block_params


def set_fused(model: torch.nn.Module, fused: bool) -> None:
    """Switch every block of `model` between fused_forward and the per-module path."""
    for module in model.modules():
        if isinstance(module, (EncoderBlock, DecoderBlock)):
            module.fused = fused


def graph_names(tensor: torch.Tensor) -> set[str]:
    """Names of every autograd node behind `tensor`."""
    names, todo, seen = set(), [tensor.grad_fn], set()
    while todo:
        node = todo.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        names.add(type(node).__name__)
        todo.extend(next_node for next_node, _ in node.next_functions)
    return names


def logits_and_grads(fused: bool, src_lens: list[int], training: bool):
    """Logits of a float64 Transformer with dropout 0.2, and the gradients of every parameter."""
    torch.manual_seed(0)
    model = Transformer(11, 13, 16, 24, 4, 2, 0.2).double().train(training)
    set_fused(model, fused)
    src = torch.tensor([[1, 2, 3, 4, 0], [5, 6, 0, 0, 0], [7, 8, 9, 0, 0]])
    tgt_in = torch.tensor([[1, 2, 3, 4, 5, 6], [3, 4, 5, 0, 0, 0], [6, 7, 8, 9, 0, 0]])
    torch.manual_seed(1)  # the dropout masks: the same stream for both paths
    logits = model(src, torch.tensor(src_lens), tgt_in)  # (B, T, V)
    upstream = torch.randn(logits.shape, dtype=torch.float64, generator=torch.Generator().manual_seed(2))
    grads = torch.autograd.grad(logits, list(model.parameters()), upstream)
    return logits, grads, graph_names(logits)


@pytest.mark.parametrize("training", [True, False])
@pytest.mark.parametrize("src_lens", [[4, 2, 3], [5, 0, 3]], ids=["padded", "empty-source"])
def test_fused_blocks_equal_the_module_path(training, src_lens):
    """Same seed, same dropout masks: logits and every parameter's gradient agree to 1e-12."""
    fused, fused_grads, fused_nodes = logits_and_grads(True, src_lens, training)
    modules, module_grads, module_nodes = logits_and_grads(False, src_lens, training)
    assert "EncoderBlockFunctionBackward" in fused_nodes and "DecoderBlockFunctionBackward" in fused_nodes
    assert not {"EncoderBlockFunctionBackward", "DecoderBlockFunctionBackward"} & module_nodes
    torch.testing.assert_close(fused, modules, rtol=0, atol=1e-12)
    for got, want in zip(fused_grads, module_grads, strict=True):
        torch.testing.assert_close(got, want, rtol=0, atol=1e-12)
    if training:  # dropout really ran: the same model in eval mode gives other logits
        assert not torch.allclose(fused, logits_and_grads(True, src_lens, False)[0])


def test_fused_path_only_where_it_applies():
    """Inference, attention maps and autocast keep the per-module path; CPU training takes the fused one."""
    torch.manual_seed(0)
    model = Transformer(11, 13, 16, 24, 4, 1, 0.1).train()
    src, lens, tgt_in = torch.tensor([[1, 2, 3]]), torch.tensor([3]), torch.tensor([[1, 2]])
    assert "EncoderBlockFunctionBackward" in graph_names(model(src, lens, tgt_in))
    logits, _ = model.forward_with_attention(src, lens, tgt_in)
    assert "EncoderBlockFunctionBackward" not in graph_names(logits)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert "EncoderBlockFunctionBackward" not in graph_names(model(src, lens, tgt_in))
    wide = Transformer(11, 13, 64, 24, 2, 1, 0.1).train()  # heads of 32 channels: not packed
    assert "EncoderBlockFunctionBackward" not in graph_names(wide(src, lens, tgt_in))


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
    src_masks = AttentionMask.from_valid_lens(torch.tensor([3, 1]), 1, src_steps).with_heads().keys_first()
    self_masks = AttentionMask.causal(tgt_steps).with_heads().keys_first()

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
    enc_params, dec_params = _block_params(encoder), _block_params(decoder)
    assert torch.autograd.gradcheck(
        lambda x, *p: EncoderBlockFunction.apply(x, src_masks, enc_keeps, heads, 1e-5, *p), (X, *enc_params)
    )
    assert torch.autograd.gradcheck(
        lambda y, x, *p: DecoderBlockFunction.apply(y, x, self_masks, src_masks, dec_keeps, heads, 1e-5, *p),
        (Y, X, *dec_params),
    )
