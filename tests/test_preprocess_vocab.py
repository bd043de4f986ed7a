"""Preprocessing, tokenisation, vocabulary and the book's truncate/pad, against its printed examples."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
import torch

from attn_mt.data.book import build_array, truncate_pad
from attn_mt.data.corpus import read_pairs
from attn_mt.data.dataset import load_data
from attn_mt.data.encode import encode_sources
from attn_mt.data.preprocess import clean_text, preprocess, tokenize
from attn_mt.data.vocab import Vocab
from attn_mt.errors import UserError

# d2l.ai 10.5.1 prints these six lines after preprocess_nmt.
BOOK_PREPROCESSED = [
    "go .\tva !",
    "hi .\tsalut !",
    "run !\tcours !",
    "run !\tcourez !",
    "who ?\tqui ?",
    "wow !\tça alors !",
]


def test_preprocess_matches_the_books_printed_lines(tiny_corpus):
    pairs = read_pairs(tiny_corpus)[:6]  # the first six lines of fra.txt, U+202F included
    assert [f"{preprocess(e)}\t{preprocess(f)}" for e, f in pairs] == BOOK_PREPROCESSED


def test_tokenize_matches_the_books_printed_tokens(tiny_corpus):
    sources = [tokenize(preprocess(e)) for e, _ in read_pairs(tiny_corpus)[:6]]
    assert sources == [["go", "."], ["hi", "."], ["run", "!"], ["run", "!"], ["who", "?"], ["wow", "!"]]


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("Hello,world!Yes?No.", "hello ,world !yes ?no ."),  # a space before each mark not already after one
        ("Wait...", "wait . . ."),  # each mark looks at the original character before it
        ("What?!", "what ? !"),
        ("Already spaced .", "already spaced ."),
        ("?Leading", "?leading"),  # position 0 never gets a space, as the book's i > 0
        ("A\xa0B\u202fC", "a b c"),
        ("Tom\xa0!", "tom !"),  # U+00A0 becomes the space before the mark
        ("Fille\xa0 ?", "fille  ?"),  # as in 17 corpus lines: two spaces, which tokenize collapses
        ("J’ai ‘vu’", "j’ai ‘vu’"),  # typographic apostrophes stay unless asked
        ("ÉCOLE", "école"),
    ],
)
def test_preprocess_rules(raw, expected):
    assert preprocess(raw) == expected


def test_apostrophe_option_and_idempotence():
    assert preprocess("J’ai ‘vu’ l'école.", normalize_apostrophes=True) == "j'ai 'vu' l'école ."
    for text in ("Hello,world!Yes?No.", "Wait...", "Fille\xa0 ?", "J’ai"):
        once = preprocess(text, normalize_apostrophes=True)
        assert preprocess(once, normalize_apostrophes=True) == once


def test_tokenize_edge_cases_for_user_input():
    assert tokenize("") == []
    assert tokenize("   ") == []
    assert tokenize("tom  !") == ["tom", "!"]
    assert tokenize(" go . ") == ["go", "."]
    assert tokenize("a\tb c\u2009d") == ["a\tb", "c\u2009d"]  # only spaces split, as in the book
    assert clean_text("  Fille\xa0 ? ") == "fille ?"
    assert clean_text("Go.") == "go ."


# ----- vocabulary -----


def test_vocab_order_specials_and_ties():
    lines = [["b", "a", "c"], ["a", "d", "b"], ["a", "e"], ["d", "x"]]
    # counts: a 3, b 2, d 2 (b seen first), c 1, e 1, x 1
    vocab = Vocab.build(lines, min_freq=2)
    assert vocab.idx_to_token == ["<unk>", "<pad>", "<bos>", "<eos>", "a", "b", "d"]
    assert (vocab.unk_id, vocab.pad_id, vocab.bos_id, vocab.eos_id) == (0, 1, 2, 3)
    assert vocab["a"] == 4 and vocab["c"] == 0 and vocab["never"] == 0
    assert vocab.encode(["d", "c", "a"]) == [6, 0, 4]
    assert vocab.decode([4, 5, 6, 3]) == ["a", "b", "d", "<eos>"]
    assert vocab.decode(torch.tensor([6, 0])) == ["d", "<unk>"]
    assert len(vocab) == 7
    everything = Vocab.build(lines, min_freq=0)
    assert everything.idx_to_token[4:] == ["a", "b", "d", "c", "e", "x"]


def test_vocab_keeps_reserved_tokens_once():
    vocab = Vocab.build([["<eos>", "<eos>", "<unk>", "<unk>", "hi", "hi"]], min_freq=2)
    assert vocab.idx_to_token == ["<unk>", "<pad>", "<bos>", "<eos>", "hi"]
    bare = Vocab.build([["x", "x"]], min_freq=1, reserved=())
    assert bare.idx_to_token == ["<unk>", "x"]
    with pytest.raises(ValueError, match="no <pad> token"):
        _ = bare.pad_id


def test_vocab_save_load_roundtrip_and_errors(tmp_path):
    vocab = Vocab.build([["ça", "va", "ça"], ["va", "ça"]], min_freq=1)
    path = tmp_path / "src_vocab.json"
    vocab.save(path)
    assert json.loads(path.read_text(encoding="utf-8"))["idx_to_token"] == vocab.idx_to_token
    assert Vocab.load(path) == vocab
    with pytest.raises(UserError, match="vocabulary file not found"):
        Vocab.load(tmp_path / "missing.json")
    path.write_text("{not json", encoding="utf-8")
    with pytest.raises(UserError, match="cannot read vocabulary"):
        Vocab.load(path)
    path.write_text(json.dumps({"format": "attn-mt-vocab", "idx_to_token": ["a", "<unk>"]}), encoding="utf-8")
    with pytest.raises(UserError, match="must start with <unk>"):
        Vocab.load(path)


# ----- the book's fixed-width arrays -----


def test_truncate_pad():
    assert truncate_pad([5, 6], 4, 1) == [5, 6, 1, 1]
    assert truncate_pad([5, 6, 7, 8, 9], 4, 1) == [5, 6, 7, 8]
    assert truncate_pad([5, 6, 7, 8], 4, 1) == [5, 6, 7, 8]


def test_build_array_appends_eos_and_counts_valid_lengths():
    array, valid = build_array([[7], [7, 8, 9], [7, 8, 9, 10, 11]], num_steps=4, pad_id=1, eos_id=3)
    assert array.tolist() == [[7, 3, 1, 1], [7, 8, 9, 3], [7, 8, 9, 10]]  # the long one loses its <eos>
    assert valid.tolist() == [2, 4, 4]
    assert array.shape == (3, 4)


# ----- user input at translate time -----


def test_encode_sources_reports_oov_and_truncation():
    vocab = Vocab.build([["go", ".", "i", "lost", "."]], min_freq=1)  # ., go, i, lost -> 4, 5, 6, 7
    src, lens, info = encode_sources(["Go.", "I lost Tom’s zzz.", ""], vocab, normalize_apostrophes=True)
    assert src.tolist() == [[5, 4, 3, 1, 1, 1], [6, 7, 0, 0, 4, 3], [3, 1, 1, 1, 1, 1]]
    assert lens.tolist() == [3, 6, 1]
    assert info[1].oov == ["tom's", "zzz"] and info[0].oov == []
    assert info[2].empty and not info[0].empty
    src, lens, info = encode_sources(["i lost i lost ."], vocab, max_len=3)
    assert src.tolist() == [[6, 7, 6]] and lens.tolist() == [3]
    assert info[0].truncated == 3  # "lost", "." and <eos> cut off, as training's truncate_pad does
    encoded = encode_sources([["go", "."], ["zzz"]], vocab)  # already-tokenized input is taken as is
    assert encoded.src.tolist() == [[5, 4, 3], [0, 3, 1]]
    assert encoded.warnings == [[], ["unknown source tokens, read as <unk>: zzz"]]


# ----- the real corpus, book mode -----

BOOK_SRC_HEAD = [
    "<unk>",
    "<pad>",
    "<bos>",
    "<eos>",
    ".",
    "!",
    "i",
    "i'm",
    "it",
    "go",
    "tom",
    "?",
    "me",
    "get",
    "be",
]
BOOK_TGT_HEAD = [
    "<unk>",
    "<pad>",
    "<bos>",
    "<eos>",
    ".",
    "!",
    "je",
    "suis",
    "tom",
    "?",
    "j'ai",
    "nous",
    "ça",
    "c'est",
    "est",
]


@pytest.mark.corpus
def test_real_corpus_first_lines_preprocess_like_the_book(corpus_path):
    pairs = read_pairs(corpus_path)[:6]
    assert [f"{preprocess(e)}\t{preprocess(f)}" for e, f in pairs] == BOOK_PREPROCESSED


@pytest.mark.corpus
def test_real_corpus_book_mode_reproduces_the_books_vocabularies(corpus_path):
    cfg = SimpleNamespace(
        mode="book",
        path=None,
        num_examples=600,
        num_steps=10,
        batch_size=64,
        min_freq=2,
        normalize_apostrophes=False,
        languages="en-fr",
        direction="en-fr",
    )
    data = load_data(cfg, str(corpus_path))
    # Numbers from running the book's load_data_nmt(64, 10, 600) on the same file.
    assert data.train.num_examples == 601
    assert (len(data.src_vocab), len(data.tgt_vocab)) == (184, 201)
    assert data.src_vocab.idx_to_token[:15] == BOOK_SRC_HEAD
    assert data.tgt_vocab.idx_to_token[:15] == BOOK_TGT_HEAD
    first = data.train.collate([0, 1])
    assert first.src.tolist() == [[9, 4, 3] + [1] * 7, [113, 4, 3] + [1] * 7]
    assert first.src_lens.tolist() == [3, 3]
    assert data.valid == [] and data.test == []
