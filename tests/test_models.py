"""The GRU-Bahdanau and Transformer encoder-decoders: shapes, book math, invariants, incremental decoding.

Shapes: B batch, S source steps, T target steps, V target vocabulary, L layers, h heads.
"""

from __future__ import annotations

import pytest
import torch
from support.book_math import bahdanau_logits, transformer_logits
from support.tolerances import assert_float32_close, decoding_terms
from torch.nn import functional as F

from attn_mt.config import ModelConfig
from attn_mt.errors import UserError
from attn_mt.models import (
    MODEL_BUILDERS,
    AttentionMask,
    GRUBahdanau,
    Transformer,
    TransformerDecoder,
    TransformerEncoder,
    build_model,
)
from attn_mt.models import attention as attention_module
from attn_mt.training.optim import xavier_init_

PAD = 1  # the book's <pad> id
SRC_V, TGT_V = 13, 11
LAYERS, HEADS = 2, 2
# Logits reached in another batch shape, padding or step order sum in another order: at most 8 GRU steps or
# 2 x 3 Transformer sublayers in a chain, each with a product of at most 14 terms (the GRU's embedding +
# context input) and a softmax over at most 8 keys.
MODEL_TERMS = decoding_terms(steps=8, widest=14, keys_or_vocab=8)


def make(
    kind: str,
    dropout: float = 0.0,
    pack_padded: bool = True,
    seed: int = 0,
    depths: tuple[int, int] | None = None,
) -> torch.nn.Module:
    """A tiny seeded model in eval mode with weights large enough to make every input matter (`depths`:
    the encoder's and the decoder's layers, LAYERS each by default)."""
    torch.manual_seed(seed)
    encoder_layers, decoder_layers = depths or (None, None)
    cfg = ModelConfig(
        type=kind,
        embed_size=6,
        num_hiddens=8,
        num_layers=LAYERS,
        encoder_layers=encoder_layers,
        decoder_layers=decoder_layers,
        num_heads=HEADS,
        ffn_num_hiddens=12,
        dropout=dropout,
        pack_padded=pack_padded,
    )
    model = build_model(cfg, SRC_V, TGT_V)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if not name.endswith("ln.weight"):
                param.normal_(0.0, 0.5)
    return model.eval()


def batch(lens: list[int], width: int | None = None, tgt_steps: int = 5, seed: int = 0):
    """Random source ids padded to `width` with <pad>, valid lengths, and random decoder inputs."""
    gen = torch.Generator().manual_seed(seed)
    width = width or max(lens)
    src = torch.randint(4, SRC_V, (len(lens), width), generator=gen)
    src_lens = torch.tensor(lens)
    src[torch.arange(width).unsqueeze(0) >= src_lens.unsqueeze(1)] = PAD
    tgt_in = torch.randint(2, TGT_V, (len(lens), tgt_steps), generator=gen)
    return src, src_lens, tgt_in


def widen(src: torch.Tensor, extra: int) -> torch.Tensor:
    """Append `extra` <pad> columns."""
    return torch.cat([src, torch.full((src.shape[0], extra), PAD)], dim=1)


def run_steps(model, src, src_lens, tgt_in, need_attention=False):
    """Incremental decoding of tgt_in one token at a time: logits (B, T, V) and per-step attention."""
    state = model.init_state(model.encode(src, src_lens))
    logits, maps = [], []
    for t in range(tgt_in.shape[1]):
        step_logits, state, attention = model.step(tgt_in[:, t], state, need_attention)
        logits.append(step_logits)
        maps.append(attention)
    return torch.stack(logits, dim=1), maps


KINDS = ["gru_bahdanau", "transformer"]


# ----- building -----


