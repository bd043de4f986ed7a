"""What a report shows of a run, read from its directory: no model is loaded, so any run can be reported.

Every reader is forgiving: a file that is absent or unreadable becomes a note in `RunInfo.missing`
(and the part of the report that needs it is left out), never an exception. The notes, and what a
comparison says of its origin, are in the language in force when the runs are read.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from sacrebleu.metrics import CHRF

from attn_mt.errors import UserError
from attn_mt.evaluation.scores import SCORES_FILE, compare_eval_dirs, read_eval_files
from attn_mt.i18n import _
from attn_mt.run.run_dir import RunPaths, describe_contents, parse_metrics
from attn_mt.training.best_metric import improves

SPLIT_ORDER = ("test", "valid", "book")  # the splits `attn-mt eval` writes, in the report's order
DUMP_STEM = re.compile(r"^\d+$")  # attention dumps are named by the sentence index: 0000.json, 0000_cross.png


@dataclass
class SessionFacts:
    """What run_summary.json says about the hardware, the model size and how training ended."""

    device: str | None = None
    parameters: str | None = None
    model_type: str | None = None
    finish: str | None = None
    first_time: str | None = None
    last_time: str | None = None
    parent: str | None = None  # a fine-tuned run's parent: run directory, checkpoint, step, scores


@dataclass
class TrainingSummary:
    """Steps, time and speed of training, from metrics.jsonl."""

    last_step: int | None = None
    epochs_completed: int = 0
    elapsed_s: float | None = None
    mean_tokens_per_s: float | None = None
    last_tokens_per_s: float | None = None
    best_valid_bleu: tuple[float, int] | None = None  # (value, step)
    best_valid_loss: tuple[float, int] | None = None  # (value, step)


@dataclass
class AttentionDump:
    """One sentence's attention dump: its JSON summary and the heatmap PNG of each map."""

    index: int
    summary: dict[str, Any]
    heatmaps: dict[str, Path]  # map name -> PNG


@dataclass
class Sentence:
    """One evaluated sentence with its sentence-level chrF."""

    index: int
    source: str
    refs: list[str]
    hyp: str
    chrf: float


@dataclass
class SplitEval:
    """Everything `attn-mt eval` left in eval/<split>."""

    split: str
    path: Path
    scores: dict[str, Any] | None
    sentences: list[Sentence]
    attention: dict[int, AttentionDump]


@dataclass
class RunInfo:
    """One run directory as the report sees it."""

    root: Path
    config_text: str | None = None
    config: dict[str, Any] | None = None
    data_report: dict[str, Any] | None = None
    log: SessionFacts = field(default_factory=SessionFacts)
    metrics: list[dict[str, Any]] = field(default_factory=list)
    training: TrainingSummary = field(default_factory=TrainingSummary)
    evals: list[SplitEval] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)

    @property
    def name(self) -> str:
        """The directory name (the report's label for the run)."""
        return self.root.resolve().name or str(self.root)

    def eval_for(self, split: str) -> SplitEval | None:
        """The evaluation on `split`, if there is one."""
        return next((e for e in self.evals if e.split == split), None)


def _read_text(path: Path, what: str, missing: list[str]) -> str | None:
    """The text of `path`, or None with a note naming `what` (translated) is lost."""
    if not path.is_file():
        missing.append(_("{file} not found (not shown: {what})").format(file=path.name, what=what))
        return None
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        missing.append(
            _("{file} could not be read: {error} (not shown: {what})").format(
                file=path.name, error=exc, what=what
            )
        )
        return None


def _read_json(path: Path, what: str, missing: list[str]) -> Any:
    """The parsed JSON of `path`, or None with a note."""
    text = _read_text(path, what, missing)
    if text is None:
        return None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        missing.append(
            _("{file} is not valid JSON: {error} at line {line} (not shown: {what})").format(
                file=path.name, error=exc.msg, line=exc.lineno, what=what
            )
        )
        return None


