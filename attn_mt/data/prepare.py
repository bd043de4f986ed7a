"""Split mode's corpus prepared once: split, vocabularies and training ids, kept in the prepared-corpus store.

    read the corpus (pairs.py) -> grouped split (splits.py) -> vocabularies from the training
    split (words, or sentencepiece on a seeded sample of it) -> ids in parallel chunks
    (parallel.py) -> a folder of memory-mapped arrays (store.py)

The folder keeps every training pair (before data.max_len drops the long ones), so max_len and
max_tokens change nothing on disk. It is found again by what it was made from: the corpus files
(absolute path, size and modification time, so an edited corpus is prepared again), the data
settings that change the split, the vocabularies or the ids, and the sentencepiece version.
A later load maps the folder without reading the corpus. `attn-mt prepare` runs this step on its
own; `load_data` runs it when nothing is prepared yet.

Shapes: N training pairs (before max_len), total = the sum of their lengths.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import sentencepiece as spm

from attn_mt.data.pairs import corpus_files, prepare_pairs, read_corpus_files, text_fingerprint
from attn_mt.data.parallel import encode_parallel
from attn_mt.data.preprocess import tokenize
from attn_mt.data.report import english_overlap
from attn_mt.data.splits import EvalExample, grouped_split
from attn_mt.data.store import Contents, StoreError, ensure_entry, entry_key, open_entry, store_root
from attn_mt.data.subword import SubwordVocab, learn_subwords, sample_sentences
from attn_mt.data.trainset import TokenSequences
from attn_mt.data.vocab import Vocab
from attn_mt.errors import UserError
from attn_mt.machine import available_cores

log = logging.getLogger("attn_mt.data")

SIDES = ("src", "tgt")


@dataclass
class Prepared:
    """A prepared split: vocabularies, every training pair's ids (memory-mapped), held-out sentences."""

    src_vocab: Vocab
    tgt_vocab: Vocab
    src: TokenSequences  # the N training pairs' source ids, before data.max_len
    tgt: TokenSequences
    groups: np.ndarray  # (N,) int32: the source sentence of each pair, numbered in order of appearance
    valid: list[EvalExample]
    test: list[EvalExample]
    facts: dict[str, Any]  # corpus, pairs, train_sha1, overlap, tokenizer, how it was prepared


def store_inputs(cfg: Any, files: Sequence[Path], vocabs: Sequence[str] | None = None) -> dict[str, Any]:
    """Everything a prepared folder depends on: corpus files, data settings, given vocabulary fingerprints."""
    corpus = []
    for path in files:
        stat = path.stat()
        corpus.append({"path": str(path), "bytes": stat.st_size, "mtime_ns": stat.st_mtime_ns})
    inputs = {
        "corpus": corpus,
        "languages": cfg.languages,
        "direction": cfg.direction,
        "normalize_apostrophes": cfg.normalize_apostrophes,
        "split_seed": cfg.split_seed,
        "valid_size": cfg.valid_size,
        "test_size": cfg.test_size,
        "tokenizer": cfg.tokenizer,
    }
    if cfg.tokenizer == "book":  # the word vocabulary is counted on the pairs max_len keeps
        inputs.update(min_freq=cfg.min_freq, max_len=cfg.max_len)
        if vocabs is not None:  # a parent run's word lists (fine-tuning): ids of their own
            inputs.update(vocabs=list(vocabs))
    else:
        inputs.update(
            subword_type=cfg.subword_type,
            vocab_size=cfg.vocab_size,
            shared_vocab=cfg.shared_vocab,
            subword_sample=cfg.subword_sample,
            sentencepiece=spm.__version__,
            vocabs=list(vocabs) if vocabs is not None else None,
        )
    return inputs


def _cpu_seconds() -> float:
    """CPU time of this process and its finished worker processes."""
    times = os.times()
    return times.user + times.system + times.children_user + times.children_system


@contextlib.contextmanager
def _timed(seconds: dict[str, list[float]], stage: str) -> Iterator[None]:
    """Record the block's [wall, CPU] seconds as seconds[stage]."""
    wall, cpu = time.perf_counter(), _cpu_seconds()
    yield
    seconds[stage] = [round(time.perf_counter() - wall, 3), round(_cpu_seconds() - cpu, 3)]


def learn_vocabs(cfg: Any, train_src: list[str], train_tgt: list[str]) -> tuple[SubwordVocab, SubwordVocab]:
    """Source and target sentencepiece vocabularies from (a sample of) the training split; shared if asked."""
    if cfg.shared_vocab:
        texts = sample_sentences(train_src + train_tgt, cfg.subword_sample, cfg.split_seed)
        shared = learn_subwords(texts, cfg.subword_type, cfg.vocab_size, "source and target")
        return shared, shared
    return (
        learn_subwords(
            sample_sentences(train_src, cfg.subword_sample, cfg.split_seed),
            cfg.subword_type,
            cfg.vocab_size,
            "source",
        ),
        learn_subwords(
            sample_sentences(train_tgt, cfg.subword_sample, cfg.split_seed),
            cfg.subword_type,
            cfg.vocab_size,
            "target",
        ),
    )