def test_builders_mapping_and_sizes():
    assert set(MODEL_BUILDERS) == {"gru_bahdanau", "transformer"}
    assert isinstance(make("gru_bahdanau"), GRUBahdanau)
    model = make("transformer")
    assert isinstance(model, Transformer)
    assert model.encoder.embedding.weight.shape == (SRC_V, 8)
    assert model.decoder.dense.weight.shape == (TGT_V, 8)
    assert len(model.decoder.blks) == LAYERS
    assert model.decoder.blks["block1"].ffn.dense1.weight.shape == (12, 8)
    gru = make("gru_bahdanau")
    assert gru.decoder.rnn.weight_ih_l0.shape == (24, 6 + 8)  # [context, embedding] -> 3 gates


def test_build_model_rejects_unknown_type_and_bad_heads():
    with pytest.raises(UserError, match="model.type: 'lstm'"):
        build_model(ModelConfig(type="lstm"), 5, 5)
    with pytest.raises(ValueError, match="num_hiddens = 10 is not divisible by num_heads = 4"):
        build_model(ModelConfig(type="transformer", num_hiddens=10, num_heads=4), 5, 5)


# ----- the book's shape examples -----


def test_bahdanau_book_shapes():
    torch.manual_seed(0)
    model = GRUBahdanau(
        10, 10, embed_size=8, num_hiddens=16, num_layers=2, dropout=0.0, pack_padded=False
    ).eval()
    X = torch.zeros((4, 7), dtype=torch.long)
    enc = model.encode(X, torch.full((4,), 7))
    assert enc["memory"].shape == (4, 7, 16) and enc["hidden"].shape == (2, 4, 16)
    assert model(X, torch.full((4,), 7), X).shape == (4, 7, 10)
    assert model.attention_maps(X, torch.full((4,), 7), X)["cross"].shape == (4, 7, 7)


def test_transformer_book_shapes():
    torch.manual_seed(0)
    encoder = TransformerEncoder(
        200, num_hiddens=24, ffn_num_hiddens=48, num_heads=8, num_layers=2, dropout=0.5
    ).eval()
    lens = torch.tensor([3, 2])
    mask = AttentionMask.from_valid_lens(lens, 1, 100).with_heads()
    memory, _ = encoder(torch.ones((2, 100), dtype=torch.long), mask)
    assert memory.shape == (2, 100, 24)
    decoder = TransformerDecoder(200, 24, 48, 8, 2, 0.5).eval()
    logits, caches, _, _ = decoder(
        torch.ones((2, 100), dtype=torch.long), decoder.project_memory(memory), mask
    )
    assert logits.shape == (2, 100, 200)
    assert caches[0][0].shape == (2, 8, 100, 3)


# ----- the book's math, written out by hand -----


def test_bahdanau_matches_hand_written_book_math():
    model = make("gru_bahdanau", pack_padded=False)
    src, src_lens, tgt_in = batch([5, 3, 1], tgt_steps=4)
    expected = bahdanau_logits(model.state_dict(), src, src_lens, tgt_in, LAYERS)
    with torch.no_grad():
        torch.testing.assert_close(model(src, src_lens, tgt_in), expected, atol=1e-5, rtol=1e-5)


def test_transformer_matches_hand_written_book_math():
    model = make("transformer")
    src, src_lens, tgt_in = batch([5, 3, 1], tgt_steps=4)
    expected = transformer_logits(model.state_dict(), src, src_lens, tgt_in, LAYERS, HEADS)
    with torch.no_grad():
        torch.testing.assert_close(model(src, src_lens, tgt_in), expected, atol=1e-5, rtol=1e-5)


# ----- invariants -----


@pytest.mark.parametrize("kind", KINDS)
def test_padding_invariance(kind):
    model = make(kind, pack_padded=True)
    src, src_lens, tgt_in = batch([4, 2, 3], tgt_steps=4)
    with torch.no_grad():
        logits = model(src, src_lens, tgt_in)
        assert_float32_close(model(widen(src, 3), src_lens, tgt_in), logits, terms=MODEL_TERMS)
        longer = torch.cat([tgt_in, torch.full((3, 2), PAD)], dim=1)  # <pad> after the target
        assert_float32_close(model(src, src_lens, longer)[:, :4], logits, terms=MODEL_TERMS)
        for row, length in enumerate(src_lens.tolist()):  # each sentence alone, without any padding
            alone = model(src[row : row + 1, :length], src_lens[row : row + 1], tgt_in[row : row + 1])
            assert_float32_close(alone[0], logits[row], terms=MODEL_TERMS)


