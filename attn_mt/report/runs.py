"""`attn-mt runs`: one row per run directory, read from the files training and `attn-mt eval` leave.

A row takes the model type, tokenizer and direction from config.yaml; the parameter count, stop
reason and speed from run_summary.json; steps, training minutes and the best valid BLEU from
metrics.jsonl (with the report's own summary of it); the test scores and their sacreBLEU signature
from eval/test/scores.json; a fine-tuned run's parent from parent.json. A missing file leaves its
cells empty. A folder that is not a run (no config.yaml holding a mapping) is skipped with a note,
never an error for the whole table.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import yaml

from attn_mt.errors import UserError
from attn_mt.evaluation.scores import SCORES_FILE
from attn_mt.report.collect import summarise_training
from attn_mt.run.run_dir import RunPaths, parse_metrics, read_parent


@dataclass
class RunRow:
    """What the table shows of one run; None where the run's files do not say."""

    name: str
    path: str
    model: str | None = None
    parameters: int | None = None
    data: str | None = None  # tokenizer and direction, e.g. "sentencepiece 8000 en-fr"
    steps: int | None = None
    minutes: float | None = None  # training time of the whole run (resumes included)
    stop: str | None = None
    valid_bleu: float | None = None  # the best validation BLEU
    test_bleu: float | None = None
    test_chrf: float | None = None
    tokens_per_s: float | None = None  # target tokens per second of the last session
    test_signature: str | None = None  # sacreBLEU's BLEU signature of the test scores
    parent: str | None = None  # a fine-tuned run's parent: "NAME@STEP" (its run directory's name)


@dataclass(frozen=True)
class Column:
    """One table column: the RunRow field, its header and how a value is written."""

    key: str
    header: str
    show: Callable[[Any], str] = str
    numeric: bool = False


def _fixed(digits: int) -> Callable[[Any], str]:
    """A formatter with `digits` decimals."""
    return lambda value: f"{value:,.{digits}f}"


COLUMNS = (
    Column("name", "run"),
    Column("model", "model"),
    Column("parameters", "params", _fixed(0), True),
    Column("data", "tokenizer, direction"),
    Column("steps", "steps", _fixed(0), True),
    Column("minutes", "min", _fixed(1), True),
    Column("stop", "stop"),
    Column("valid_bleu", "best valid BLEU", _fixed(2), True),
    Column("test_bleu", "test BLEU", _fixed(2), True),
    Column("test_chrf", "test chrF", _fixed(2), True),
    Column("tokens_per_s", "tok/s", _fixed(0), True),
    Column("test_signature", "test signature"),
    Column("parent", "fine-tuned from"),
)
SORT_KEYS = tuple(c.key for c in COLUMNS if c.key not in ("test_signature", "parent"))


def _json_file(path: Path, notes: list[str], name: str) -> Any:
    """The parsed JSON of `path` (None when absent, or unreadable with a note)."""
    if not path.is_file():
        return None
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        notes.append(f"{name}: {path.name} could not be read ({exc}); its cells are empty")
        return None


def _run_config(root: Path) -> dict[str, Any] | None:
    """config.yaml as a mapping, or None when `root` holds no readable one (then it is not a run)."""
    path = RunPaths(root).config
    if not path.is_file():
        return None
    try:
        parsed = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return None
    return parsed if isinstance(parsed, dict) else None


def _number(value: Any) -> float | None:
    """`value` when it is a number (not a bool), else None."""
    return value if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _data_column(data: dict[str, Any]) -> str | None:
    """'book en-fr' or 'sentencepiece 8000 en-fr' from the config's data section."""
    tokenizer = data.get("tokenizer")
    if tokenizer is None:
        return None
    if tokenizer == "sentencepiece" and data.get("vocab_size"):
        tokenizer = f"sentencepiece {data['vocab_size']}"
    return f"{tokenizer} {data.get('direction', '')}".strip()