def read_summary(summary: dict[str, Any]) -> SessionFacts:
    """Device, parameter count, how the last session ended and its time span, from run_summary.json."""
    facts = SessionFacts(model_type=summary.get("model"), first_time=summary.get("started"))
    facts.last_time = summary.get("finished")
    if summary.get("device"):
        facts.device = (
            f"{summary['device']}, {summary.get('threads', '?')} CPU threads, "
            f"{summary.get('processes', 1)} process(es), kernels: {summary.get('kernels', 'n/a')}"
        )
    if isinstance(summary.get("parameters"), int):
        facts.parameters = f"{summary['parameters']:,}"
    parent = summary.get("parent")
    if isinstance(parent, dict):
        scores = parent.get("scores") if isinstance(parent.get("scores"), dict) else {}
        shown = "".join(f", {key} {value}" for key, value in scores.items())
        facts.parent = (
            f"{parent.get('run_dir')} ({parent.get('checkpoint')}, step {parent.get('step')}{shown}; "
            f"optimiser {parent.get('optimizer', 'new')})"
        )
    if summary.get("stop_reason"):
        loss = summary.get("final_loss")
        facts.finish = (
            f"{summary['stop_reason']} after {summary.get('steps')} steps: "
            f"loss {'n/a' if loss is None else f'{loss:.4f}'}, "
            f"{summary.get('tokens_per_s', 0):,.0f} target tokens/s over {summary.get('wall_s', 0):.1f} s"
        )
    return facts


def read_metrics_lines(text: str, missing: list[str]) -> list[dict[str, Any]]:
    """The JSON records of a metrics.jsonl text; bad lines (e.g. cut by a crash) are noted and skipped."""
    records, bad = parse_metrics(text)
    if bad:
        lines = ", ".join(map(str, bad))
        missing.append(
            _("metrics.jsonl lines {lines} are not JSON records and were skipped").format(lines=lines)
        )
    return records


def _numbers(records: list[dict[str, Any]], key: str) -> list[tuple[float, int]]:
    """(value, step) of every record with a numeric `key`."""
    return [
        (float(r[key]), int(r.get("step", 0)))
        for r in records
        if isinstance(r.get(key), (int, float)) and not isinstance(r.get(key), bool)
    ]


def _best(metric: str, pairs: list[tuple[float, int]]) -> tuple[float, int] | None:
    """The best (value, step) of `metric` by the trainer's rule; the earliest step on a tie."""
    best = None
    for value, step in pairs:
        if best is None or improves(metric, value, best[0]):
            best = (value, step)
    return best


def summarise_training(records: list[dict[str, Any]]) -> TrainingSummary:
    """Last step and epoch, training time, throughput and the best validation numbers."""
    summary = TrainingSummary()
    steps = _numbers(records, "step")
    if steps:
        summary.last_step = int(max(v for v, _ in steps))
    summary.epochs_completed = len(_numbers(records, "epoch_loss"))  # one record at the end of each epoch
    elapsed = _numbers(records, "elapsed_s")
    if elapsed:
        summary.elapsed_s = max(v for v, _ in elapsed)
    speeds = _numbers(records, "tokens_per_s")
    if speeds:
        summary.mean_tokens_per_s = sum(v for v, _ in speeds) / len(speeds)
        summary.last_tokens_per_s = speeds[-1][0]
    bleu, loss = _numbers(records, "valid_bleu"), _numbers(records, "valid_loss")
    summary.best_valid_bleu, summary.best_valid_loss = _best("valid_bleu", bleu), _best("valid_loss", loss)
    return summary


def sentence_chrf(sources: list[str], hyps: list[str], refs: list[list[str]]) -> list[Sentence]:
    """Every sentence with its sacreBLEU sentence-level chrF (default settings) against its references."""
    metric = CHRF()
    return [
        Sentence(i, src, list(ref), hyp, float(metric.sentence_score(hyp, list(ref)).score))
        for i, (src, hyp, ref) in enumerate(zip(sources, hyps, refs, strict=True))
    ]


def read_attention_dumps(folder: Path, missing: list[str]) -> dict[int, AttentionDump]:
    """The dumps `attn-mt eval --attention N` wrote into `folder`, by sentence index."""
    dumps = {}
    for json_path in sorted(folder.glob("*.json")):
        if not DUMP_STEM.match(json_path.stem):
            continue
        what = _("attention summary of sentence {index}").format(index=int(json_path.stem))
        summary = _read_json(json_path, what, missing)
        if not isinstance(summary, dict):
            continue
        heatmaps = {}
        for name in summary.get("shapes", {}):
            png = folder / f"{json_path.stem}_{name}.png"
            if png.is_file():
                heatmaps[name] = png
            else:
                missing.append(
                    _("{file} not found (not shown: {what})").format(file=png.name, what=_("that heatmap"))
                )
        dumps[int(json_path.stem)] = AttentionDump(int(json_path.stem), summary, heatmaps)
    return dumps