def test_gru_without_packing_reads_pads_as_the_book():
    model = make("gru_bahdanau", pack_padded=False)
    src, src_lens, tgt_in = batch([4, 2, 3], tgt_steps=4)
    with torch.no_grad():
        logits, wider = model(src, src_lens, tgt_in), model(widen(src, 3), src_lens, tgt_in)
    assert not torch.allclose(wider, logits, atol=1e-4)


@pytest.mark.parametrize("kind", KINDS)
def test_causality(kind):
    model = make(kind)
    src, src_lens, tgt_in = batch([4, 3], tgt_steps=6)
    changed = tgt_in.clone()
    changed[:, 3:] = (changed[:, 3:] - 1) % (TGT_V - 2) + 2  # every later token replaced
    with torch.no_grad():
        before, after = model(src, src_lens, tgt_in), model(src, src_lens, changed)
    assert_float32_close(after[:, :3], before[:, :3], terms=MODEL_TERMS)
    assert not torch.allclose(after[:, 3], before[:, 3], atol=1e-4)


@pytest.mark.parametrize("kind", KINDS)
def test_incremental_decoding_equals_teacher_forcing(kind):
    model = make(kind)
    src, src_lens, tgt_in = batch([5, 2, 4], tgt_steps=6)
    with torch.no_grad():
        full = model(src, src_lens, tgt_in)
        stepped, maps = run_steps(model, src, src_lens, tgt_in, need_attention=True)
        quiet, quiet_maps = run_steps(model, src, src_lens, tgt_in)
        all_maps = model.attention_maps(src, src_lens, tgt_in)
    assert_float32_close(stepped, full, terms=MODEL_TERMS)
    assert_float32_close(quiet, full, terms=MODEL_TERMS)
    assert all(m == {} for m in quiet_maps)
    cross = torch.stack([m["cross"] for m in maps], dim=-2)  # (B, T, S) or (B, L, h, T, S)
    assert_float32_close(cross, all_maps["cross"], terms=MODEL_TERMS)
    if kind == "transformer":
        for t, m in enumerate(maps):
            assert m["self"].shape == (3, LAYERS, HEADS, t + 1)
            assert_float32_close(m["self"], all_maps["decoder_self"][..., t, : t + 1], terms=MODEL_TERMS)


@pytest.mark.parametrize(
    ("kind", "depths"), [("transformer", (3, 1)), ("transformer", (1, 2)), ("gru_bahdanau", (2, 1))]
)
def test_encoder_and_decoder_depths_apart(kind, depths):
    """encoder_layers and decoder_layers build each side's depth; the model decodes as one of equal depths."""
    model = make(kind, depths=depths)
    src, src_lens, tgt_in = batch([5, 2, 4], tgt_steps=6)
    with torch.no_grad():
        full = model(src, src_lens, tgt_in)
        stepped, maps = run_steps(model, src, src_lens, tgt_in, need_attention=True)
        all_maps = model.attention_maps(src, src_lens, tgt_in)
        enc = model.encode(src, src_lens)
    assert_float32_close(stepped, full, terms=MODEL_TERMS)
    if kind == "transformer":
        assert (len(model.encoder.blks), len(model.decoder.blks)) == depths
        assert all_maps["encoder_self"].shape[1] == depths[0]
        assert all_maps["cross"].shape[1] == all_maps["decoder_self"].shape[1] == depths[1]
        assert maps[-1]["cross"].shape[1] == depths[1]
    else:
        assert (model.encoder.rnn.num_layers, model.decoder.rnn.num_layers) == depths
        with torch.no_grad():
            _, encoder_final = model.encoder(src, src_lens)  # (L_enc, B, H)
        assert encoder_final.shape[0] == 2
        torch.testing.assert_close(enc["hidden"], encoder_final[-1:], rtol=0, atol=0)  # the top layer's