def read_row(root: Path, name: str, config: dict[str, Any], notes: list[str]) -> RunRow:
    """The row of the run in `root` (its config already read)."""
    paths = RunPaths(root)
    row = RunRow(name=name, path=str(root))
    model, data = config.get("model") or {}, config.get("data") or {}
    row.model = model.get("type") if isinstance(model, dict) else None
    row.data = _data_column(data) if isinstance(data, dict) else None
    summary = _json_file(paths.summary, notes, name)
    if isinstance(summary, dict):
        row.model = summary.get("model") or row.model
        row.parameters = _number(summary.get("parameters"))
        row.steps = _number(summary.get("steps"))
        row.stop = summary.get("stop_reason")
        row.tokens_per_s = _number(summary.get("tokens_per_s"))
        wall = _number(summary.get("wall_s"))
        row.minutes = wall / 60 if wall is not None else None
    if paths.metrics.is_file():
        records, bad = parse_metrics(paths.metrics.read_text(encoding="utf-8"))
        if bad:
            lines = ", ".join(map(str, bad))
            notes.append(f"{name}: metrics.jsonl lines {lines} are not JSON records (skipped)")
        training = summarise_training(records)
        if training.last_step is not None and (row.steps is None or training.last_step > row.steps):
            row.steps = training.last_step  # a session still running (or killed) is past the summary
            row.stop = "unfinished"
        if training.elapsed_s is not None:
            row.minutes = training.elapsed_s / 60
        if training.best_valid_bleu is not None:
            row.valid_bleu = training.best_valid_bleu[0]
        if row.tokens_per_s is None:
            row.tokens_per_s = training.last_tokens_per_s
    parent = read_parent(paths.parent)
    if parent is not None:
        row.parent = f"{Path(str(parent.get('run_dir', '?'))).name}@{parent.get('step', '?')}"
    scores = _json_file(paths.eval_dir("test") / SCORES_FILE, notes, name)
    if isinstance(scores, dict):
        row.test_bleu, row.test_chrf = _number(scores.get("bleu")), _number(scores.get("chrf"))
        row.test_signature = scores.get("bleu_signature")
    return row


def find_runs(folders: Sequence[Path]) -> tuple[list[RunRow], list[str]]:
    """A row for each run: a folder that is a run, or each run directly inside a folder; and notes.

    Folders that are not runs are noted, never an error; a folder of runs is read one level deep.
    """
    rows: list[RunRow] = []
    notes: list[str] = []
    for folder in folders:
        folder = Path(folder)
        if not folder.is_dir():
            notes.append(f"skipped {folder}: no such directory")
            continue
        config = _run_config(folder)
        if config is not None:
            rows.append(read_row(folder, folder.resolve().name, config, notes))
            continue
        for child in sorted(p for p in folder.iterdir() if p.is_dir()):
            config = _run_config(child)
            if config is None:
                notes.append(f"skipped {child}: not a run directory (no readable config.yaml)")
            else:
                rows.append(read_row(child, child.name, config, notes))
    return rows, notes


def sort_rows(rows: list[RunRow], key: str) -> list[RunRow]:
    """Rows by column `key`: numbers highest first, text in alphabetical order, empty cells last."""
    if key not in SORT_KEYS:
        raise UserError(f"--sort {key}: not a column; choose one of {', '.join(SORT_KEYS)}")
    column = next(c for c in COLUMNS if c.key == key)
    present = [r for r in rows if getattr(r, key) is not None]
    empty = [r for r in rows if getattr(r, key) is None]
    present.sort(key=lambda r: getattr(r, key), reverse=column.numeric)
    return present + empty


def format_table(rows: Sequence[RunRow]) -> str:
    """The rows as an aligned text table (numbers right-aligned, '-' for an empty cell)."""
    cells = [[c.header for c in COLUMNS]]
    for row in rows:
        values = [getattr(row, c.key) for c in COLUMNS]
        cells.append(["-" if v is None else c.show(v) for c, v in zip(COLUMNS, values, strict=True)])
    widths = [max(len(line[i]) for line in cells) for i in range(len(COLUMNS))]
    lines = []
    for line in cells:
        parts = [
            text.rjust(w) if c.numeric else text.ljust(w)
            for c, text, w in zip(COLUMNS, line, widths, strict=True)
        ]
        lines.append("  ".join(parts).rstrip())
    return "\n".join(lines)


def rows_json(rows: Sequence[RunRow]) -> str:
    """The rows as a JSON list of objects (the raw values, null where empty)."""
    return json.dumps([asdict(row) for row in rows], indent=2)


def list_runs(
    folders: Sequence[Path], sort: str | None = None, as_json: bool = False
) -> tuple[str, list[str]]:
    """`attn-mt runs`: the table (or JSON) of the runs in `folders`, and the notes for stderr."""
    if sort is not None and sort not in SORT_KEYS:
        raise UserError(f"--sort {sort}: not a column; choose one of {', '.join(SORT_KEYS)}")
    rows, notes = find_runs(folders)
    if sort is not None:
        rows = sort_rows(rows, sort)
    if not rows:
        notes.append(f"no run directories in {', '.join(map(str, folders))}")
    return (rows_json(rows) if as_json else format_table(rows)), notes
