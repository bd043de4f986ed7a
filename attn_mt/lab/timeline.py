"""Lab panel "watch it learn": a run's recorded timeline (training/timeline.py), one point at a time.

For a run and one of its probe sentences, the answer holds the chosen point's greedy output and
attention heatmap, the loss curve with that point marked, and small multiples at the first point,
10%, 50% and the last, the same for every point, so a page (or a printout) can set them side by side.
The file is read again only when it changes, so a timeline still being written shows its new points.

Shapes: T output positions (with <eos>), S source positions (with <eos>), h heads.
"""

from __future__ import annotations

import math
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np
import torch

from attn_mt.decoding.attention import attention_entropy
from attn_mt.i18n import N_, _, ngettext
from attn_mt.lab.engines import checkpoint_text
from attn_mt.lab.inputs import LabError, choice, whole
from attn_mt.lab.shown import answer, code, number, plot, shown
from attn_mt.run.opened import LoadedRun
from attn_mt.training.timeline import (
    RecordedTimeline,
    Timeline,
    TimelinePoint,
    multiple_indices,
    point_label,
    read_timeline,
)

LOSSES = ("train_loss", "valid_loss")  # the recorded scores the loss plot draws
SCORE_NAMES = {"train_loss": N_("train loss"), "valid_loss": N_("valid loss"), "valid_bleu": N_("valid BLEU")}


def score_name(key: str) -> str:
    """A recorded score's name in the language in force (one attn-mt does not name: its key)."""
    return _(SCORE_NAMES[key]) if key in SCORE_NAMES else key


@lru_cache(maxsize=8)
def _read(path: Path, modified_ns: int, size: int) -> RecordedTimeline | None:
    """read_timeline, kept while the file's time and size stay the same."""
    return read_timeline(path)


def run_timeline(run: LoadedRun) -> RecordedTimeline:
    """The timeline of a run directory the lab opened, or a LabError saying how to record one."""
    path = None if run.source is None else Path(run.source) / "timeline.jsonl"
    if path is None or not path.is_file():
        raise LabError(
            _(
                "this run has no timeline.jsonl: train it with train.timeline: true (on in the shipped "
                "configs)"
            )
        )
    status = path.stat()
    timeline = _read(path, status.st_mtime_ns, status.st_size)
    if timeline is None or not timeline.points:
        raise LabError(_("this run's timeline.jsonl holds no point yet"))
    return timeline


def heatmap(timeline: RecordedTimeline, point: TimelinePoint, probe: int, name: str) -> dict[str, Any]:
    """The probe's cross-attention at `point`: (T, S), or (h, T, S) of a Transformer's last layer."""
    weights = point.maps[probe]["cross"]
    if weights.ndim == 4:
        weights = weights[-1]  # (h, T, S) of the last layer
    axes = ["h", "T", "S"] if weights.ndim == 3 else ["T", "S"]
    return shown(
        name,
        torch.from_numpy(weights.astype(np.float64)),
        axes,
        rows=point.output_tokens[probe],
        columns=timeline.source_tokens[probe],
        scale="weights",
        tokens=True,
    )


def loss_plot(timeline: RecordedTimeline, index: int) -> dict[str, Any]:
    """The losses recorded at the points, with the chosen one marked."""
    series = []
    for name in LOSSES:
        kept = [(p.step, p.scores[name]) for p in timeline.points if name in p.scores]
        if kept:
            series.append((score_name(name), [step for step, _v in kept], [value for _s, value in kept]))
    chosen = timeline.points[index]
    marker = [(chosen.step, chosen.scores[name]) for name in LOSSES if name in chosen.scores]
    here = _("this point")
    if marker:
        series.append((here, [step for step, _v in marker], [value for _s, value in marker]))
    return plot(_("loss at the recorded points"), _("step"), _("loss"), series, points=(here,))


def attention_at(point: TimelinePoint) -> str:
    """The name of the heatmap of a recorded point, in the language in force."""
    return _("attention at {point}").format(point=point_label(point))


def opened_point(timeline: RecordedTimeline, run: LoadedRun) -> int | None:
    """The index of the recorded point at the step of the checkpoint the lab opened, if one was recorded."""
    return next((k for k, p in enumerate(timeline.points) if p.step == run.step), None)