def test_a_gru_decoder_deeper_than_its_encoder_is_refused():
    with pytest.raises(ValueError, match="decoder's 3 GRU layers start from the encoder's top layers"):
        GRUBahdanau(5, 5, 4, 4, (2, 3), 0.0, pack_padded=False)


def test_equal_depths_are_num_layers():
    """Unset, both depths are num_layers: the model an older config describes is the same model."""
    torch.manual_seed(0)
    old = build_model(ModelConfig(type="transformer", num_hiddens=8, num_heads=2, num_layers=3), 7, 7)
    torch.manual_seed(0)
    new = build_model(
        ModelConfig(
            type="transformer", num_hiddens=8, num_heads=2, num_layers=1, encoder_layers=3, decoder_layers=3
        ),
        7,
        7,
    )
    assert old.state_dict().keys() == new.state_dict().keys()
    assert all(torch.equal(old.state_dict()[k], new.state_dict()[k]) for k in old.state_dict())


@pytest.mark.parametrize("kind", KINDS)
def test_reorder_state_selects_and_repeats_rows(kind):
    model = make(kind)
    src, src_lens, tgt_in = batch([5, 2, 4], tgt_steps=3)
    index = torch.tensor([2, 0, 0, 1])
    with torch.no_grad():
        state = model.init_state(model.encode(src, src_lens))
        _, state, _ = model.step(tgt_in[:, 0], state)
        state = model.reorder_state(state, index)
        logits = []
        for t in (1, 2):
            step_logits, state, _ = model.step(tgt_in[index, t], state)
            logits.append(step_logits)
        expected, _ = run_steps(model, src[index], src_lens[index], tgt_in[index])
    assert_float32_close(torch.stack(logits, dim=1), expected[:, 1:], terms=MODEL_TERMS)


def test_transformer_fused_path_equals_explicit_path():
    model = make("transformer")
    src, src_lens, tgt_in = batch([5, 2, 4], tgt_steps=6)
    with torch.no_grad():
        fused = model(src, src_lens, tgt_in)
        explicit, _ = model.forward_with_attention(src, src_lens, tgt_in)
    assert_float32_close(fused, explicit, terms=MODEL_TERMS)


def test_transformer_source_without_valid_token_gives_finite_logits_and_gradients():
    model = make("transformer", dropout=0.1).train()
    src, src_lens, tgt_in = batch([3, 2], tgt_steps=3)
    src_lens[1] = 0
    logits = model(src, src_lens, tgt_in)
    assert torch.isfinite(logits).all()
    logits.sum().backward()
    assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)
    model.eval()
    with torch.no_grad():
        maps = model.attention_maps(src, src_lens, tgt_in)
        torch.testing.assert_close(
            model(src, src_lens, tgt_in), model.forward_with_attention(src, src_lens, tgt_in)[0]
        )
    assert (maps["cross"][1] == 0).all() and (maps["encoder_self"][1] == 0).all()


# ----- attention maps -----


def test_transformer_attention_maps_shapes_and_masks():
    model = make("transformer")
    src, src_lens, tgt_in = batch([5, 2], tgt_steps=4)
    with torch.no_grad():
        maps = model.attention_maps(src, src_lens, tgt_in)
    assert maps["encoder_self"].shape == (2, LAYERS, HEADS, 5, 5)
    assert maps["decoder_self"].shape == (2, LAYERS, HEADS, 4, 4)
    assert maps["cross"].shape == (2, LAYERS, HEADS, 4, 5)
    assert (maps["cross"][1, ..., 2:] == 0).all() and (maps["encoder_self"][1, ..., 2:] == 0).all()
    assert (maps["decoder_self"].triu(diagonal=1) == 0).all()
    for name in maps:
        torch.testing.assert_close(maps[name].sum(-1), torch.ones(maps[name].shape[:-1]))


