"""The data entry point: corpus -> preprocessed pairs -> vocabularies -> training set and held-out splits.

Two modes (see `DataConfig.mode`): "book" reproduces the book's `load_data_nmt` (d2l.ai section
10.5); "split" uses the whole corpus with a grouped train/valid/test split and token-budget batches.
"""
from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from attn_mt.data.book import BookTrainSet, book_subset, build_array
from attn_mt.data.bucketing import BucketTrainSet
from attn_mt.data.corpus import read_pairs, resolve_corpus
from attn_mt.data.encode import EncodedSources, SourceInfo, encode_sources
from attn_mt.data.preprocess import clean_text, tokenize
from attn_mt.data.report import data_report, english_overlap, length_stats
from attn_mt.data.splits import EvalExample, grouped_split
from attn_mt.data.trainset import TokenSequences, TrainSet
from attn_mt.data.vocab import Vocab
from attn_mt.errors import UserError

__all__ = [
    "EncodedSources", "EvalExample", "NMTData", "SourceInfo", "encode_sources", "load_data",
    "normalize_pairs",
]


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


def load_data(cfg: Any, path: str | None = None) -> NMTData:
    """Load the corpus named by `path` (else cfg.path, $ATTN_MT_DATA, the cache, a download) for cfg.mode."""
    start = time.perf_counter()
    corpus = resolve_corpus(path if path is not None else cfg.path)
    pairs = read_pairs(corpus)
    facts: dict[str, Any] = {
        "mode": cfg.mode, "corpus": str(corpus), "corpus_pairs": len(pairs),
        "normalize_apostrophes": cfg.normalize_apostrophes, "min_freq": cfg.min_freq,
    }
    if cfg.mode == "book":
        src, tgt = normalize_pairs(book_subset(pairs, cfg.num_examples), cfg.normalize_apostrophes)
        del pairs
        data = _load_book(cfg, src, tgt, facts)
    elif cfg.mode == "split":
        src, tgt = normalize_pairs(pairs, cfg.normalize_apostrophes)
        del pairs
        data = _load_split(cfg, src, tgt, facts)
    else:
        raise UserError(f"data.mode: {cfg.mode!r} is not one of book, split")
    data.report["seconds"] = round(time.perf_counter() - start, 3)
    data.report = data_report(data)
    return data
