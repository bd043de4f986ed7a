"""Importing state dicts saved from the book's own classes, keyed by the book's module names.

Shapes: B batch, S source steps, T target steps, V vocabulary.
The state dicts are built from the book's key names and shapes written out in book_math.py (not from
attn-mt's models), and the imported models' logits are compared with the book's equations.
"""

from __future__ import annotations

import pytest
import torch
from support.book_math import (
    bahdanau_logits,
    book_bahdanau_shapes,
    book_transformer_shapes,
    random_state,
    transformer_logits,
)

from attn_mt.errors import UserError
from attn_mt.models import GRUBahdanau, Transformer, import_book_model, load_book_checkpoint

SPECIALS = ["<unk>", "<pad>", "<bos>", "<eos>"]
SRC_TOKENS = SPECIALS + ["go", ".", "i", "lost", "he's", "calm", "home", "!"]
TGT_TOKENS = SPECIALS + ["va", "!", "j'ai", "perdu", ".", "il", "est", "calme", "suis"]
PAD = SRC_TOKENS.index("<pad>")


def book_bahdanau_state(seed: int = 0) -> dict[str, torch.Tensor]:
    """Embed 6, hidden 8, 2 layers, as the book's Seq2SeqEncoder + Seq2SeqAttentionDecoder would save."""
    return random_state(book_bahdanau_shapes(len(SRC_TOKENS), len(TGT_TOKENS), E=6, H=8, L=2), seed)


def book_transformer_state(seed: int = 0) -> dict[str, torch.Tensor]:
    """Hidden 8, FFN 12, 2 layers, as the book's TransformerEncoder + TransformerDecoder would save."""
    return random_state(book_transformer_shapes(len(SRC_TOKENS), len(TGT_TOKENS), H=8, F=12, L=2), seed)


