"""The data report: pairs, English sentences, lengths, references, vocabulary sizes, cross-split overlap.

Lengths count tokens plus the <eos> the model sees. The report is plain JSON-ready data;
`format_report` renders it as a table for the log.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from attn_mt.data.splits import EvalExample
from attn_mt.data.vocab import Vocab

PERCENTILES = (50, 90, 99)
SPLITS = ("train", "valid", "test")


def length_stats(lengths: Sequence[int] | np.ndarray) -> dict[str, int]:
    """Percentiles 50/90/99 (the next observed value up) and the maximum; zeros when empty."""
    values = np.asarray(lengths)
    if values.size == 0:
        return {**{f"p{q}": 0 for q in PERCENTILES}, "max": 0}
    points = np.percentile(values, PERCENTILES, method="higher")
    return {**{f"p{q}": int(v) for q, v in zip(PERCENTILES, points, strict=True)}, "max": int(values.max())}


def unknown_shares(src_ids: Any, tgt_ids: Any, src_vocab: Vocab, tgt_vocab: Vocab) -> dict[str, float]:
    """The fraction of source and target token ids that are <unk> (flat id arrays or lists, no <eos>)."""
    shares = {}
    for side, ids, vocab in (("src", src_ids, src_vocab), ("tgt", tgt_ids, tgt_vocab)):
        flat = np.asarray(ids).ravel()  # (tokens,)
        shares[f"unk_{side}"] = round(float(np.count_nonzero(flat == vocab.unk_id)) / max(len(flat), 1), 5)
    return shares


def eval_split_stats(examples: Sequence[EvalExample], src_vocab: Vocab, tgt_vocab: Vocab) -> dict[str, Any]:
    """Pairs, sentences, lengths (in vocabulary tokens) and references per sentence of a held-out split."""
    refs = [len(ex.refs) for ex in examples]
    sources, references = [ex.src for ex in examples], [r for ex in examples for r in ex.refs]
    src_ids, tgt_ids = src_vocab.encode_texts(sources), tgt_vocab.encode_texts(references)
    flat_src, flat_tgt = [i for ids in src_ids for i in ids], [i for ids in tgt_ids for i in ids]
    return {
        "pairs": sum(refs),
        "english_sentences": len({ex.src for ex in examples}),
        "src_len": length_stats([len(ids) + 1 for ids in src_ids]),
        "tgt_len": length_stats([len(ids) + 1 for ids in tgt_ids]),
        "refs_per_sentence": {
            "mean": round(float(np.mean(refs)), 3) if refs else 0.0,
            "max": max(refs, default=0),
        },
        **unknown_shares(flat_src, flat_tgt, src_vocab, tgt_vocab),
    }


def english_overlap(
    train_src: Iterable[str], valid: Sequence[EvalExample], test: Sequence[EvalExample]
) -> dict[str, int]:
    """How many English sentences two splits share (a correct split has 0 everywhere)."""
    train_set = set(train_src)
    valid_set, test_set = {ex.src for ex in valid}, {ex.src for ex in test}
    return {
        "train_valid": len(train_set & valid_set),
        "train_test": len(train_set & test_set),
        "valid_test": len(valid_set & test_set),
    }


def data_report(
    facts: dict[str, Any],
    src_vocab: Vocab,
    tgt_vocab: Vocab,
    valid: Sequence[EvalExample],
    test: Sequence[EvalExample],
) -> dict[str, Any]:
    """The full report: `facts` recorded while loading (corpus, train, overlap), held-out and vocab stats."""
    report = dict(facts)
    splits = dict(report.get("splits", {}))
    if valid or test:
        splits["valid"] = eval_split_stats(valid, src_vocab, tgt_vocab)
        splits["test"] = eval_split_stats(test, src_vocab, tgt_vocab)
    report["splits"] = splits
    report["vocab"] = {"src": len(src_vocab), "tgt": len(tgt_vocab)}
    if valid or test:
        overlap = dict(report.get("overlap", {}))
        overlap["valid_test"] = english_overlap((), valid, test)["valid_test"]
        report["overlap"] = overlap
    return report


def length_cell(stats: dict[str, int] | None) -> str:
    """`p50/p90/p99/max` as one cell."""
    if not stats:
        return "-"
    return "/".join(str(stats[k]) for k in (*(f"p{q}" for q in PERCENTILES), "max"))


def format_report(report: dict[str, Any]) -> str:
    """A human-readable table of the report."""
    title = f"corpus {report.get('corpus', '?')}: {report.get('corpus_pairs', 0):,} pairs"
    title += f", {report.get('direction', 'en-fr')}, mode {report.get('mode', '?')}"
    if "split_seed" in report:
        title += f", split seed {report['split_seed']}"
    if report.get("normalize_apostrophes"):
        title += ", apostrophes normalised"
    lines = [title]
    source = report.get("direction", "en-fr").split("-")[0]
    header = (
        f"{'split':<6} {'pairs':>9} {source + ' sent.':>9} {'src len p50/90/99/max':>22} "
        f"{'tgt len p50/90/99/max':>22} {'refs mean/max':>14}"
    )
    lines.append(header)
    for name in SPLITS:
        stats = report.get("splits", {}).get(name)
        if not stats:
            continue
        refs = stats.get("refs_per_sentence")
        ref_cell = f"{refs['mean']:.2f}/{refs['max']}" if refs else "-"
        src_cell, tgt_cell = length_cell(stats.get("src_len")), length_cell(stats.get("tgt_len"))
        lines.append(
            f"{name:<6} {stats['pairs']:>9,} {stats['english_sentences']:>9,} "
            f"{src_cell:>22} {tgt_cell:>22} {ref_cell:>14}"
        )
    vocab = report.get("vocab", {})
    subword = report.get("tokenizer")
    if subword:
        models = "one shared model" if subword["shared"] else "two models"
        origin = {
            "learned": f"learned on train in {subword['seconds']:.2f} s",
            "cache": "from the cache",
            "run": f"the parent run's, {report['vocab_from']}"
            if report.get("vocab_from")
            else "the run's own",
        }.get(subword.get("origin"), "?")
        lines.append(
            f"vocabulary: source {vocab.get('src', 0):,}, target {vocab.get('tgt', 0):,} pieces "
            f"(sentencepiece {subword['model']}, {models}, {origin})"
        )
    else:
        origin = f"min_freq {report.get('min_freq', '?')}, built on train"
        if report.get("vocab_from"):
            origin = f"the parent run's, {report['vocab_from']}"
        lines.append(
            f"vocabulary: source {vocab.get('src', 0):,}, target {vocab.get('tgt', 0):,} tokens ({origin})"
        )
    shares = [
        f"{name} {stats['unk_src']:.2%}/{stats['unk_tgt']:.2%}"
        for name, stats in report.get("splits", {}).items()
        if "unk_src" in stats
    ]
    if shares:
        lines.append(f"<unk> share of source/target tokens: {', '.join(shares)}")
    train = report.get("splits", {}).get("train", {})
    if "dropped_for_length" in train:
        lines.append(
            f"train pairs dropped for length > {report.get('max_len')} tokens: "
            f"{train['dropped_for_length']:,}"
        )
    if "truncated_src" in train:
        lines.append(
            f"pairs truncated to num_steps = {report.get('num_steps')}: "
            f"source {train['truncated_src']:,}, target {train['truncated_tgt']:,}"
        )
    overlap = report.get("overlap")
    if overlap:
        cells = ", ".join(f"{k.replace('_', '/')} {v}" for k, v in overlap.items())
        lines.append(f"English sentences shared across splits: {cells}")
    prepared = report.get("prepared")
    if prepared and prepared.get("origin") == "built":
        stages = ", ".join(f"{stage} {wall:.1f} s" for stage, (wall, _) in prepared["seconds"].items())
        lines.append(
            f"prepared now ({stages}; {prepared['workers']} worker processes) into "
            f"{prepared.get('folder') or 'memory'}"
        )
    elif prepared:
        lines.append(f"mapped from {prepared.get('folder')}")
    if "seconds" in report:
        lines.append(f"loaded in {report['seconds']:.2f} s")
    return "\n".join(lines)