def eval_command(root: Path, split: str, scores: Any, attention: str) -> str:
    """The `attn-mt eval` line that redoes an evaluation with attention dumps, keeping its beam size."""
    beam = scores.get("beam_size") if isinstance(scores, dict) else None
    beam_option = f" --beam {beam}" if isinstance(beam, int) else ""
    return f"`attn-mt eval {root} --split {split}{beam_option} --attention {attention}`"


def read_split(root: Path, folder: Path, missing: list[str]) -> SplitEval:
    """The scores, sentences and attention dumps of one eval/<split> folder."""
    split = folder.name
    note: list[str] = []
    scores = _read_json(folder / SCORES_FILE, _("the {split} scores").format(split=split), note)
    sentences: list[Sentence] = []
    try:
        files = read_eval_files(folder)
        sentences = sentence_chrf(files.sources, files.hyps, files.refs)
    except UserError as exc:
        note.append(_("{error}: no sample translations for split {split}").format(error=exc, split=split))
    attention: dict[int, AttentionDump] = {}
    if (folder / "attention").is_dir():
        attention = read_attention_dumps(folder / "attention", note)
    if not attention:
        note.append(
            _("no attention dumps for split {split}: {command} writes them for the first N sentences").format(
                split=split, command=eval_command(root, split, scores, "N")
            )
        )
    missing.extend(f"eval/{split}: {line}" for line in note)
    return SplitEval(split, folder, scores if isinstance(scores, dict) else None, sentences, attention)


def _split_key(folder: Path) -> tuple[int, str]:
    """Known splits first, in SPLIT_ORDER, then any other folder by name."""
    name = folder.name
    return (SPLIT_ORDER.index(name) if name in SPLIT_ORDER else len(SPLIT_ORDER), name)


def check_run_folder(root: Path) -> None:
    """Refuse a folder that holds none of a run's files: reporting it would only list what is missing."""
    paths = RunPaths(Path(root))
    if not paths.root.is_dir():
        raise UserError(f"run directory not found: {root}")
    files = (
        paths.config,
        paths.src_vocab,
        paths.tgt_vocab,
        paths.checkpoints,
        paths.metrics,
        paths.log,
        paths.summary,
        paths.curves,
        paths.data_report,
        paths.root / "eval",
    )
    if not any(path.exists() for path in files):
        held = describe_contents(paths.root) or "nothing"
        raise UserError(
            f"{root} is not a run directory: none of a run's files (config.yaml, metrics.jsonl, "
            f"checkpoints/, eval/, ...) is in it; it holds {held}"
        )


def read_run(root: Path) -> RunInfo:
    """Everything the report shows of the run in `root`, with a note for each piece that is missing."""
    paths = RunPaths(Path(root))
    run = RunInfo(paths.root)
    missing = run.missing
    run.config_text = _read_text(paths.config, _("the resolved config"), missing)
    if run.config_text is not None:
        try:
            parsed = yaml.safe_load(run.config_text)
            run.config = parsed if isinstance(parsed, dict) else None
        except yaml.YAMLError:
            missing.append(_("config.yaml is not valid YAML: the model type is unknown"))
    report = _read_json(paths.data_report, _("the data report"), missing)
    run.data_report = report if isinstance(report, dict) else None
    summary = _read_json(paths.summary, _("device, model size and how training ended"), missing)
    if isinstance(summary, dict):
        run.log = read_summary(summary)
    metrics_text = _read_text(paths.metrics, _("training curves, wall time and throughput"), missing)
    if metrics_text is not None:
        run.metrics = read_metrics_lines(metrics_text, missing)
        run.training = summarise_training(run.metrics)
    eval_root = paths.root / "eval"
    folders = []
    if eval_root.is_dir():
        folders = sorted((p for p in eval_root.iterdir() if p.is_dir()), key=_split_key)
    if not folders:
        missing.append(
            _("never evaluated: {command} writes scores, samples and attention").format(
                command=f"`attn-mt eval {paths.root} --attention 5`"
            )
        )
    run.evals = [read_split(paths.root, folder, missing) for folder in folders]
    return run


