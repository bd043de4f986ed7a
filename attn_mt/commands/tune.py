"""`attn-mt tune`: decode the valid split with each beam size and length penalty, print the table, and with
--write store the best pair as the run's decode settings. The test split is never read."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import typer

from attn_mt.config import config_from_dict
from attn_mt.decoding.engines import translator_for
from attn_mt.decoding.settings import DecodeSettings
from attn_mt.errors import UserError
from attn_mt.evaluation.evaluate import split_examples
from attn_mt.evaluation.tuning import (
    TABLE_HEADER,
    alpha_text,
    best_pair,
    search_pairs,
    table_row,
    tune_decoding,
)
from attn_mt.limits import DECODE_BOUNDS, length_penalty_problem, out_of_bounds
from attn_mt.run.file_writes import check_writable, replace_files
from attn_mt.run.open import open_model
from attn_mt.run.opened import LoadedRun
from attn_mt.run.run_dir import RunPaths

DEFAULT_BEAMS = "1,4,6"
DEFAULT_LENGTH_PENALTIES = "0.6,1.0,1.4,2.0"
SUMMARY_KEY = "tuned_decode"  # run_summary.json's record of the last --write


def parse_list(option: str, text: str, kind: type) -> list[Any]:
    """`--beams 1,4,6` or `--length-penalties 0.6,1.0` as a list of distinct numbers, in the given order."""
    items = [item.strip() for item in text.split(",")]
    try:
        values = [kind(item) for item in items]
    except ValueError:
        what = "whole numbers" if kind is int else "numbers"
        raise UserError(
            f"{option} {text!r}: expected {what} separated by commas, like {option} 1,4"
        ) from None
    if len(set(values)) != len(values):
        raise UserError(f"{option} {text!r}: a value is given twice")
    return values


def check_values(beams: list[int], alphas: list[float]) -> None:
    """Refuse a beam or length penalty outside attn_mt/limits.py's bounds (NaN included), naming tune's
    own options, before a model is opened or a sentence decoded."""
    for beam in beams:
        problem = out_of_bounds(beam, *DECODE_BOUNDS["beam_size"])
        if problem:
            raise UserError(f"--beams: each beam size {problem}")
    for alpha in alphas:
        problem = length_penalty_problem(alpha)
        if problem:
            raise UserError(f"--length-penalties: each alpha {problem}")


def check_tunable(run: LoadedRun, beams: list[int], write: bool) -> None:
    """Refuse what tune cannot do with this run: no valid split, --write outside a run directory, a beam
    its vocabulary cannot fill or under its n-best."""
    data = run.config.data
    if data.mode == "book":
        raise UserError("tune: this run was trained in book mode, which holds no valid split out to tune on")
    if data.valid_size == 0:
        raise UserError("tune: this run holds no valid split out (data.valid_size is 0)")
    if write and not run.kind.keeps_settings:
        raise UserError(
            f"tune --write: {run.source} is not a run directory ({run.kind.value}); --write stores the "
            "settings in a run directory's config.yaml (tune the run directory, or tune without --write)"
        )
    for beam in beams:
        DecodeSettings.resolve(run.config.decode, beam, vocab_size=len(run.tgt_vocab))
    if run.config.decode.nbest > min(beams):
        raise UserError(
            f"--beams: {min(beams)} is smaller than the run's decode.nbest = {run.config.decode.nbest}"
        )


def read_summary(paths: RunPaths) -> dict[str, Any]:
    """run_summary.json ({} when there is none), read before decoding so that --write cannot fail after it."""
    if not paths.summary.is_file():
        return {}
    try:
        summary = json.loads(paths.summary.read_text(encoding="utf-8"))
    except ValueError:
        summary = None
    if not isinstance(summary, dict):
        raise UserError(f"tune --write: {paths.summary} is not a JSON object; move it away and tune again")
    return summary


def read_history(paths: RunPaths) -> str:
    """config_history.jsonl's text ('' when there is none), read before decoding so that --write, which
    appends to it, cannot fail after it; a file that is not UTF-8 text is refused."""
    if not paths.config_history.is_file():
        return ""
    try:
        return paths.config_history.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise UserError(
            f"tune --write: {paths.config_history} is not UTF-8 text (byte {exc.start}), so the change "
            "cannot be appended to it; repair or move it away and tune again"
        ) from None


def written_files(paths: RunPaths) -> list[Path]:
    """The files `tune --write` may write: the config, its history and the run summary."""
    return [paths.config, paths.config_history, paths.summary]


def write_best(
    paths: RunPaths,
    run: LoadedRun,
    summary: dict[str, Any],
    history: str,
    best: dict[str, Any],
    rows: list[dict[str, Any]],
) -> list[str]:
    """Store the best pair as decode.beam_size/length_penalty in config.yaml (history in
    config_history.jsonl) and the table that chose it in run_summary.json, all files or none
    (run/file_writes.py); `summary` and `history` are the files' contents, read before decoding.
    Returns the changes made."""
    from attn_mt.training.resume import config_changes

    decode = run.config.decode
    alpha = decode.length_penalty if best["length_penalty"] is None else best["length_penalty"]
    tuned = replace(run.config, decode=replace(decode, beam_size=best["beam_size"], length_penalty=alpha))
    config_from_dict(tuned.to_dict(), "the tuned config")  # still valid (nbest was checked against the beams)
    changes = config_changes(run.config, tuned)
    contents: dict[Path, str] = {}
    if changes:
        if history and not history.endswith("\n"):
            history += "\n"
        contents[paths.config] = tuned.to_yaml()
        contents[paths.config_history] = (
            history + json.dumps({"step": run.step, "changes": changes, "by": "tune"}) + "\n"
        )
    summary[SUMMARY_KEY] = {
        "beam_size": tuned.decode.beam_size,
        "length_penalty": tuned.decode.length_penalty,
        "valid_bleu": best["bleu"],
        "split": "valid",
        "checkpoint": run.checkpoint.name,
        "step": run.step,
        "pairs": rows,
    }
    contents[paths.summary] = json.dumps(summary, indent=2) + "\n"
    replace_files(contents, "tune --write")
    return [f"{key} {old!r} -> {new!r}" for key, (old, new) in changes.items()]


def run_tune(
    run_dir: Path,
    beams_text: str = DEFAULT_BEAMS,
    alphas_text: str = DEFAULT_LENGTH_PENALTIES,
    write: bool = False,
    checkpoint: str = "best",
    data_path: str | None = None,
    device: str = "auto",
) -> dict[str, Any]:
    """Decode the valid split with each pair, print the table and the best pair; with `write`, store it."""
    beams = parse_list("--beams", beams_text, int)
    alphas = parse_list("--length-penalties", alphas_text, float)
    check_values(beams, alphas)
    run = open_model(run_dir, checkpoint, device)
    check_tunable(run, beams, write)
    paths = RunPaths(Path(run_dir))
    summary, history = {}, ""
    if write:  # everything --write needs is checked before the first sentence is decoded
        summary, history = read_summary(paths), read_history(paths)
        check_writable(written_files(paths), "tune --write")
    sources, refs = split_examples(run, "valid", data_path, Path(run_dir))
    typer.echo(
        f"tuning decoding on the valid split ({len(sources)} sentences), checkpoint {run.checkpoint.name} "
        f"(step {run.step}); the run decodes with beam {run.config.decode.beam_size}, length penalty "
        f"{run.config.decode.length_penalty:g}"
    )
    typer.echo(TABLE_HEADER)
    rows = tune_decoding(
        translator_for(run),
        sources,
        refs,
        search_pairs(beams, alphas),
        on_row=lambda row: typer.echo(table_row(row)),
    )
    best = best_pair(rows, run.config.decode.length_penalty)
    result = {"best": best.as_dict(), "pairs": [row.as_dict() for row in rows]}
    typer.echo(
        f"best: beam {best.beam_size}, length penalty {alpha_text(best.length_penalty)} "
        f"(valid BLEU {best.bleu:.2f})"
    )
    if not write:
        if run.kind.keeps_settings:
            typer.echo(f"to decode with it from now on: attn-mt tune {run_dir} --write (same options)")
        return result
    changes = write_best(paths, run, summary, history, result["best"], result["pairs"])
    if changes:
        typer.echo(f"{paths.config} now decodes with {'; '.join(changes)}")
    else:
        typer.echo(f"{paths.config} already decodes with the best pair; unchanged")
    typer.echo(f"{paths.summary.name} records the valid scores that chose it ({SUMMARY_KEY})")
    return result