def sample_batch() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Three padded sources (the book pads with <pad> after <eos>), lengths, decoder inputs from <bos>."""
    gen = torch.Generator().manual_seed(7)
    src = torch.randint(4, len(SRC_TOKENS), (3, 6), generator=gen)
    src_lens = torch.tensor([6, 3, 1])
    src[torch.arange(6).unsqueeze(0) >= src_lens.unsqueeze(1)] = PAD
    tgt_in = torch.randint(4, len(TGT_TOKENS), (3, 5), generator=gen)
    tgt_in[:, 0] = SPECIALS.index("<bos>")
    return src, src_lens, tgt_in


def test_bahdanau_import_gives_the_book_logits():
    state = book_bahdanau_state()
    book = import_book_model(state, SRC_TOKENS, TGT_TOKENS)
    assert isinstance(book.model, GRUBahdanau) and not book.model.training
    cfg = book.config
    assert (cfg.type, cfg.embed_size, cfg.num_hiddens, cfg.num_layers, cfg.pack_padded) == (
        "gru_bahdanau",
        6,
        8,
        2,
        False,
    )
    src, src_lens, tgt_in = sample_batch()
    with torch.no_grad():
        logits = book.model(src, src_lens, tgt_in)
    torch.testing.assert_close(logits, bahdanau_logits(state, src, src_lens, tgt_in, 2), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("num_heads", [4, 2])
def test_transformer_import_gives_the_book_logits(num_heads):
    state = book_transformer_state()
    book = import_book_model(state, SRC_TOKENS, TGT_TOKENS, num_heads=num_heads)
    assert isinstance(book.model, Transformer)
    cfg = book.config
    assert (cfg.type, cfg.num_hiddens, cfg.ffn_num_hiddens, cfg.num_layers, cfg.num_heads) == (
        "transformer",
        8,
        12,
        2,
        num_heads,
    )
    src, src_lens, tgt_in = sample_batch()
    expected = transformer_logits(state, src, src_lens, tgt_in, 2, num_heads)
    with torch.no_grad():
        torch.testing.assert_close(book.model(src, src_lens, tgt_in), expected, atol=1e-5, rtol=1e-5)


def test_head_count_matters():
    state, (src, src_lens, tgt_in) = book_transformer_state(), sample_batch()
    with torch.no_grad():
        four = import_book_model(state, SRC_TOKENS, TGT_TOKENS, num_heads=4).model(src, src_lens, tgt_in)
        two = import_book_model(state, SRC_TOKENS, TGT_TOKENS, num_heads=2).model(src, src_lens, tgt_in)
    assert not torch.allclose(four, two, atol=1e-3)


@pytest.mark.parametrize("make_state", [book_bahdanau_state, book_transformer_state])
def test_round_trip_keeps_every_key_and_value(make_state):
    state = make_state()
    book = import_book_model(state, SRC_TOKENS, TGT_TOKENS)
    exported = book.model.state_dict()
    assert list(exported) == list(state)  # same keys, the book's order
    for key, value in state.items():
        assert torch.equal(exported[key], value), key
    assert book.src_vocab.idx_to_token == SRC_TOKENS and book.tgt_vocab.eos_id == 3


def test_load_book_checkpoint_reads_the_saved_file(tmp_path):
    state = book_bahdanau_state(seed=3)
    path = tmp_path / "book.pt"
    torch.save({"state_dict": state, "src_vocab": SRC_TOKENS, "tgt_vocab": TGT_TOKENS}, path)
    book = load_book_checkpoint(path, dropout=0.2)
    assert book.config.dropout == 0.2
    src, src_lens, tgt_in = sample_batch()
    with torch.no_grad():
        logits = book.model(src, src_lens, tgt_in)
    torch.testing.assert_close(logits, bahdanau_logits(state, src, src_lens, tgt_in, 2), atol=1e-5, rtol=1e-5)


def test_incremental_decoding_of_an_imported_model_matches_its_teacher_forcing():
    book = import_book_model(book_transformer_state(), SRC_TOKENS, TGT_TOKENS)
    src, src_lens, tgt_in = sample_batch()
    with torch.no_grad():
        full = book.model(src, src_lens, tgt_in)
        state = book.model.init_state(book.model.encode(src, src_lens))
        steps = []
        for t in range(tgt_in.shape[1]):
            logits, state, _ = book.model.step(tgt_in[:, t], state)
            steps.append(logits)
    torch.testing.assert_close(torch.stack(steps, dim=1), full, atol=1e-5, rtol=1e-5)


# ----- errors a user can cause -----


def test_vocabulary_size_must_match_the_embeddings():
    with pytest.raises(UserError, match="src_vocab has 11 tokens but .*encoder.embedding.weight has 12 rows"):
        import_book_model(book_bahdanau_state(), SRC_TOKENS[:-1], TGT_TOKENS)


def test_vocabulary_must_start_with_the_book_specials():
    swapped = ["<unk>", "<bos>", "<pad>", "<eos>"] + TGT_TOKENS[4:]
    with pytest.raises(UserError, match="tgt_vocab: must start with <unk>, <pad>, <bos>, <eos>"):
        import_book_model(book_bahdanau_state(), SRC_TOKENS, swapped)


def test_missing_and_unexpected_keys_are_named():
    state = book_transformer_state()
    del state["decoder.blks.block1.addnorm3.ln.bias"]
    with pytest.raises(UserError, match="lacks decoder.blks.block1.addnorm3.ln.bias"):
        import_book_model(state, SRC_TOKENS, TGT_TOKENS)
    state = book_transformer_state()
    state["encoder.blks.block0.attention.W_q.bias"] = torch.zeros(8)  # a book model built with use_bias=True
    with pytest.raises(UserError, match="encoder.blks.block0.attention.W_q.bias"):
        import_book_model(state, SRC_TOKENS, TGT_TOKENS)


def test_wrong_shapes_and_heads_and_foreign_dicts():
    state = book_bahdanau_state()
    state["decoder.attention.W_q.weight"] = torch.zeros(8, 5)
    with pytest.raises(UserError, match="does not fit an attn-mt gru_bahdanau model"):
        import_book_model(state, SRC_TOKENS, TGT_TOKENS)
    with pytest.raises(UserError, match="num_heads = 3 does not divide"):
        import_book_model(book_transformer_state(), SRC_TOKENS, TGT_TOKENS, num_heads=3)
    with pytest.raises(UserError, match="not a state dict of the book's EncoderDecoder"):
        import_book_model({"weight": torch.zeros(2)}, SRC_TOKENS, TGT_TOKENS)


def test_bad_checkpoint_files(tmp_path):
    with pytest.raises(UserError, match="not found"):
        load_book_checkpoint(tmp_path / "missing.pt")
    (tmp_path / "junk.pt").write_text("not a checkpoint")
    with pytest.raises(UserError, match="cannot read book checkpoint"):
        load_book_checkpoint(tmp_path / "junk.pt")
    torch.save({"state_dict": book_bahdanau_state()}, tmp_path / "partial.pt")
    with pytest.raises(UserError, match="expected a dict with keys state_dict, src_vocab, tgt_vocab"):
        load_book_checkpoint(tmp_path / "partial.pt")
