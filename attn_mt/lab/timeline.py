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
from attn_mt.lab.engines import checkpoint_text
from attn_mt.lab.inputs import LabError, choice, whole
from attn_mt.lab.shown import answer, code, plot, shown
from attn_mt.run.opened import LoadedRun
from attn_mt.training.timeline import (
    RecordedTimeline,
    Timeline,
    TimelinePoint,
    multiple_indices,
    point_label,
    read_timeline,
)


@lru_cache(maxsize=8)
def _read(path: Path, modified_ns: int, size: int) -> RecordedTimeline | None:
    """read_timeline, kept while the file's time and size stay the same."""
    return read_timeline(path)


def run_timeline(run: LoadedRun) -> RecordedTimeline:
    """The timeline of a run directory the lab opened, or a LabError saying how to record one."""
    path = None if run.source is None else Path(run.source) / "timeline.jsonl"
    if path is None or not path.is_file():
        raise LabError(
            "this run has no timeline.jsonl: train it with train.timeline: true (on in the shipped configs)"
        )
    status = path.stat()
    timeline = _read(path, status.st_mtime_ns, status.st_size)
    if timeline is None or not timeline.points:
        raise LabError("this run's timeline.jsonl holds no point yet")
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
    )


def loss_plot(timeline: RecordedTimeline, index: int) -> dict[str, Any]:
    """The losses recorded at the points, with the chosen one marked."""
    series = []
    for name in ("train_loss", "valid_loss"):
        kept = [(p.step, p.scores[name]) for p in timeline.points if name in p.scores]
        if kept:
            series.append((name, [step for step, _ in kept], [value for _, value in kept]))
    chosen = timeline.points[index]
    marker = [
        (chosen.step, chosen.scores[name]) for name in ("train_loss", "valid_loss") if name in chosen.scores
    ]
    if marker:
        series.append(("this point", [step for step, _ in marker], [value for _, value in marker]))
    return plot("loss at the recorded points", "step", "loss", series, points=("this point",))


def opened_point(timeline: RecordedTimeline, run: LoadedRun) -> int | None:
    """The index of the recorded point at the step of the checkpoint the lab opened, if one was recorded."""
    return next((k for k, p in enumerate(timeline.points) if p.step == run.step), None)


def checkpoint_note(timeline: RecordedTimeline, run: LoadedRun) -> str:
    """Which weights the last point shows (those at the end of training, last.pt's) beside the checkpoint
    the lab opened for its other panels, and the point recorded at that checkpoint's step."""
    final = timeline.points[-1]
    said = (
        f"The last point is the model as training left it, the weights last.pt holds (step {final.step}). "
        f"The lab opened {run.checkpoint.name} (step {run.step}), which every other panel runs"
    )
    if run.step == final.step:
        return said + ": the same step as the last point."
    opened = opened_point(timeline, run)
    if opened is None:
        return said + ": no point was recorded at its step."
    return said + f": point {opened} was recorded at its step, marked on the loss plot."


def timeline_panel(runs: dict[str, LoadedRun], state: dict[str, Any]) -> dict[str, Any]:
    """One point of a run's timeline for one probe, the loss curve marked there, and the small multiples."""
    if not runs:
        raise LabError("no run: start the lab as `attn-mt lab RUN_DIR` with a run that recorded a timeline")
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
    losses = ", ".join(f"{key} {value:.4f}" for key, value in point.scores.items()) or "no loss yet"
    texts = {
        "where": f"point {index} of {last}: {point_label(point)}, {point.elapsed_s:.1f} s trained; {losses}",
        "translation": f"{timeline.probes[probe]} → {point.outputs[probe]}",
        "checkpoint": checkpoint_text(name, run),
    }
    tensors = [heatmap(timeline, point, probe, f"attention at {point_label(point)}")]
    for k in multiple_indices(len(timeline.points)):
        tensors.append(
            heatmap(timeline, timeline.points[k], probe, f"small multiple: {point_label(timeline.points[k])}")
        )
    notes = [
        f"Mean entropy of the attention rows here: {entropy:.3f} nats; uniform weights over the "
        f"{sources} source tokens would give ln {sources} = {uniform:.3f}.",
        "The heatmaps were recorded during training (greedy decoding of the probe at each point). "
        + checkpoint_note(timeline, run),
    ]
    losses_plot = loss_plot(timeline, index)
    opened = opened_point(timeline, run)
    if opened is not None and timeline.points[opened].scores:
        at = timeline.points[opened]
        losses_plot["series"].append(
            {
                "label": f"{run.checkpoint.name}, opened",
                "x": [float(at.step)] * len(at.scores),
                "y": [float(value) for value in at.scores.values()],
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
