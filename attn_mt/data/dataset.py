"""The data entry point: corpus -> preprocessed pairs -> vocabularies -> training set and held-out splits.

Two modes (see `DataConfig.mode`): "book" reproduces the book's `load_data_nmt` (d2l.ai section
10.5); "split" uses the whole corpus with a grouped train/valid/test split and token-budget batches.
Two tokenizers (`DataConfig.tokenizer`): "book" lowercases and splits words as the book does;
"sentencepiece" keeps the raw text and learns subword vocabularies from the training split.
Split mode is prepared once into memory-mapped arrays (`prepare.py`) and mapped by later loads.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from attn_mt.data.book import BookTrainSet, book_subset, build_array
from attn_mt.data.bucketing import BucketTrainSet, fit_shapes
from attn_mt.data.encode import EncodedSources, SourceInfo, encode_sources
from attn_mt.data.pairs import normalize_pairs, prepare_pairs, read_corpus
from attn_mt.data.prepare import load_prepared
from attn_mt.data.preprocess import tokenize
from attn_mt.data.report import data_report, length_stats, unknown_shares
from attn_mt.data.splits import EvalExample
from attn_mt.data.trainset import TrainSet
from attn_mt.data.vocab import Vocab
from attn_mt.errors import UserError

__all__ = [
    "EncodedSources",
    "EvalExample",
    "NMTData",
    "SourceInfo",
    "encode_sources",
    "load_data",
    "normalize_pairs",
    "prepare_pairs",
    "read_corpus",
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


def _token_lengths(texts: Sequence[str]) -> list[int]:
    """Token counts plus one for <eos>."""
    return [len(tokenize(t)) + 1 for t in texts]


def _load_book(
    cfg: Any, src: list[str], tgt: list[str], facts: dict[str, Any], vocabs: tuple[Vocab, Vocab] | None
) -> NMTData:
    """Book mode: fixed-width arrays of the first num_examples + 1 pairs, no held-out split.

    The vocabularies are built on these pairs, unless `vocabs` (a trained run's) are given.
    """
    src_tokens, tgt_tokens = [tokenize(t) for t in src], [tokenize(t) for t in tgt]
    if vocabs is None:
        vocabs = Vocab.build(src_tokens, cfg.min_freq), Vocab.build(tgt_tokens, cfg.min_freq)
    src_vocab, tgt_vocab = vocabs
    src_ids, src_len = build_array(
        [src_vocab.encode(t) for t in src_tokens], cfg.num_steps, src_vocab.pad_id, src_vocab.eos_id
    )
    tgt_ids, tgt_len = build_array(
        [tgt_vocab.encode(t) for t in tgt_tokens], cfg.num_steps, tgt_vocab.pad_id, tgt_vocab.eos_id
    )
    src_lengths, tgt_lengths = _token_lengths(src), _token_lengths(tgt)
    facts.update(num_examples=cfg.num_examples, num_steps=cfg.num_steps, batch_size=cfg.batch_size)
    facts["splits"] = {
        "train": {
            "pairs": len(src),
            "english_sentences": len(set(src)),
            "src_len": length_stats(src_lengths),
            "tgt_len": length_stats(tgt_lengths),
            "truncated_src": sum(n > cfg.num_steps for n in src_lengths),
            "truncated_tgt": sum(n > cfg.num_steps for n in tgt_lengths),
            **unknown_shares(
                [i for t in src_tokens for i in src_vocab.encode(t)],
                [i for t in tgt_tokens for i in tgt_vocab.encode(t)],
                src_vocab,
                tgt_vocab,
            ),
        }
    }
    train = BookTrainSet(src_ids, src_len, tgt_ids, tgt_len, cfg.batch_size)
    return NMTData(src_vocab, tgt_vocab, train, [], [], facts)


def _load_split(
    cfg: Any, path: str | list[str] | None, facts: dict[str, Any], vocabs: tuple[Vocab, Vocab] | None
) -> NMTData:
    """Split mode: the prepared split (mapped, or prepared now), long pairs dropped, token-budget batches.

    `vocabs` (a trained run's sentencepiece vocabularies) are used instead of learning new ones.
    """
    start = time.perf_counter()
    prepared, built = load_prepared(cfg, path, vocabs)
    units = "tokens" if cfg.tokenizer == "book" else "pieces"
    src_all, tgt_all = prepared.src, prepared.tgt
    keep = np.flatnonzero((src_all.lengths < cfg.max_len) & (tgt_all.lengths < cfg.max_len))  # (kept,)
    if not len(keep):
        where = "" if cfg.tokenizer == "book" else " (in pieces with <eos>)"
        raise UserError(f"data.max_len = {cfg.max_len} drops every training pair{where}; raise it")
    src_seqs, tgt_seqs = src_all.select(keep), tgt_all.select(keep)
    longest = int(max(src_seqs.lengths.max(), tgt_seqs.lengths.max())) + 1
    if cfg.max_tokens < longest:
        raise UserError(
            f"data.max_tokens = {cfg.max_tokens} is smaller than the longest training pair ({longest} "
            f"{units} with <eos>); raise data.max_tokens or lower data.max_len"
        )
    shapes = (
        fit_shapes(src_seqs.lengths + 1, tgt_seqs.lengths + 1, cfg.max_tokens, cfg.batch_shapes)
        if cfg.batch_shapes
        else None
    )
    train = BucketTrainSet(
        src_seqs, tgt_seqs, cfg.max_tokens, prepared.src_vocab.pad_id, prepared.src_vocab.eos_id, shapes
    )
    for key in ("corpus", "corpus_pairs"):
        facts[key] = prepared.facts[key]
    facts.update(
        split_seed=cfg.split_seed,
        valid_size=cfg.valid_size,
        test_size=cfg.test_size,
        max_len=cfg.max_len,
        max_tokens=cfg.max_tokens,
    )
    if "tokenizer" in prepared.facts:
        origin = "run" if vocabs is not None else "learned" if built else "cache"
        learned_s = prepared.facts["tokenizer"]["seconds"]
        seconds = learned_s if origin == "learned" else time.perf_counter() - start
        facts["tokenizer"] = {**prepared.facts["tokenizer"], "origin": origin, "seconds": round(seconds, 3)}
    facts["train_sha1"] = prepared.facts["train_sha1"]
    facts["prepared"] = {**prepared.facts["prepared"], "origin": "built" if built else "mapped"}
    facts["splits"] = {
        "train": {
            "pairs": len(keep),
            "english_sentences": int(np.count_nonzero(np.bincount(prepared.groups[keep]))),
            "src_len": length_stats(src_seqs.lengths + 1),
            "tgt_len": length_stats(tgt_seqs.lengths + 1),
            "dropped_for_length": len(src_all) - len(keep),
            **unknown_shares(src_all.ids, tgt_all.ids, prepared.src_vocab, prepared.tgt_vocab),
        }
    }
    facts["overlap"] = prepared.facts["overlap"]
    return NMTData(prepared.src_vocab, prepared.tgt_vocab, train, prepared.valid, prepared.test, facts)


def load_data(
    cfg: Any, path: str | list[str] | None = None, vocabs: tuple[Vocab, Vocab] | None = None
) -> NMTData:
    """Load the corpus named by `path` (else cfg.path, $ATTN_MT_DATA, the cache, a download) for cfg.mode.

    `vocabs` are a trained run's vocabularies, used instead of learning new ones (resume, fine-tuning).
    """
    start = time.perf_counter()
    facts: dict[str, Any] = {
        "mode": cfg.mode,
        "languages": cfg.languages,
        "direction": cfg.direction,
        "normalize_apostrophes": cfg.normalize_apostrophes,
        "min_freq": cfg.min_freq,
    }
    if cfg.mode == "book":
        corpus, pairs = read_corpus(cfg, path)
        facts.update(corpus=corpus, corpus_pairs=len(pairs))
        src, tgt = normalize_pairs(book_subset(pairs, cfg.num_examples), cfg.normalize_apostrophes)
        del pairs
        data = _load_book(cfg, src, tgt, facts, vocabs)
    elif cfg.mode == "split":
        data = _load_split(cfg, path, facts, vocabs)
    else:
        raise UserError(f"data.mode: {cfg.mode!r} is not one of book, split")
    data.report["seconds"] = round(time.perf_counter() - start, 3)
    data.report = data_report(data.report, data.src_vocab, data.tgt_vocab, data.valid, data.test)
    return data
