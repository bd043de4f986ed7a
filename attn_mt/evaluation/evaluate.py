"""What `attn-mt eval` scores a run on (a held-out split rebuilt from its corpus, or the book's four
sentences) and the table it prints."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from attn_mt.errors import UserError
from attn_mt.evaluation.scores import SCORED_TEXT, book_pairs
from attn_mt.run.opened import LoadedRun
from attn_mt.run.run_dir import RunPaths

SPLITS = ("test", "valid", "book")


def trained_report(run_dir: Path) -> dict[str, Any]:
    """The run's data_report.json ({} when it is missing or damaged)."""
    try:
        report = json.loads(RunPaths(Path(run_dir)).data_report.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return report if isinstance(report, dict) else {}


def trained_corpus(run_dir: Path) -> str | list[str] | None:
    """The corpus file (or two files) the run was trained on, from its data_report.json, if still there."""
    corpus = trained_report(run_dir).get("corpus")
    files = corpus if isinstance(corpus, list) else [corpus]
    if all(isinstance(f, str) and Path(f).is_file() for f in files):
        return corpus
    return None


def split_examples(
    run: LoadedRun, split: str, data_path: str | None, run_dir: Path | None = None
) -> tuple[list[str], list[list[str]]]:
    """Sources and reference lists of `split` (held-out splits are rebuilt from the corpus).

    The corpus is `data_path`, else the config's data.path, else the file the run was trained on
    (named in its data_report.json), else the usual search ($ATTN_MT_DATA, the cache, a download).
    """
    if split == "book":
        pairs = book_pairs(run.config.data.tokenizer, run.config.data.direction)
        return [src for src, _ in pairs], [[tgt] for _, tgt in pairs]
    if run.config.data.mode == "book":
        raise UserError(
            f"--split {split}: this run was trained in book mode, which holds nothing out; use --split book"
        )
    from attn_mt.data.dataset import load_data

    trained = trained_corpus(run_dir) if run_dir is not None else None
    if data_path is None and run.config.data.path is None:
        data_path = trained
    hint = f"; it was trained on {trained}: pass --data {trained}" if trained else ""
    fine_tuned = run_dir is not None and bool(
        trained_report(run_dir).get("vocab_from")
    )  # parent's vocabularies
    if run.config.data.tokenizer == "sentencepiece" or fine_tuned:
        data = load_data(run.config.data, data_path, (run.src_vocab, run.tgt_vocab))
        saved = trained_report(run_dir).get("train_sha1") if run_dir is not None else None
        if saved is not None and saved != data.report.get("train_sha1"):
            raise UserError(
                f"the corpus {data.report.get('corpus', '')} gives another training split than the run's: "
                f"it is not the corpus this run was trained on, so its held-out splits would differ{hint}"
            )
        examples = data.test if split == "test" else data.valid
        return [ex.src for ex in examples], [list(ex.refs) for ex in examples]
    data = load_data(run.config.data, data_path)
    for name, vocab in (("source", data.src_vocab), ("target", data.tgt_vocab)):
        saved = run.src_vocab if name == "source" else run.tgt_vocab
        if vocab.idx_to_token != saved.idx_to_token:
            raise UserError(
                f"the corpus {data.report.get('corpus', '')} gives a different {name} vocabulary than the "
                f"run's: it is not the corpus this run was trained on, so its splits would differ{hint}"
            )
    examples = data.test if split == "test" else data.valid
    return [ex.src for ex in examples], [list(ex.refs) for ex in examples]


def format_table(scores: dict[str, Any]) -> str:
    """A short human-readable table of the scores."""
    lines = [
        f"split {scores['split']} ({scores.get('direction', 'en-fr')}), scored on "
        f"{scores.get('scored_text', SCORED_TEXT['book'])} text: {scores['num_sentences']} sentences, "
        f"beam {scores['beam_size']}, "
        f"length penalty {scores.get('length_penalty')}, "
        f"checkpoint {scores['checkpoint']} (step {scores['step']})",
        f"  BLEU {scores['bleu']:6.2f}   {scores['bleu_signature']}",
        f"  chrF {scores['chrf']:6.2f}   {scores['chrf_signature']}",
        f"  TER  {scores['ter']:6.2f}   {scores['ter_signature']}",
    ]
    if scores.get("book_bleu2"):
        lines.append(f"  the book's BLEU-2 per sentence (mean {scores['book_bleu2_mean']:.3f}):")
    for row in scores.get("book_bleu2", []):
        lines.append(f"    {row['source']!r:16} => {row['output']!r:26} BLEU-2 {row['bleu2']:.3f}")
    if "compare" in scores:
        compare = scores["compare"]
        lines.append(
            f"  paired bootstrap ({compare['n_samples']} resamples), baseline {compare['baseline_name']} "
            "-> this run:"
        )
        for key, label in (("bleu", "BLEU"), ("chrf", "chrF"), ("ter", "TER ")):
            base, system = compare[key]["baseline"], compare[key]["system"]
            lines.append(
                f"    {label} {base['score']:6.2f} -> {system['score']:6.2f}   p = {system['p_value']:.4f}"
            )
    return "\n".join(lines)