def checkpoint_note(timeline: RecordedTimeline, run: LoadedRun) -> str:
    """How the heatmaps were recorded, which weights the last point shows (those at the end of training,
    last.pt's) beside the checkpoint the lab opened for its other panels, and the point recorded at that
    checkpoint's step: one message per case, so each language writes it as whole sentences."""
    final = timeline.points[-1]
    opened = opened_point(timeline, run)
    if run.step == final.step:
        note = _(
            "The heatmaps were recorded during training (greedy decoding of the probe at each point). The "
            "last point is the model as training left it, the weights last.pt holds (step {last}). "
            "The lab opened {checkpoint} (step {step}), which every other panel runs: the same step as the "
            "last point."
        )
    elif opened is None:
        note = _(
            "The heatmaps were recorded during training (greedy decoding of the probe at each point). The "
            "last point is the model as training left it, the weights last.pt holds (step {last}). "
            "The lab opened {checkpoint} (step {step}), which every other panel runs: no point was recorded "
            "at its step."
        )
    else:
        note = _(
            "The heatmaps were recorded during training (greedy decoding of the probe at each point). The "
            "last point is the model as training left it, the weights last.pt holds (step {last}). "
            "The lab opened {checkpoint} (step {step}), which every other panel runs: point {point} was "
            "recorded at its step, marked on the loss plot."
        )
    return note.format(last=final.step, checkpoint=run.checkpoint.name, step=run.step, point=opened)


def timeline_panel(runs: dict[str, LoadedRun], state: dict[str, Any]) -> dict[str, Any]:
    """One point of a run's timeline for one probe, the loss curve marked there, and the small multiples."""
    if not runs:
        raise LabError(
            _("no run: start the lab as `attn-mt lab RUN_DIR` with a run that recorded a timeline")
        )
    name = choice(state, "run", next(iter(runs)), tuple(runs))
    run = runs[name]
    timeline = run_timeline(run)
    probe = whole(state, "probe", 0, 0, len(timeline.probes) - 1)
    last = len(timeline.points) - 1
    index = whole(state, "point", last, 0, 10**9)
    index = min(index, last)  # a slider left past the end of a shorter timeline shows its last point
    point = timeline.points[index]
    entropy = float(np.mean(attention_entropy(point.maps[probe]["cross"])))
    sources = len(timeline.source_tokens[probe])
    uniform = math.log(sources)
    scores = ", ".join(f"{score_name(key)} {number(value, '.4f')}" for key, value in point.scores.items())
    texts = {
        "where": _("point {index} of {last}: {point}, {seconds} s trained; {scores}").format(
            index=index,
            last=last,
            point=point_label(point),
            seconds=number(point.elapsed_s, ".1f"),
            scores=scores or _("no loss yet"),
        ),
        "translation": f"{timeline.probes[probe]} → {point.outputs[probe]}",
        "checkpoint": checkpoint_text(name, run),
    }
    tensors = [heatmap(timeline, point, probe, attention_at(point))]
    for k in multiple_indices(len(timeline.points)):
        multiple = _("small multiple: {point}").format(point=point_label(timeline.points[k]))
        tensors.append(heatmap(timeline, timeline.points[k], probe, multiple))
    notes = [
        ngettext(
            "Mean entropy of the attention rows here: {entropy} nats; uniform weights over the {count} "
            "source token would give ln {count} = {uniform}.",
            "Mean entropy of the attention rows here: {entropy} nats; uniform weights over the {count} "
            "source tokens would give ln {count} = {uniform}.",
            sources,
        ).format(entropy=number(entropy, ".3f"), count=sources, uniform=number(uniform, ".3f")),
        checkpoint_note(timeline, run),
    ]
    losses_plot = loss_plot(timeline, index)
    opened = opened_point(timeline, run)
    at = None if opened is None else timeline.points[opened]
    losses = [] if at is None else [key for key in LOSSES if key in at.scores]  # its losses, not its BLEU
    if at is not None and losses:
        losses_plot["series"].append(
            {
                "label": _("{checkpoint}, opened").format(checkpoint=run.checkpoint.name),
                "x": [float(at.step)] * len(losses),
                "y": [float(at.scores[key]) for key in losses],
                "points": True,
            }
        )
    return answer(
        tensors,
        [code(Timeline.record), code(read_timeline)],
        notes,
        [losses_plot],
        text=texts,
        points=len(timeline.points),
        probes=len(timeline.probes),
    )
