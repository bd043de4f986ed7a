"""The Bahdanau model's GRU loops (kernels/cpu/recurrence.py) against the book's modules and torch's GRU.

Shapes: B batch, S source steps, T target steps, H hidden, L layers.
"""

from __future__ import annotations

import pytest
import torch
from support.graphs import graph_names

from attn_mt.kernels.cpu import CpuSpeedups
from attn_mt.kernels.cpu.dropout import draw_keep_masks, dropout, gru_keep_masks
from attn_mt.kernels.cpu.kernel_models import loop_weights
from attn_mt.kernels.cpu.recurrence import decoder_loop, encoder_loop, gru_weights
from attn_mt.models import GRUBahdanau
from attn_mt.training.optim import xavier_init_
from attn_mt.training.speed import choose_speed

CPU = torch.device("cpu")


def model_and_batch(layers: int | tuple[int, int], dropout: float = 0.0, dtype: torch.dtype = torch.float64):
    """A seeded Xavier-initialised model (`layers`: each side's, or the encoder's and the decoder's) and a
    batch whose sources have different lengths."""
    torch.manual_seed(layers if isinstance(layers, int) else 10 * layers[0] + layers[1])
    model = GRUBahdanau(17, 19, 6, 8, layers, dropout, pack_padded=False).to(dtype)
    xavier_init_(model)
    src = torch.randint(3, 17, (4, 7))  # (B, S)
    src_lens = torch.tensor([7, 3, 1, 5])
    tgt_in = torch.randint(3, 19, (4, 6))  # (B, T)
    return model, src, src_lens, tgt_in


LOOPS = {"_EncoderLoopBackward", "_DecoderLoopBackward"}


@pytest.mark.parametrize(
    ("layers", "p"),
    [(1, 0.0), (2, 0.0), (3, 0.0), (1, 0.3), (2, 0.3), (3, 0.5), ((2, 1), 0.0), ((2, 1), 0.3), ((3, 2), 0.5)],
)
def test_loops_equal_the_book_model_in_values_gradients_and_dropout(layers, p):
    """Same seed, same dropout masks: logits and every parameter's gradient agree to 1e-12."""
    book, src, src_lens, tgt_in = model_and_batch(layers, dropout=p)
    book.train()
    fast = CpuSpeedups(1).wrap(book)
    torch.manual_seed(7)
    kernel = fast(src, src_lens, tgt_in)  # (B, T, V)
    torch.manual_seed(7)
    reference = book(src, src_lens, tgt_in)
    assert graph_names(kernel) >= LOOPS and not LOOPS & graph_names(reference)
    torch.testing.assert_close(kernel, reference, rtol=0, atol=1e-12)
    upstream = torch.randn_like(kernel)
    params = list(book.parameters())
    kernel_grads = torch.autograd.grad((kernel * upstream).sum(), params)
    reference_grads = torch.autograd.grad((reference * upstream).sum(), params)
    for (name, _), got, want in zip(book.named_parameters(), kernel_grads, reference_grads, strict=True):
        torch.testing.assert_close(got, want, rtol=0, atol=1e-12, msg=name)
    if p:  # dropout really ran: in eval mode the logits differ
        with torch.no_grad():
            assert not torch.allclose(kernel, fast.eval()(src, src_lens, tgt_in))


def test_the_switch_reference_and_cpu_give_the_same_numbers_without_dropout():
    book, src, src_lens, tgt_in = model_and_batch(2)
    assert choose_speed("reference", CPU, False, 1).wrap(book) is book
    fast = choose_speed("auto", CPU, False, 1).wrap(book)
    torch.testing.assert_close(fast(src, src_lens, tgt_in), book(src, src_lens, tgt_in), rtol=0, atol=1e-12)


def test_loops_run_only_where_they_apply():
    """The encoder loop trains an unpacked GRU on the plain CPU; the decoder loop skips autocast and maps."""
    book, src, src_lens, tgt_in = model_and_batch(2, dtype=torch.float32)
    fast = CpuSpeedups(1).wrap(book)
    assert graph_names(fast(src, src_lens, tgt_in)) >= LOOPS
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert not LOOPS & graph_names(fast(src, src_lens, tgt_in))
    assert not LOOPS & graph_names(fast.attention_maps(src, src_lens, tgt_in)["cross"])
    packed = GRUBahdanau(17, 19, 6, 8, 2, 0.0, pack_padded=True)
    names = graph_names(CpuSpeedups(1).wrap(packed)(src, src_lens, tgt_in))
    assert "_DecoderLoopBackward" in names and "_EncoderLoopBackward" not in names


