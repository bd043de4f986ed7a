"""`attn-mt eval`: translate a split, write the files sacreBLEU reads, score them, dump attention."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from attn_mt.decoding.engines import translator_for
from attn_mt.decoding.ensembles import open_models
from attn_mt.decoding.settings import DecodeSettings
from attn_mt.errors import UserError
from attn_mt.evaluation.attention_dumps import save_attention
from attn_mt.evaluation.evaluate import SPLITS, format_table, split_examples
from attn_mt.evaluation.scores import (
    SCORED_TEXT,
    book_bleu_rows,
    check_same_scoring,
    compare_eval_dirs,
    corpus_scores,
    scored_text_of,
    write_eval_files,
    write_scores,
)
from attn_mt.run.run_dir import RunPaths


def run_eval(
    run_dir: Path | list[Path],
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
    Several models are evaluated as their ensemble, written to <split>-ensemble/ of the first.
    """
    models = [Path(p) for p in run_dir] if isinstance(run_dir, list) else [Path(run_dir)]
    if split not in SPLITS:
        raise UserError(f"--split {split!r}: choose one of {', '.join(SPLITS)}")
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
    run = open_models(models, checkpoint, device, quantize)
    cfg = run.config
    settings = DecodeSettings.resolve(cfg.decode, beam, length_penalty=length_penalty)
    scored_text = SCORED_TEXT[cfg.data.tokenizer]
    out_dir = run.eval_dir(split)
    if compare is not None:
        other = RunPaths(Path(compare)).eval_dir(split)
        check_same_scoring(other, scored_text_of(other), out_dir, scored_text)
    sources, refs = split_examples(run, split, data_path, models[0])
    translator = translator_for(run)
    results = translator.translate(sources, progress=True, settings=settings)
    hyps = [r.text for r in results]
    write_eval_files(out_dir, sources, hyps, refs)
    scores: dict[str, Any] = {
        "split": split,
        "direction": cfg.data.direction,
        "scored_text": scored_text,
        "beam_size": settings.beam_size,
        "length_penalty": settings.length_penalty,
        "checkpoint": run.checkpoint.name,
        "step": run.step,
        "quantize": quantize or "none",
        "engine": translator.description(),
        **({"ensemble": [str(m) for m in models]} if len(models) > 1 else {}),
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
        scores["compare"] = compare_eval_dirs(
            RunPaths(Path(compare)).eval_dir(split), out_dir, system_text=scored_text
        )
        scores["compare"]["baseline_name"] = str(compare)
    write_scores(out_dir, scores)
    typer.echo(format_table(scores))
    typer.echo(f"files in {out_dir}")
    return scores
