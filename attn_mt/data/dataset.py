"""The data entry point: corpus -> preprocessed pairs -> vocabularies -> training set and held-out splits.

Two modes (see `DataConfig.mode`): "book" reproduces the book's `load_data_nmt` (d2l.ai section
10.5); "split" uses the whole corpus with a grouped train/valid/test split and token-budget batches.
Two tokenizers (`DataConfig.tokenizer`): "book" lowercases and splits words as the book does;
"sentencepiece" keeps the raw text and learns subword vocabularies from the training split.
The pairs are turned to the config's `direction` before anything else, so "source" always means
the side the model reads.
"""
from __future__ import annotations

import hashlib
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from attn_mt.data.book import BookTrainSet, book_subset, build_array
from attn_mt.data.bucketing import BucketTrainSet
from attn_mt.data.corpus import read_aligned, read_pairs, resolve_corpus
from attn_mt.data.encode import EncodedSources, SourceInfo, encode_sources
from attn_mt.data.preprocess import clean_text, tokenize
from attn_mt.data.report import data_report, english_overlap, length_stats
from attn_mt.data.splits import EvalExample, Split, grouped_split
from attn_mt.data.subword import (
    SubwordVocab,
    cache_key,
    cached_ids,
    cached_models,
    learn_subwords,
    prepare_text,
)
from attn_mt.data.trainset import TokenSequences, TrainSet
from attn_mt.data.vocab import Vocab
from attn_mt.errors import UserError

__all__ = [
    "EncodedSources", "EvalExample", "NMTData", "SourceInfo", "encode_sources", "load_data",
    "normalize_pairs", "prepare_pairs", "read_corpus",
]
LANGUAGE_NAMES = {"en": "English", "fr": "French", "de": "German", "es": "Spanish", "it": "Italian"}


@dataclass
class NMTData:
    """Everything training, validation and evaluation read; vocabularies come from the train split only."""

    src_vocab: Vocab
    tgt_vocab: Vocab
    train: TrainSet
    valid: list[EvalExample] = field(default_factory=list)
    test: list[EvalExample] = field(default_factory=list)
    report: dict[str, Any] = field(default_factory=dict)


def normalize_pairs(pairs: Sequence[tuple[str, str]],
                    normalize_apostrophes: bool) -> tuple[list[str], list[str]]:
    """Preprocess both sides; each result is its tokens joined by single spaces (`tokenize` undoes it)."""
    src = [clean_text(e, normalize_apostrophes) for e, _ in pairs]
    tgt = [clean_text(f, normalize_apostrophes) for _, f in pairs]
    return src, tgt


def prepare_pairs(pairs: Sequence[tuple[str, str]], cfg: Any) -> tuple[list[str], list[str]]:
    """Both sides as the configured tokenizer reads them: the book's preprocessing, or raw cased text."""
    if cfg.tokenizer == "book":
        return normalize_pairs(pairs, cfg.normalize_apostrophes)
    return ([prepare_text(a, cfg.normalize_apostrophes) for a, _ in pairs],
            [prepare_text(b, cfg.normalize_apostrophes) for _, b in pairs])


def language_name(code: str) -> str:
    """A language's English name for messages, else its code."""
    return LANGUAGE_NAMES.get(code, code)


def read_corpus(cfg: Any, path: str | list[str] | None) -> tuple[Any, list[tuple[str, str]]]:
    """(where the corpus is, its pairs as (source, target) in cfg.direction).

    `path` (else cfg.path) is a tab-separated file or zip, or a list of two line-aligned
    plain-text files in the order of cfg.languages.
    """
    given = path if path is not None else cfg.path
    first, second = cfg.languages.split("-")
    if isinstance(given, list):
        files = [resolve_corpus(p) for p in given]
        pairs, where = read_aligned(*files), [str(f) for f in files]
    else:
        corpus = resolve_corpus(given)
        pairs, where = read_pairs(corpus, (language_name(first), language_name(second))), str(corpus)
    if cfg.direction != cfg.languages:
        pairs = [(b, a) for a, b in pairs]
    return where, pairs


def _token_lengths(texts: Sequence[str]) -> list[int]:
    """Token counts plus one for <eos>."""
    return [len(tokenize(t)) + 1 for t in texts]