@pytest.mark.parametrize("layers", [1, 2])
def test_decoder_loop_gradcheck_with_dropout(layers):
    """Finite differences through attention dropout and dropout between layers, masks from a fixed seed."""
    model, src, src_lens, tgt_in = model_and_batch(layers, dropout=0.3)
    state = model.init_state(model.encode(src, src_lens))
    decoder = model.decoder
    emb_gates = torch.randn(4, 6, 24, dtype=torch.float64, requires_grad=True)  # (B, T, 3H)
    memory = state["memory"].detach().requires_grad_()
    keys = state["keys"].detach().requires_grad_()
    hidden = state["hidden"].detach().requires_grad_()
    weights = loop_weights(decoder)

    def run(emb_gates, memory, keys, hidden, context, top, top_bias, score):
        torch.manual_seed(5)  # the same masks at every evaluation
        weights.context, weights.top, weights.top_bias, weights.score = context, top, top_bias, score
        return decoder_loop(emb_gates, memory, keys, hidden, state["src_mask"], weights, 0.3, 0.3)

    inputs = (emb_gates, memory, keys, hidden) + tuple(
        t.detach().requires_grad_() for t in (weights.context, weights.top, weights.top_bias, weights.score)
    )
    assert torch.autograd.gradcheck(run, inputs, eps=1e-6, atol=1e-6)


def test_empty_source_rows_get_zero_attention_and_finite_gradients():
    book, src, src_lens, tgt_in = model_and_batch(2)
    fast = CpuSpeedups(1).wrap(book.train())
    enc = fast.encode(src, torch.tensor([0, 3, 1, 5]))
    outputs = fast.decode_features(tgt_in, enc)
    outputs.sum().backward()
    assert torch.isfinite(outputs).all()
    assert all(torch.isfinite(p.grad).all() for p in book.parameters() if p.grad is not None)


def test_keep_masks_drop_at_the_rate_and_keep_the_mean():
    torch.manual_seed(0)
    keep = draw_keep_masks((200, 500), 0.1, torch.empty(0))
    assert keep is not None
    assert abs((keep == 0).float().mean().item() - 0.1) < 0.005
    assert abs(keep.mean().item() - 1.0) < 0.01
    assert draw_keep_masks((3,), 0.0, torch.empty(0)) is None
    assert torch.equal(draw_keep_masks((3,), 1.0, torch.empty(0)), torch.zeros(3))
    torch.manual_seed(0)
    gru_keep = gru_keep_masks((200, 500), 0.1, torch.empty(0))
    assert abs((gru_keep == 0).float().mean().item() - 0.1) < 0.005


def test_dropout_scales_kept_elements_and_passes_gradients_through_the_same_mask():
    torch.manual_seed(1)
    x = torch.randn(4000, requires_grad=True)
    out = dropout(x, 0.25, training=True)
    kept = out != 0
    torch.testing.assert_close(out[kept], x[kept] / 0.75)
    assert abs(1 - kept.float().mean().item() - 0.25) < 0.03
    out.sum().backward()
    torch.testing.assert_close(x.grad, kept.float() / 0.75)
    assert dropout(x, 0.25, training=False) is x


@pytest.mark.parametrize(("layers", "p"), [(1, 0.0), (2, 0.0), (2, 0.3), (3, 0.5)])
def test_encoder_loop_equals_torch_gru_in_values_gradients_and_dropout_masks(layers, p):
    """Same seed, same masks: outputs, final states and every gradient match nn.GRU's."""
    model, src, src_lens, _ = model_and_batch(layers, dropout=p)
    model.train()
    encoder = model.encoder
    embedded = encoder.embedding(src)  # (B, S, E)
    torch.manual_seed(11)
    outputs, hidden = encoder_loop(embedded, gru_weights(encoder.rnn), p)  # (B, S, H), (L, B, H)
    torch.manual_seed(11)
    ref_outputs, ref_hidden = encoder.rnn(embedded)
    assert outputs.shape == (4, 7, 8) and hidden.shape == (layers, 4, 8)
    torch.testing.assert_close(outputs, ref_outputs, rtol=0, atol=1e-12)
    torch.testing.assert_close(hidden, ref_hidden, rtol=0, atol=1e-12)
    w_out, w_hidden = torch.randn_like(outputs), torch.randn_like(hidden)
    params = [embedded, *gru_weights(encoder.rnn)]
    grads = torch.autograd.grad((outputs * w_out).sum() + (hidden * w_hidden).sum(), params)
    ref_grads = torch.autograd.grad((ref_outputs * w_out).sum() + (ref_hidden * w_hidden).sum(), params)
    for i, (got, want) in enumerate(zip(grads, ref_grads, strict=True)):
        torch.testing.assert_close(got, want, rtol=0, atol=1e-12, msg=f"input {i}")
    if p:  # the masks really dropped something: without them the outputs differ
        torch.manual_seed(11)
        undropped = encoder_loop(embedded, gru_weights(encoder.rnn), 0.0)[0]
        assert not torch.allclose(undropped, outputs)


def test_encoder_loop_gradcheck_with_dropout():
    model, src, _, _ = model_and_batch(2, dropout=0.3)
    weights = [w.detach().requires_grad_() for w in gru_weights(model.encoder.rnn)]
    embedded = model.encoder.embedding(src).detach().requires_grad_()

    def run(embedded, *weights):
        torch.manual_seed(3)  # the same masks at every evaluation
        outputs, hidden = encoder_loop(embedded, list(weights), 0.3)
        return outputs, hidden

    assert torch.autograd.gradcheck(run, (embedded, *weights), eps=1e-6, atol=1e-6)
