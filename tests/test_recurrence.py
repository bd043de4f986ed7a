"""The Bahdanau model's GRU loops with hand-written backwards, against torch's GRU and the recorded path.

Shapes: B batch, S source steps, T target steps, H hidden, L layers.
"""

from __future__ import annotations

import pytest
import torch

from attn_mt.models import AttentionMask, GRUBahdanau
from attn_mt.models.bahdanau import gru_weights
from attn_mt.models.dropout import draw_keep_masks, dropout
from attn_mt.models.recurrence import _DecoderLoop, _EncoderLoop, decoder_loop, encoder_loop
from attn_mt.training.optim import xavier_init_


def model_and_batch(layers: int, dropout: float = 0.0, dtype: torch.dtype = torch.float64):
    """A seeded Xavier-initialised model and a batch whose sources have different lengths."""
    torch.manual_seed(layers)
    model = GRUBahdanau(17, 19, 6, 8, layers, dropout, pack_padded=False).to(dtype)
    xavier_init_(model)
    src = torch.randint(3, 17, (4, 7))  # (B, S)
    src_lens = torch.tensor([7, 3, 1, 5])
    tgt_in = torch.randint(3, 19, (4, 6))  # (B, T)
    return model, src, src_lens, tgt_in


def step_by_step(model: GRUBahdanau, src: torch.Tensor, src_lens: torch.Tensor, tgt_in: torch.Tensor):
    """Logits of the recorded per-step path (asking for the weights forces it)."""
    return model.decoder(tgt_in, model.init_state(model.encode(src, src_lens)), need_weights=True)[0]


@pytest.mark.parametrize("layers", [1, 2, 3])
def test_values_and_gradients_equal_the_step_by_step_path(layers):
    model, src, src_lens, tgt_in = model_and_batch(layers)
    model.train()  # dropout 0: both paths are deterministic
    fused = model(src, src_lens, tgt_in)  # (B, T, V)
    reference = step_by_step(model, src, src_lens, tgt_in)
    torch.testing.assert_close(fused, reference, rtol=0, atol=1e-12)
    weights = torch.randn_like(fused)
    params = list(model.parameters())
    fused_grads = torch.autograd.grad((fused * weights).sum(), params)
    reference_grads = torch.autograd.grad((reference * weights).sum(), params)
    for (name, _), got, want in zip(model.named_parameters(), fused_grads, reference_grads, strict=True):
        torch.testing.assert_close(got, want, rtol=0, atol=1e-12, msg=name)


def test_the_loop_runs_whenever_no_weights_are_asked_for(monkeypatch):
    model, src, src_lens, tgt_in = model_and_batch(2, dtype=torch.float32)
    calls = []
    original = _DecoderLoop.apply
    monkeypatch.setattr(_DecoderLoop, "apply", lambda *args: calls.append(1) or original(*args))
    model(src, src_lens, tgt_in)
    assert len(calls) == 1
    step_by_step(model, src, src_lens, tgt_in)
    assert len(calls) == 1


@pytest.mark.parametrize("layers", [1, 2])
def test_gradcheck_with_dropout_masks_fixed(layers, monkeypatch):
    """Finite differences through attention dropout and dropout between layers, masks held fixed."""
    model, src, src_lens, tgt_in = model_and_batch(layers, dropout=0.3)
    torch.manual_seed(5)
    masks = {}

    def fixed(shape, p, like):
        if shape not in masks:
            masks[shape] = draw_keep_masks(shape, p, like)
        return masks[shape]

    monkeypatch.setattr("attn_mt.models.recurrence.draw_keep_masks", fixed)
    state = model.init_state(model.encode(src, src_lens))
    emb_gates = model.decoder.embedding_gates(tgt_in).detach().requires_grad_()
    memory = state["memory"].detach().requires_grad_()
    keys = state["keys"].detach().requires_grad_()
    hidden = state["hidden"].detach().requires_grad_()
    weights = model.decoder.loop_weights()

    def run(emb_gates, memory, keys, hidden, context, top, top_bias, score):
        weights.context, weights.top, weights.top_bias, weights.score = context, top, top_bias, score
        return decoder_loop(emb_gates, memory, keys, hidden, state["src_mask"], weights, 0.3, 0.3)

    inputs = (emb_gates, memory, keys, hidden) + tuple(
        t.detach().requires_grad_() for t in (weights.context, weights.top, weights.top_bias, weights.score)
    )
    assert torch.autograd.gradcheck(run, inputs, eps=1e-6, atol=1e-6)
    dropped = [m for m in masks.values() if m is not None]
    scale = torch.tensor(1 / 0.7, dtype=torch.float64)
    assert dropped and all(((m == 0) | torch.isclose(m, scale)).all() for m in dropped)


def test_empty_source_rows_get_zero_attention_and_finite_gradients():
    model, src, src_lens, tgt_in = model_and_batch(2)
    model.train()
    state = model.init_state(model.encode(src, src_lens))
    state["src_mask"] = AttentionMask.from_valid_lens(torch.tensor([0, 3, 1, 5]), 1, src.shape[1])
    outputs = model.decoder(tgt_in, state)[0]
    outputs.sum().backward()
    assert torch.isfinite(outputs).all()
    assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)


def test_keep_masks_drop_at_the_rate_and_keep_the_mean():
    torch.manual_seed(0)
    keep = draw_keep_masks((200, 500), 0.1, torch.empty(0))
    assert keep is not None
    assert abs((keep == 0).float().mean().item() - 0.1) < 0.005
    assert abs(keep.mean().item() - 1.0) < 0.01
    assert draw_keep_masks((3,), 0.0, torch.empty(0)) is None
    assert torch.equal(draw_keep_masks((3,), 1.0, torch.empty(0)), torch.zeros(3))


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


def test_encoder_runs_the_loop_only_when_training_an_unpacked_gru_on_the_cpu(monkeypatch):
    calls = []
    original = _EncoderLoop.apply
    monkeypatch.setattr(_EncoderLoop, "apply", lambda *args: calls.append(1) or original(*args))
    model, src, src_lens, tgt_in = model_and_batch(2, dtype=torch.float32)
    model(src, src_lens, tgt_in)
    assert len(calls) == 1
    with torch.no_grad():  # inference keeps torch's fused GRU
        model(src, src_lens, tgt_in)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        model(src, src_lens, tgt_in)
    packed = GRUBahdanau(17, 19, 6, 8, 2, 0.0, pack_padded=True)
    packed(src, src_lens, tgt_in)
    assert len(calls) == 1
