"""`attn-mt score`: how probable a trained model finds each line of a target file as the translation of
the same line of a source file (decoding/scoring.py), as JSON lines or TSV."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from attn_mt.commands.line_warnings import print_line_warnings
from attn_mt.commands.output_files import STDIN, refuse_directories, refuse_shared_paths
from attn_mt.commands.translate import read_text_lines, write_alignments
from attn_mt.decoding.alignments import WordAlignment
from attn_mt.decoding.engines import translator_for
from attn_mt.decoding.scoring import Scored, blank_pairs, name_blank, score_lines
from attn_mt.decoding.settings import DecodeSettings
from attn_mt.errors import UserError
from attn_mt.run.open import open_model

FORMATS = ("jsonl", "tsv")
TSV_HEADER = "log_prob\tscore\ttoken_log_probs"


def score_record(line: int, scored: Scored) -> dict[str, object]:
    """One JSON line of `attn-mt score`'s output."""
    return {
        "line": line,
        "source": scored.source,
        "target": scored.target,
        "source_tokens": scored.source_tokens,
        "target_tokens": scored.target_tokens,
        "token_log_probs": [round(p, 6) for p in scored.token_log_probs],
        "log_prob": round(scored.log_prob, 6),
        "score": round(scored.score, 6),
        "warnings": scored.warnings,
    }


def tsv_row(scored: Scored) -> str:
    """One TSV line: total log-probability, normalised score, the per-token log-probabilities."""
    tokens = " ".join(f"{p:.6f}" for p in scored.token_log_probs)
    return f"{scored.log_prob:.6f}\t{scored.score:.6f}\t{tokens}"


def run_score(
    run_dir: Path,
    source_file: str,
    target_file: str,
    output: Path | None,
    output_format: str,
    checkpoint: str,
    device: str,
    length_penalty: float | None = None,
    quantize: str | None = None,
    split: bool = True,
    alignments: Path | None = None,
    verbose: bool = False,
) -> None:
    """Score every target line against its source line and write one record per line.

    With `split` (the default, as `translate`), a line pair is scored sentence by sentence and its
    record adds them up (decoding/scoring.py: `score_lines`); without it each line is one sentence.
    `alignments`: a file to write each target line's Pharaoh word alignment to, as `translate
    --alignments` writes its outputs'. `verbose`: every warning line, unknown words undigested.
    """
    if output_format not in FORMATS:
        raise UserError(f"--format {output_format!r}: expected one of {', '.join(FORMATS)}")
    refuse_directories(output, alignments)
    refuse_shared_paths(
        {"--output": output, "--alignments": alignments}, {"--source": source_file, "--target": target_file}
    )
    if source_file == STDIN and target_file == STDIN:
        raise UserError("--source and --target cannot both be standard input")
    sources = read_text_lines(source_file, "--source")
    targets = read_text_lines(target_file, "--target")
    if len(sources) != len(targets):
        raise UserError(
            f"--source {source_file} has {len(sources)} lines, --target {target_file} has {len(targets)}: "
            "give one target line per source line"
        )
    blank = blank_pairs(sources, targets)
    if blank:
        raise UserError(f"nothing to score on {name_blank(blank, 'line')}: a blank source sentence")
    run = open_model(run_dir, checkpoint, device, quantize)
    alpha = DecodeSettings.resolve(run.config.decode, length_penalty=length_penalty).length_penalty
    engine = translator_for(run)
    scored = score_lines(
        engine, sources, targets, split, alpha, progress=True, alignments=alignments is not None
    )
    print_line_warnings([pair.warnings for pair in scored], verbose)
    if output_format == "jsonl":
        lines = [json.dumps(score_record(i, s), ensure_ascii=False) for i, s in enumerate(scored, start=1)]
    else:
        lines = [TSV_HEADER, *(tsv_row(s) for s in scored)]
    text = "".join(line + "\n" for line in lines)
    if output is None:
        sys.stdout.write(text)
        sys.stdout.flush()
    else:
        output.parent.mkdir(parents=True, exist_ok=True)
        output.write_text(text, encoding="utf-8")
    if alignments is not None:
        write_alignments(alignments, [s.alignment or WordAlignment() for s in scored])
