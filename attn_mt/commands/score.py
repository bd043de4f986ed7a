"""`attn-mt score`: how probable a trained model finds each line of a target file as the translation of
the same line of a source file (decoding/scoring.py), as JSON lines or TSV."""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, replace
from pathlib import Path

from attn_mt.commands.translate import read_text_lines
from attn_mt.data.sentences import split_line
from attn_mt.data.vocab import EOS
from attn_mt.decoding.engine import Engine
from attn_mt.decoding.engines import translator_for
from attn_mt.decoding.lines import line_warnings
from attn_mt.decoding.outputs import with_length_penalty
from attn_mt.decoding.scoring import Scored, blank_pairs, name_blank, score_with
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


@dataclass
class SentencePairs:
    """Line pairs as sentence pairs: the flat sources and targets, each line's indices into them, and
    one warning per line kept whole."""

    sources: list[str]
    targets: list[str]
    lines: list[list[int]]
    warnings: list[str]


def split_pairs(engine: Engine, sources: list[str], targets: list[str]) -> SentencePairs:
    """Each line pair cut into sentence pairs where both sides hold as many sentences, else kept whole."""
    source_language, target_language = engine.cfg.data.direction.split("-")
    found = SentencePairs([], [], [], [])
    for number, (source, target) in enumerate(zip(sources, targets, strict=True), start=1):
        source_split, target_split = split_line(source, source_language), split_line(target, target_language)
        pieces = list(zip(source_split.sentences, target_split.sentences, strict=False))
        if len(source_split.sentences) != len(target_split.sentences):
            found.warnings.append(
                f"line {number}: the source has {len(source_split.sentences)} sentence(s) and the target "
                f"{len(target_split.sentences)}: scored as one sentence each"
            )
            pieces = [(source, target)]
        found.lines.append(list(range(len(found.sources), len(found.sources) + len(pieces))))
        found.sources += [s for s, _ in pieces]
        found.targets += [t for _, t in pieces]
    return found


def joined(source: str, target: str, parts: list[Scored]) -> Scored:
    """A line's score from its sentences': log-probabilities and scores added, tokens in a row."""
    if len(parts) == 1:
        return replace(parts[0], source=source, target=target)
    return Scored(
        source=source,
        target=target,
        source_tokens=[t for p in parts for t in p.source_tokens],
        target_tokens=[t for p in parts for t in [*p.target_tokens, EOS]][:-1],
        token_log_probs=[v for p in parts for v in p.token_log_probs],
        log_prob=sum(p.log_prob for p in parts),
        score=sum(p.score for p in parts),
        warnings=line_warnings([], [p.warnings for p in parts]),
    )


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
    split: bool = False,
) -> None:
    """Score every target line against its source line and write one record per line.

    With `split`, a line pair whose two sides hold as many sentences is scored sentence by sentence
    and its record adds them up (the target tokens of its sentences run on, with <eos> between them).
    """
    if output_format not in FORMATS:
        raise UserError(f"--format {output_format!r}: expected one of {', '.join(FORMATS)}")
    if output is not None and output.is_dir():
        raise UserError(f"--output {output} is a directory; give a file path")
    if source_file == "-" and target_file == "-":
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
    engine = translator_for(run, with_length_penalty(run.config, length_penalty))
    if split:
        pairs = split_pairs(engine, sources, targets)
        for note in pairs.warnings:
            print(f"attn-mt: warning: {note}", file=sys.stderr)
        parts = score_with(engine, pairs.sources, pairs.targets, progress=True)
        scored = [
            joined(source, target, [parts[i] for i in line])
            for source, target, line in zip(sources, targets, pairs.lines, strict=True)
        ]
    else:
        scored = score_with(engine, sources, targets, progress=True)
    for number, pair in enumerate(scored, start=1):
        for warning in pair.warnings:
            print(f"attn-mt: warning: line {number}: {warning}", file=sys.stderr)
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
