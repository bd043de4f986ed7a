"""Word-by-word sentencepiece encoding (data/word_pieces.py): the same ids as sentencepiece, or not used."""

from __future__ import annotations

import numpy as np
import pytest
from support.synthetic import reverse_pairs

from attn_mt.config import load_config
from attn_mt.data.pairs import corpus_files, prepare_pairs, read_corpus_files
from attn_mt.data.parallel import SentenceEncoder, chunk_encoder, encode_parallel
from attn_mt.data.subword import learn_subwords, prepare_text, sample_sentences
from attn_mt.data.word_pieces import WordPieces, splits_at_spaces

AWKWARD = [
    "",
    "a",
    "Hélène n'a pas 3,000 ¥, ni 300.000 yens.",
    "Qu'est-ce que c'est\u202f?",  # narrow no-break space before French punctuation: inside a word
    "un\u00a0mot",  # no-break space: not a word boundary
    "😀 ok 😀😀",  # characters no piece holds: byte pieces
    "東京 est loin",
    "  two  spaces and ends  ",  # not prepared text: sentencepiece drops the extra spaces, so do words
    "Tom",
    "Tom Tom Tom",
]


def _texts() -> list[str]:
    """The synthetic corpus's sentences, both sides, prepared."""
    return [prepare_text(s) for pair in reverse_pairs(200) for s in pair]


def _flat(rows: list[list[int]]) -> tuple[list[int], list[int]]:
    """Flat ids and lengths of sentencepiece's rows."""
    return [i for row in rows for i in row], [len(row) for row in rows]


def test_word_by_word_gives_sentencepiece_ids_on_awkward_text_across_calls():
    vocab = learn_subwords(_texts(), "bpe", 300, "test")
    assert splits_at_spaces(vocab)
    encoder = WordPieces(vocab, np.uint16)
    first, second = AWKWARD[:5], AWKWARD[5:] + AWKWARD  # the second call reuses the first's words
    for texts in (first, second):
        ids, lengths = encoder.encode(texts)
        expected_ids, expected_lengths = _flat(vocab.processor.encode(texts))
        assert ids.tolist() == expected_ids
        assert lengths.tolist() == expected_lengths
        assert ids.dtype == np.uint16
    assert "Tom" in encoder.index and len(encoder.index) < sum(t.count(" ") + 1 for t in AWKWARD)
    empty_ids, empty_lengths = encoder.encode([])
    assert len(empty_ids) == len(empty_lengths) == 0


@pytest.mark.parametrize(
    "options",
    [
        {"model_type": "unigram"},  # ties broken differently in a sentence than in a word
        {"model_type": "bpe", "split_by_whitespace": False},  # pieces may span a space
        {"model_type": "bpe", "add_dummy_prefix": False},  # the first word has no "▁"
        {"model_type": "bpe", "treat_whitespace_as_suffix": True},  # "▁" ends words
    ],
    ids=["unigram", "across-spaces", "no-dummy-prefix", "suffix"],
)
def test_models_that_are_not_word_by_word_take_the_plain_path_with_the_same_ids(options):
    extra = {key: value for key, value in options.items() if key != "model_type"}
    vocab = learn_subwords(_texts(), options["model_type"], 330, "test", hard_vocab_limit=False, **extra)
    texts = _texts() + AWKWARD
    assert not splits_at_spaces(vocab)
    assert isinstance(chunk_encoder(vocab), SentenceEncoder)
    seqs = encode_parallel(vocab, texts, workers=1)
    assert [seqs[i] for i in range(len(texts))] == vocab.encode_texts(texts)


def test_the_fast_path_is_one_switch():
    vocab = learn_subwords(_texts(), "bpe", 300, "test")
    assert isinstance(chunk_encoder(vocab), WordPieces)
    assert isinstance(chunk_encoder(vocab, fast=False), SentenceEncoder)
    texts = _texts() + AWKWARD
    fast, plain = (encode_parallel(vocab, texts, 2, fast=fast) for fast in (True, False))
    assert np.array_equal(fast.ids, plain.ids) and np.array_equal(fast.starts, plain.starts)


def test_word_by_word_gives_sentencepiece_ids_on_the_whole_corpus(corpus_path):
    cfg = load_config("configs/transformer.yaml").data
    _, pairs = read_corpus_files(cfg, corpus_files(cfg, str(corpus_path)))
    src, tgt = prepare_pairs(pairs, cfg)
    texts = src + tgt  # 334,260 sentences
    vocab = learn_subwords(sample_sentences(texts, 30_000, 0), "bpe", 8000, "corpus")
    assert isinstance(chunk_encoder(vocab), WordPieces)
    fast = encode_parallel(vocab, texts, workers=2)
    plain = encode_parallel(vocab, texts, workers=2, fast=False)
    assert len(fast) == len(texts) == 334_260
    assert np.array_equal(fast.starts, plain.starts)
    assert np.array_equal(fast.ids, plain.ids)