def word_vocabs(cfg: Any, train_src: list[str], train_tgt: list[str]) -> tuple[Vocab, Vocab]:
    """The book's word vocabularies, counted on the training pairs data.max_len keeps."""
    kept = [
        i
        for i, (a, b) in enumerate(zip(train_src, train_tgt, strict=True))
        if len(tokenize(a)) < cfg.max_len and len(tokenize(b)) < cfg.max_len
    ]
    return (
        Vocab.build((tokenize(train_src[i]) for i in kept), cfg.min_freq),
        Vocab.build((tokenize(train_tgt[i]) for i in kept), cfg.min_freq),
    )


def _vocab_files(vocabs: tuple[Vocab, Vocab]) -> dict[str, bytes]:
    """The vocabularies as store files: sentencepiece models, or one JSON of both token lists."""
    if isinstance(vocabs[0], SubwordVocab):
        return {f"{side}.model": v.model_proto for side, v in zip(SIDES, vocabs, strict=True)}  # type: ignore
    tokens = {side: v.idx_to_token for side, v in zip(SIDES, vocabs, strict=True)}
    return {"vocab.json": json.dumps(tokens, ensure_ascii=False).encode()}


def _read_vocabs(files: dict[str, bytes]) -> tuple[Vocab, Vocab]:
    """The vocabularies back from store files; StoreError when they are unusable."""
    try:
        if "src.model" in files:
            src = SubwordVocab(files["src.model"])
            shared = files["tgt.model"] == files["src.model"]
            return src, (src if shared else SubwordVocab(files["tgt.model"]))
        tokens = json.loads(files["vocab.json"])
        return Vocab(tokens["src"]), Vocab(tokens["tgt"])
    except (KeyError, TypeError, ValueError, RuntimeError) as exc:
        raise StoreError(f"the stored vocabularies are unusable: {exc}") from None


def _build(
    cfg: Any, files: Sequence[Path], vocabs: tuple[Vocab, Vocab] | None, workers: int, progress: bool
) -> Contents:
    """Read, split, learn (unless `vocabs` are given) and encode: the contents of a prepared folder."""
    seconds: dict[str, list[float]] = {}
    if progress:  # afterwards the data report says what preparing took
        log.info("preparing the corpus %s with %d worker process(es)", ", ".join(map(str, files)), workers)
    with _timed(seconds, "read"):
        where, pairs = read_corpus_files(cfg, files)
        num_pairs = len(pairs)
        src, tgt = prepare_pairs(pairs, cfg)
        del pairs
    with _timed(seconds, "split"):
        split = grouped_split(src, tgt, cfg.valid_size, cfg.test_size, cfg.split_seed)
        train_src, train_tgt = [src[i] for i in split.train], [tgt[i] for i in split.train]
        del src, tgt
        train_sha1 = text_fingerprint(train_src, train_tgt)
        overlap = english_overlap(train_src, split.valid, split.test)
    facts: dict[str, Any] = {
        "corpus": where,
        "corpus_pairs": num_pairs,
        "train_sha1": train_sha1,
        "overlap": overlap,
    }
    with _timed(seconds, "vocabularies"):
        if vocabs is None:
            vocabs = (
                word_vocabs(cfg, train_src, train_tgt)
                if cfg.tokenizer == "book"
                else learn_vocabs(cfg, train_src, train_tgt)
            )
    if cfg.tokenizer == "sentencepiece":
        facts["tokenizer"] = {
            "type": "sentencepiece",
            "model": cfg.subword_type,
            "vocab_size": cfg.vocab_size,
            "shared": cfg.shared_vocab,
            "seconds": seconds["vocabularies"][0],
        }
    if progress:
        log.info(
            "%s pairs read and split in %.1f s, vocabularies in %.1f s",
            f"{num_pairs:,}",
            seconds["read"][0] + seconds["split"][0],
            seconds["vocabularies"][0],
        )
    with _timed(seconds, "encode"):
        src_seqs = encode_parallel(vocabs[0], train_src, workers, "encoding source", progress)
        tgt_seqs = encode_parallel(vocabs[1], train_tgt, workers, "encoding target", progress)
    facts["prepared"] = {"seconds": seconds, "workers": workers}
    arrays = {"groups": split.train_groups}
    for side, seqs in zip(SIDES, (src_seqs, tgt_seqs), strict=True):
        arrays[f"{side}_ids"] = seqs.ids
        arrays[f"{side}_offsets"] = np.concatenate((seqs.starts, [len(seqs.ids)])).astype(np.int64)
    heldout = {
        name: [[ex.src, ex.refs] for ex in examples]
        for name, examples in (("valid", split.valid), ("test", split.test))
    }
    stored = {**_vocab_files(vocabs), "heldout.json": json.dumps(heldout, ensure_ascii=False).encode()}
    return Contents(arrays, stored, facts)