def test_bahdanau_attention_maps_mask_padding():
    model = make("gru_bahdanau")
    src, src_lens, tgt_in = batch([5, 2], tgt_steps=4)
    with torch.no_grad():
        cross = model.attention_maps(src, src_lens, tgt_in)["cross"]
    assert cross.shape == (2, 4, 5)
    assert (cross[1, :, 2:] == 0).all()
    torch.testing.assert_close(cross.sum(-1), torch.ones(2, 4))


# ----- training mode -----


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("training", [False, True])
def test_features_are_what_the_output_layer_turns_into_the_logits(kind, training):
    model = make(kind).train(training)
    src, src_lens, tgt_in = batch([4, 2, 3], tgt_steps=5)
    hidden = model.decode_features(tgt_in, model.encode(src, src_lens))
    assert hidden.shape == (3, 5, 8)  # (B, T, H)
    assert model.output_layer.out_features == TGT_V
    assert_float32_close(model.output_layer(hidden), model(src, src_lens, tgt_in), terms=MODEL_TERMS)


@pytest.mark.parametrize("kind", KINDS)
def test_training_mode_backward_reaches_every_parameter(kind):
    model = make(kind, dropout=0.2).train()
    src, src_lens, tgt_in = batch([4, 3], tgt_steps=4)
    logits = model(src, src_lens, tgt_in)
    F.cross_entropy(logits.reshape(-1, TGT_V), tgt_in.reshape(-1)).backward()
    for name, param in model.named_parameters():
        assert param.grad is not None and torch.isfinite(param.grad).all(), name
        assert param.grad.abs().sum() > 0, name


@pytest.mark.parametrize("kind", KINDS)
def test_bfloat16_autocast_trains_and_decodes(kind):
    model = make(kind, dropout=0.1).train()
    src, src_lens, tgt_in = batch([4, 3], tgt_steps=4)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        logits = model(src, src_lens, tgt_in)
    logits.float().sum().backward()
    assert all(torch.isfinite(p.grad).all() for p in model.parameters())
    model.eval()
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        stepped, _ = run_steps(model, src, src_lens, tgt_in, need_attention=True)
    assert stepped.shape == (2, 4, TGT_V) and torch.isfinite(stepped).all()


# ----- no repeated work -----


def count_calls(module: torch.nn.Module) -> list[int]:
    """A one-element counter incremented by every forward call of `module`."""
    calls = [0]

    def hook(*_):
        calls[0] += 1

    module.register_forward_hook(hook)
    return calls


def test_bahdanau_projects_keys_once_per_batch():
    model = make("gru_bahdanau")
    keys = count_calls(model.decoder.attention.W_k)
    for steps in (3, 9):
        src, src_lens, tgt_in = batch([4, 3], tgt_steps=steps)
        with torch.no_grad():
            model(src, src_lens, tgt_in)
            run_steps(model, src, src_lens, tgt_in)
    assert keys[0] == 4  # once per decode() and once per init_state(), whatever the number of steps


def test_transformer_projects_memory_once_and_caches_steps():
    model = make("transformer")
    src, src_lens, tgt_in = batch([4, 3], tgt_steps=6)
    cross_keys = count_calls(model.decoder.blks["block0"].attention2.W_k)
    self_keys = count_calls(model.decoder.blks["block0"].attention1.W_k)
    with torch.no_grad():
        run_steps(model, src, src_lens, tgt_in)
    assert cross_keys[0] == 1  # in init_state only
    assert self_keys[0] == 6  # one new step at a time, earlier steps come from the cache