def select_gallery(
    sentences: list[Sentence], attention: dict[int, AttentionDump], count: int
) -> list[tuple[Sentence, list[str]]]:
    """The sentences to show and why: the `count` worst by chrF, the `count` best, then attention dumps.

    Worst come in rising chrF, best in falling chrF (ties by sentence order); a sentence is shown once,
    with every reason it was picked.
    """
    by_chrf = sorted(sentences, key=lambda s: (s.chrf, s.index))
    worst = by_chrf[:count]
    worst_ids = {s.index for s in worst}
    best = sorted((s for s in by_chrf if s.index not in worst_ids), key=lambda s: (-s.chrf, s.index))[:count]
    reasons: dict[int, list[str]] = {}
    order: list[Sentence] = []
    for rank, sentence in enumerate(worst, start=1):
        reasons[sentence.index] = [f"worst chrF #{rank}"]
        order.append(sentence)
    for rank, sentence in enumerate(best, start=1):
        reasons[sentence.index] = [f"best chrF #{rank}"]
        order.append(sentence)
    for sentence in sentences:
        if sentence.index in attention:
            if sentence.index not in reasons:
                order.append(sentence)
                reasons[sentence.index] = []
            reasons[sentence.index].append("attention dump")
    return [(s, reasons[s.index]) for s in order]


@dataclass
class Comparison:
    """A paired bootstrap result of two runs on one split, and where it comes from."""

    split: str
    baseline: RunInfo
    system: RunInfo
    result: dict[str, Any]  # as `attn_mt.evaluation.scores.paired_bootstrap` returns it
    origin: str


def _names_dir(name: Any, root: Path) -> bool:
    """Whether the path string `name` (as written by `attn-mt eval --compare`) is the directory `root`."""
    if not isinstance(name, str) or not name:
        return False
    try:
        return Path(name).resolve() == root.resolve() or (Path(name).exists() and Path(name).samefile(root))
    except OSError:
        return False


def _stored_comparison(holder: SplitEval, baseline: RunInfo) -> dict[str, Any] | None:
    """The paired bootstrap stored in `holder`'s scores.json if its baseline is the run `baseline`."""
    stored = (holder.scores or {}).get("compare")
    if isinstance(stored, dict) and _names_dir(stored.get("baseline_name"), baseline.root):
        return stored
    return None


def compare_runs(runs: list[RunInfo], notes: list[str]) -> list[Comparison]:
    """Paired bootstrap of every run against the first, on every split both were evaluated on.

    A result `attn-mt eval --compare` stored is used (in either direction); otherwise the report
    computes it from the two eval folders, which must hold the same sources and references.
    """
    if len(runs) < 2:
        return []
    baseline, comparisons = runs[0], []
    for system in runs[1:]:
        for evaluation in system.evals:
            split = evaluation.split
            base_eval = baseline.eval_for(split)
            if base_eval is None:
                notes.append(
                    _(
                        "{system} was evaluated on {split} but {baseline} was not: "
                        "no paired bootstrap on {split}"
                    ).format(system=system.name, baseline=baseline.name, split=split)
                )
                continue
            if stored := _stored_comparison(evaluation, baseline):
                origin = _("stored by `attn-mt eval --compare` in {file}").format(
                    file=evaluation.path / SCORES_FILE
                )
                comparisons.append(Comparison(split, baseline, system, stored, origin))
            elif stored := _stored_comparison(base_eval, system):
                origin = _("stored by `attn-mt eval --compare` in {file}").format(
                    file=base_eval.path / SCORES_FILE
                )
                comparisons.append(Comparison(split, system, baseline, stored, origin))
            elif base_eval.sentences and evaluation.sentences:
                try:
                    result = compare_eval_dirs(base_eval.path, evaluation.path)
                except UserError as exc:
                    notes.append(
                        _("no paired bootstrap of {system} against {baseline}: {error}").format(
                            system=system.name, baseline=baseline.name, error=exc
                        )
                    )
                    continue
                comparisons.append(Comparison(split, baseline, system, result, _("computed by this report")))
            else:
                notes.append(
                    _(
                        "no paired bootstrap of {system} against {baseline} on {split}: "
                        "the eval files of one of them are missing"
                    ).format(system=system.name, baseline=baseline.name, split=split)
                )
    return comparisons