def _unpack(contents: Contents) -> Prepared:
    """A Prepared over the contents' (mapped) arrays, after checking they fit together; else StoreError."""
    arrays = contents.arrays
    src_vocab, tgt_vocab = _read_vocabs(contents.files)
    try:
        src = TokenSequences.from_offsets(arrays["src_ids"], arrays["src_offsets"])
        tgt = TokenSequences.from_offsets(arrays["tgt_ids"], arrays["tgt_offsets"])
        groups = arrays["groups"]
        heldout = json.loads(contents.files["heldout.json"])
        valid, test = (
            [EvalExample(s, list(refs)) for s, refs in heldout[name]] for name in ("valid", "test")
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise StoreError(f"the stored arrays or held-out sentences are unusable: {exc}") from None
    if not len(src) == len(tgt) == len(groups):
        raise StoreError(
            f"the stored arrays disagree on the number of pairs: {len(src)}, {len(tgt)}, {len(groups)}"
        )
    for seqs, vocab in ((src, src_vocab), (tgt, tgt_vocab)):
        if len(seqs) and int(seqs.lengths.min()) < 0:
            raise StoreError("the stored offsets are not in order")
        if len(seqs.ids) and int(seqs.ids.max()) >= len(vocab):
            raise StoreError(f"the stored ids go beyond the vocabulary's {len(vocab)}")
    facts = {**contents.facts}
    facts["prepared"] = {
        **facts.get("prepared", {}),
        "folder": str(contents.folder) if contents.folder is not None else None,
    }
    return Prepared(src_vocab, tgt_vocab, src, tgt, groups, valid, test, facts)


def load_prepared(
    cfg: Any,
    path: str | list[str] | None = None,
    vocabs: tuple[Vocab, Vocab] | None = None,
    workers: int | None = None,
    progress: bool | None = None,
) -> tuple[Prepared, bool]:
    """(the prepared split of cfg's corpus, whether it was prepared now): mapped from the store, else built.

    `vocabs` (a trained run's vocabularies: sentencepiece models, or word lists) are used instead
    of learned ones; the folder prepared with learned vocabularies serves when they are the same.
    `workers` defaults to every core; `progress` bars default to whether stderr is a terminal.
    """
    files = corpus_files(cfg, path)
    workers = workers or available_cores()
    progress = sys.stderr.isatty() if progress is None else progress
    what = f"{files[0].name} ({cfg.tokenizer}, {cfg.direction})"
    inputs = store_inputs(cfg, files)
    if vocabs is not None:
        fingerprints = [v.fingerprint() for v in vocabs]
        with contextlib.suppress(StoreError):
            learned = _unpack(open_entry(store_root() / entry_key(inputs), inputs))
            if [v.fingerprint() for v in (learned.src_vocab, learned.tgt_vocab)] == fingerprints:
                learned.src_vocab, learned.tgt_vocab = vocabs
                return learned, False
        prepared, built = ensure_entry(
            store_inputs(cfg, files, fingerprints),
            what,
            lambda: _build(cfg, files, vocabs, workers, progress),
            _unpack,
        )
        prepared.src_vocab, prepared.tgt_vocab = vocabs
        return prepared, built
    return ensure_entry(inputs, what, lambda: _build(cfg, files, None, workers, progress), _unpack)


def prepare(
    cfg: Any, path: str | list[str] | None = None, workers: int | None = None, progress: bool = True
) -> tuple[Prepared, bool]:
    """The body of `attn-mt prepare`: make sure cfg's corpus is prepared (split mode only)."""
    if cfg.mode != "split":
        raise UserError(
            f"data.mode is {cfg.mode!r}: only split mode is prepared ahead (book mode reads its "
            f"{cfg.num_examples + 1} pairs at every start)"
        )
    return load_prepared(cfg, path, workers=workers, progress=progress)


def format_prepared(prepared: Prepared, built: bool) -> str:
    """Two lines for the terminal: where the prepared split is, and what it took."""
    facts = prepared.facts["prepared"]
    folder = facts.get("folder") or "memory (the store could not be written)"
    if not built:
        return f"already prepared: {len(prepared.src):,} training pairs in {folder}"
    stages = ", ".join(f"{stage} {wall:.1f} s" for stage, (wall, _) in facts["seconds"].items())
    return (
        f"prepared {len(prepared.src):,} training pairs (of {prepared.facts['corpus_pairs']:,}) "
        f"into {folder}\n"
        f"{stages} ({facts['workers']} worker process(es))"
    )