@pytest.mark.parametrize("dropout", [0.0, 0.25])
def test_transformer_training_pass_on_the_fused_kernels_equals_the_explicit_path(dropout, monkeypatch):
    # the fused path (aligned causal and source biases) in training mode, with dropout drawn inside
    # torch's kernel, against the book's explicit softmax drawing the same dropout from the same seed
    monkeypatch.setattr(attention_module, "EXPLICIT_WITH_DROPOUT", ())
    model = make("transformer", dropout=dropout).train()
    src, src_lens, tgt_in = batch([5, 2, 4], tgt_steps=6)
    calls = []
    sdpa = attention_module.F.scaled_dot_product_attention

    def recording(*args, **kwargs):
        assert not kwargs.get("is_causal")
        calls.append(kwargs["attn_mask"])
        return sdpa(*args, **kwargs)

    monkeypatch.setattr(attention_module.F, "scaled_dot_product_attention", recording)
    outputs, grads = [], []
    for run in (model, lambda *a: model.forward_with_attention(*a)[0]):
        torch.manual_seed(7)
        logits = run(src, src_lens, tgt_in)
        outputs.append(logits)
        grads.append(torch.autograd.grad((logits * torch.linspace(-1, 1, TGT_V)).sum(), model.parameters()))
    assert_float32_close(outputs[0], outputs[1], terms=MODEL_TERMS)
    for fused, explicit in zip(*grads, strict=True):
        assert_float32_close(fused, explicit, terms=2 * MODEL_TERMS)
    causal = [mask for mask in calls if mask.shape[0] == 1]  # (1, 1, T, T): the decoder's self-attention
    biased = [mask for mask in calls if mask.shape[0] == 3]  # (B, 1, 1, S): encoder self and cross
    assert len(causal) == LAYERS and all(
        torch.equal(m[0, 0] == 0, torch.ones(6, 6).tril().bool()) for m in causal
    )
    assert len(biased) == 2 * LAYERS and all(mask.dtype == torch.float32 for mask in calls)


@pytest.mark.parametrize("kind", KINDS)
def test_masks_built_once_per_batch(kind, monkeypatch):
    built = []
    original = AttentionMask.from_valid_lens.__func__

    def counting(cls, *args):
        built.append(args)
        return original(cls, *args)

    monkeypatch.setattr(AttentionMask, "from_valid_lens", classmethod(counting))
    model = make(kind)
    src, src_lens, tgt_in = batch([4, 3], tgt_steps=5)
    with torch.no_grad():
        model(src, src_lens, tgt_in)
    assert len(built) == 1


def test_transformer_uses_fused_attention_unless_weights_are_asked_for(monkeypatch):
    calls = []
    fused = attention_module.F.scaled_dot_product_attention

    def counting(*args, **kwargs):
        calls.append(1)
        return fused(*args, **kwargs)

    monkeypatch.setattr(attention_module.F, "scaled_dot_product_attention", counting)
    model = make("transformer")
    src, src_lens, tgt_in = batch([4, 3], tgt_steps=5)
    with torch.no_grad():
        model(src, src_lens, tgt_in)
        assert len(calls) == 3 * LAYERS  # encoder self, decoder self, cross
        model.attention_maps(src, src_lens, tgt_in)
        assert len(calls) == 3 * LAYERS  # every weight asked for: the explicit path only
        run_steps(model, src, src_lens, tgt_in, need_attention=True)
    assert len(calls) == 4 * LAYERS  # encode() needs no weights; the asked-for decoder steps are explicit