def _load_book(cfg: Any, src: list[str], tgt: list[str], facts: dict[str, Any]) -> NMTData:
    """Book mode: fixed-width arrays of the first num_examples + 1 pairs, no held-out split."""
    src_tokens, tgt_tokens = [tokenize(t) for t in src], [tokenize(t) for t in tgt]
    src_vocab = Vocab.build(src_tokens, cfg.min_freq)
    tgt_vocab = Vocab.build(tgt_tokens, cfg.min_freq)
    src_ids, src_len = build_array([src_vocab.encode(t) for t in src_tokens], cfg.num_steps,
                                   src_vocab.pad_id, src_vocab.eos_id)
    tgt_ids, tgt_len = build_array([tgt_vocab.encode(t) for t in tgt_tokens], cfg.num_steps,
                                   tgt_vocab.pad_id, tgt_vocab.eos_id)
    src_lengths, tgt_lengths = _token_lengths(src), _token_lengths(tgt)
    facts.update(num_examples=cfg.num_examples, num_steps=cfg.num_steps, batch_size=cfg.batch_size)
    facts["splits"] = {"train": {
        "pairs": len(src),
        "english_sentences": len(set(src)),
        "src_len": length_stats(src_lengths),
        "tgt_len": length_stats(tgt_lengths),
        "truncated_src": sum(n > cfg.num_steps for n in src_lengths),
        "truncated_tgt": sum(n > cfg.num_steps for n in tgt_lengths),
    }}
    train = BookTrainSet(src_ids, src_len, tgt_ids, tgt_len, cfg.batch_size)
    return NMTData(src_vocab, tgt_vocab, train, [], [], facts)


def _load_split(cfg: Any, src: list[str], tgt: list[str], facts: dict[str, Any]) -> NMTData:
    """Split mode: grouped split, long training pairs dropped, vocabularies and flat arrays from train."""
    split = grouped_split(src, tgt, cfg.valid_size, cfg.test_size, cfg.split_seed)
    src_lengths, tgt_lengths = _token_lengths(src), _token_lengths(tgt)
    keep = [i for i in split.train if src_lengths[i] <= cfg.max_len and tgt_lengths[i] <= cfg.max_len]
    if not keep:
        raise UserError(f"data.max_len = {cfg.max_len} drops every training pair; raise it")
    longest = max(max(src_lengths[i], tgt_lengths[i]) for i in keep)
    if cfg.max_tokens < longest:
        raise UserError(
            f"data.max_tokens = {cfg.max_tokens} is smaller than the longest training pair ({longest} tokens "
            f"with <eos>); raise data.max_tokens or lower data.max_len"
        )
    train_src, train_tgt = [src[i] for i in keep], [tgt[i] for i in keep]
    src_vocab = Vocab.build((tokenize(t) for t in train_src), cfg.min_freq)
    tgt_vocab = Vocab.build((tokenize(t) for t in train_tgt), cfg.min_freq)
    train = BucketTrainSet(TokenSequences.from_texts(train_src, src_vocab),
                           TokenSequences.from_texts(train_tgt, tgt_vocab),
                           cfg.max_tokens, src_vocab.pad_id, src_vocab.eos_id)
    facts.update(split_seed=cfg.split_seed, valid_size=cfg.valid_size, test_size=cfg.test_size,
                 max_len=cfg.max_len, max_tokens=cfg.max_tokens)
    facts["splits"] = {"train": {
        "pairs": len(keep),
        "english_sentences": len(set(train_src)),
        "src_len": length_stats([src_lengths[i] for i in keep]),
        "tgt_len": length_stats([tgt_lengths[i] for i in keep]),
        "dropped_for_length": len(split.train) - len(keep),
    }}
    facts["overlap"] = english_overlap(train_src, split.valid, split.test)
    return NMTData(src_vocab, tgt_vocab, train, split.valid, split.test, facts)


def _learn_vocabs(cfg: Any, train_src: list[str], train_tgt: list[str]) -> tuple[SubwordVocab, SubwordVocab]:
    """Source and target sentencepiece vocabularies from the training split (one shared model if asked)."""
    if cfg.shared_vocab:
        shared = learn_subwords(train_src + train_tgt, cfg.subword_type, cfg.vocab_size, "source and target")
        return shared, shared
    return (learn_subwords(train_src, cfg.subword_type, cfg.vocab_size, "source"),
            learn_subwords(train_tgt, cfg.subword_type, cfg.vocab_size, "target"))


def text_fingerprint(src: Sequence[str], tgt: Sequence[str]) -> str:
    """SHA-1 of the training pairs: equal fingerprints mean the same training text."""
    digest = hashlib.sha1()
    for a, b in zip(src, tgt, strict=True):
        digest.update(f"{a}\t{b}\n".encode())
    return digest.hexdigest()


