"""`attn-mt eval`: translate a split, write the files sacreBLEU reads, score them, dump attention."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import typer

from attn_mt.decoding.engines import engine_description, translator_for
from attn_mt.decoding.translator import with_length_penalty
from attn_mt.errors import UserError
from attn_mt.evaluation.attention_dumps import save_attention
from attn_mt.evaluation.scores import (
    BOOK_SENTENCES,
    RAW_BOOK_SENTENCES,
    SCORED_TEXT,
    book_bleu_rows,
    check_same_scoring,
    compare_eval_dirs,
    corpus_scores,
    scored_text_of,
    write_eval_files,
    write_scores,
)
from attn_mt.run.device import pick_device
from attn_mt.run.run_dir import LoadedRun, RunPaths

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
        pairs = RAW_BOOK_SENTENCES if run.config.data.tokenizer == "sentencepiece" else BOOK_SENTENCES
        if run.config.data.direction == "fr-en":
            pairs = tuple((fr, en) for en, fr in pairs)
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
    if run.config.data.tokenizer == "sentencepiece":
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


def run_eval(
    run_dir: Path,
    split: str,
    beam: int | None,
    attention: int,
    compare: Path | None,
    checkpoint: str,
    data_path: str | None,
    device: str,
    length_penalty: float | None = None,
    attention_words: bool = False,
    quantize: str | None = None,
) -> dict[str, Any]:
    """Evaluate one run on one split; writes eval/<split>/{src.txt,hyp.txt,refs.jsonl,scores.json}.

    An export file MODEL.pt in place of the run directory writes MODEL.pt.eval/<split>/ beside it.
    """
    from attn_mt.shipping.load import load_model

    if split not in SPLITS:
        raise UserError(f"--split {split!r}: choose one of {', '.join(SPLITS)}")
    if beam is not None and beam < 1:
        raise UserError(f"--beam must be at least 1, got {beam}")
    if attention < 0:
        raise UserError(f"--attention must be 0 or more, got {attention}")
    if compare is not None:
        other = RunPaths(Path(compare)).eval_dir(split)
        if not Path(compare).is_dir():
            raise UserError(f"--compare {compare}: run directory not found")
        if not other.is_dir():
            raise UserError(
                f"--compare: {other} does not exist; run `attn-mt eval {compare} --split {split}` first"
            )
    dev = pick_device(device)
    run = load_model(run_dir, checkpoint, dev, quantize)
    cfg = with_length_penalty(run.config, length_penalty)
    scored_text = SCORED_TEXT[cfg.data.tokenizer]
    is_export = Path(run_dir).is_file()
    out_dir = Path(f"{run_dir}.eval") / split if is_export else RunPaths(Path(run_dir)).eval_dir(split)
    if compare is not None:
        other = RunPaths(Path(compare)).eval_dir(split)
        check_same_scoring(other, scored_text_of(other), out_dir, scored_text)
    sources, refs = split_examples(run, split, data_path, Path(run_dir))
    beam_size = cfg.decode.beam_size if beam is None else beam
    translator = translator_for(run, cfg, dev)
    results = translator.translate(sources, beam_size=beam_size, progress=True)
    hyps = [r.text for r in results]
    write_eval_files(out_dir, sources, hyps, refs)
    scores: dict[str, Any] = {
        "split": split,
        "direction": cfg.data.direction,
        "scored_text": scored_text,
        "beam_size": beam_size,
        "length_penalty": cfg.decode.length_penalty,
        "checkpoint": run.checkpoint.name,
        "step": run.step,
        "quantize": quantize or "none",
        "engine": engine_description(run),
        **corpus_scores(hyps, refs),
    }
    if split == "book":
        scores["book_bleu2"] = book_bleu_rows(sources, hyps, [r[0] for r in refs])
        scores["book_bleu2_mean"] = sum(r["bleu2"] for r in scores["book_bleu2"]) / len(refs)
    if attention:
        for i, result in enumerate(results[:attention]):
            if result.hypotheses:
                sentence = translator.attention(result, attention_words)
                save_attention(sentence, out_dir / "attention", f"{i:04d}")
    if compare is not None:
        scores["compare"] = compare_eval_dirs(RunPaths(Path(compare)).eval_dir(split), out_dir,
                                              system_text=scored_text)
        scores["compare"]["baseline_name"] = str(compare)
    write_scores(out_dir, scores)
    typer.echo(format_table(scores))
    typer.echo(f"files in {out_dir}")
    return scores