def test_tied_embeddings_share_one_matrix_through_init_training_and_a_reload():
    torch.manual_seed(0)
    cfg = ModelConfig(
        type="transformer",
        num_hiddens=16,
        num_layers=1,
        num_heads=2,
        ffn_num_hiddens=8,
        dropout=0.0,
        tie_embeddings=True,
    )
    tied = build_model(cfg, SRC_V, 40)
    untied = build_model(ModelConfig(**{**vars(cfg), "tie_embeddings": False}), SRC_V, 40)
    xavier_init_(tied)
    assert tied.decoder.dense.weight is tied.decoder.embedding.weight
    count = sum(p.numel() for p in tied.parameters())
    assert count == sum(p.numel() for p in untied.parameters()) - 40 * 16
    # xavier_init_ leaves the shared matrix at N(0, 1/H): std 0.25 here, where Xavier would give ~0.2
    assert abs(tied.decoder.embedding.weight.std().item() - 16**-0.5) < 0.03
    src, src_lens, tgt_in = batch([3, 2])
    tgt_in = tgt_in.remainder(40)
    optimizer = torch.optim.SGD(tied.parameters(), lr=0.1)
    tied(src, src_lens, tgt_in).logsumexp(-1).sum().backward()
    optimizer.step()
    assert tied.decoder.dense.weight is tied.decoder.embedding.weight
    reloaded = build_model(cfg, SRC_V, 40)
    reloaded.load_state_dict(tied.state_dict())
    tied.eval(), reloaded.eval()
    torch.testing.assert_close(reloaded(src, src_lens, tgt_in), tied(src, src_lens, tgt_in), rtol=0, atol=0)


def test_scaled_embed_init_starts_both_embeddings_at_the_positional_encodings_scale():
    torch.manual_seed(0)
    cfg = ModelConfig(type="transformer", num_hiddens=64, num_layers=1, num_heads=2, ffn_num_hiddens=8)
    book = build_model(cfg, 500, 400)
    scaled = build_model(ModelConfig(**{**vars(cfg), "embed_init": "scaled"}), 500, 400)
    for side in ("encoder", "decoder"):
        # the book's nn.Embedding N(0, 1) times sqrt(64) has std 8; N(0, 1/64) times sqrt(64) has std 1
        assert abs(getattr(book, side).embedding.weight.std().item() - 1.0) < 0.02
        assert abs(getattr(scaled, side).embedding.weight.std().item() - 64**-0.5) < 0.005
    src = torch.randint(0, 400, (3, 7))
    assert abs(scaled.encoder.embedding(src).mul(8).std().item() - 1.0) < 0.1


def test_a_tied_source_embedding_is_the_decoder_matrix_through_training_and_a_reload():
    torch.manual_seed(0)
    cfg = ModelConfig(
        type="transformer",
        num_hiddens=16,
        num_layers=1,
        num_heads=2,
        ffn_num_hiddens=8,
        dropout=0.0,
        tie_embeddings=True,
        tie_source_embedding=True,
    )
    shared = build_model(cfg, 40, 40)
    output_only = build_model(ModelConfig(**{**vars(cfg), "tie_source_embedding": False}), 40, 40)
    assert shared.encoder.embedding.weight is shared.decoder.embedding.weight is shared.decoder.dense.weight
    count = sum(p.numel() for p in shared.parameters())
    assert count == sum(p.numel() for p in output_only.parameters()) - 40 * 16
    src, src_lens, tgt_in = batch([3, 2])
    src, tgt_in = src.remainder(40), tgt_in.remainder(40)
    shared(src, src_lens, tgt_in).logsumexp(-1).sum().backward()
    grad = shared.encoder.embedding.weight.grad  # (V, H): rows of source-only pieces get gradient too
    source_only = sorted(set(src.flatten().tolist()) - set(tgt_in.flatten().tolist()))
    assert source_only and grad[source_only].abs().sum() > 0
    torch.optim.SGD(shared.parameters(), lr=0.1).step()
    assert shared.encoder.embedding.weight is shared.decoder.embedding.weight
    reloaded = build_model(cfg, 40, 40)
    reloaded.load_state_dict(shared.state_dict())
    assert reloaded.encoder.embedding.weight is reloaded.decoder.embedding.weight
    shared.eval(), reloaded.eval()
    torch.testing.assert_close(reloaded(src, src_lens, tgt_in), shared(src, src_lens, tgt_in), rtol=0, atol=0)
    with pytest.raises(ValueError, match="needs one vocabulary, got sizes 41 and 40"):
        build_model(cfg, 41, 40)