def _load_subword_split(cfg: Any, src: list[str], tgt: list[str], facts: dict[str, Any],
                        vocabs: tuple[Vocab, Vocab] | None) -> NMTData:
    """Split mode with sentencepiece: grouped split, vocabularies from train, long training pairs dropped.

    `vocabs` (a trained run's) are used as they are instead of learning new ones.
    """
    split: Split = grouped_split(src, tgt, cfg.valid_size, cfg.test_size, cfg.split_seed)
    train_src, train_tgt = [src[i] for i in split.train], [tgt[i] for i in split.train]
    train_sha1 = text_fingerprint(train_src, train_tgt)
    start = time.perf_counter()
    if vocabs is not None:
        (src_vocab, tgt_vocab), origin = vocabs, "run"
    else:
        key = cache_key("models", train_sha1, cfg.subword_type, cfg.vocab_size, cfg.shared_vocab)
        src_vocab, tgt_vocab, learned = cached_models(key, lambda: _learn_vocabs(cfg, train_src, train_tgt))
        origin = "learned" if learned else "cache"
    models_s = time.perf_counter() - start

    def encode() -> list[np.ndarray]:
        """Flat ids and offsets of the training split's two sides."""
        src_seqs = TokenSequences.from_lists(src_vocab.encode_texts(train_src))
        tgt_seqs = TokenSequences.from_lists(tgt_vocab.encode_texts(train_tgt))
        return [src_seqs.ids, src_seqs.offsets, tgt_seqs.ids, tgt_seqs.offsets]

    ids_key = cache_key("ids", train_sha1, src_vocab.fingerprint(), tgt_vocab.fingerprint())
    src_ids, src_offsets, tgt_ids, tgt_offsets = cached_ids(ids_key, encode)
    src_all, tgt_all = TokenSequences(src_ids, src_offsets), TokenSequences(tgt_ids, tgt_offsets)
    keep = np.flatnonzero((src_all.lengths < cfg.max_len) & (tgt_all.lengths < cfg.max_len))  # (kept,)
    if not len(keep):
        raise UserError(f"data.max_len = {cfg.max_len} drops every training pair (in pieces with <eos>); "
                        "raise it")
    src_seqs, tgt_seqs = src_all.select(keep), tgt_all.select(keep)
    longest = int(max(src_seqs.lengths.max(), tgt_seqs.lengths.max())) + 1
    if cfg.max_tokens < longest:
        raise UserError(
            f"data.max_tokens = {cfg.max_tokens} is smaller than the longest training pair ({longest} pieces "
            f"with <eos>); raise data.max_tokens or lower data.max_len"
        )
    train = BucketTrainSet(src_seqs, tgt_seqs, cfg.max_tokens, src_vocab.pad_id, src_vocab.eos_id)
    facts.update(split_seed=cfg.split_seed, valid_size=cfg.valid_size, test_size=cfg.test_size,
                 max_len=cfg.max_len, max_tokens=cfg.max_tokens)
    facts["tokenizer"] = {
        "type": "sentencepiece", "model": cfg.subword_type, "vocab_size": cfg.vocab_size,
        "shared": cfg.shared_vocab, "origin": origin, "seconds": round(models_s, 3),
    }
    facts["train_sha1"] = train_sha1
    facts["splits"] = {"train": {
        "pairs": len(keep),
        "english_sentences": len({train_src[i] for i in keep.tolist()}),
        "src_len": length_stats(src_seqs.lengths + 1),
        "tgt_len": length_stats(tgt_seqs.lengths + 1),
        "dropped_for_length": len(split.train) - len(keep),
    }}
    facts["overlap"] = english_overlap(train_src, split.valid, split.test)
    return NMTData(src_vocab, tgt_vocab, train, split.valid, split.test, facts)


def load_data(cfg: Any, path: str | list[str] | None = None,
              vocabs: tuple[Vocab, Vocab] | None = None) -> NMTData:
    """Load the corpus named by `path` (else cfg.path, $ATTN_MT_DATA, the cache, a download) for cfg.mode.

    `vocabs` are a trained run's sentencepiece vocabularies, reused instead of learned again.
    """
    start = time.perf_counter()
    corpus, pairs = read_corpus(cfg, path)
    facts: dict[str, Any] = {
        "mode": cfg.mode, "corpus": corpus, "corpus_pairs": len(pairs),
        "languages": cfg.languages, "direction": cfg.direction,
        "normalize_apostrophes": cfg.normalize_apostrophes, "min_freq": cfg.min_freq,
    }
    if cfg.mode == "book":
        src, tgt = normalize_pairs(book_subset(pairs, cfg.num_examples), cfg.normalize_apostrophes)
        del pairs
        data = _load_book(cfg, src, tgt, facts)
    elif cfg.mode == "split":
        src, tgt = prepare_pairs(pairs, cfg)
        del pairs
        if cfg.tokenizer == "book":
            data = _load_split(cfg, src, tgt, facts)
        else:
            data = _load_subword_split(cfg, src, tgt, facts, vocabs)
    else:
        raise UserError(f"data.mode: {cfg.mode!r} is not one of book, split")
    data.report["seconds"] = round(time.perf_counter() - start, 3)
    data.report = data_report(data)
    return data
