"""The report's "watch it learn" section: small multiples of a run's timeline (training/timeline.py).

For each probe sentence, the encoder-decoder attention at the first recorded point, 10%, 50% and the
last, side by side, as the lab's panel shows them: the Bahdanau decoder's weights, or the mean over
the heads of a Transformer's last layer. Nothing is shown for a run that recorded no timeline, and a
line saying what is wrong for a damaged one.
"""

from __future__ import annotations

import html
from pathlib import Path

import numpy as np

from attn_mt.decoding.heatmaps import CMAP, label_axis, new_figure, panel_inches, png_bytes
from attn_mt.i18n import _
from attn_mt.report.figures import png_data_uri
from attn_mt.run.run_dir import RunPaths
from attn_mt.training.timeline import (
    RecordedTimeline,
    TimelineError,
    multiple_indices,
    point_label,
    read_timeline,
)


def probe_figure_uri(timeline: RecordedTimeline, probe: int) -> str:
    """One probe's small multiples as a PNG data URI: one panel per chosen point, tokens on the axes."""
    chosen = [timeline.points[k] for k in multiple_indices(len(timeline.points))]
    sources = timeline.source_tokens[probe]
    width = max(panel_inches(sources, len(sources)), 1.6)
    rows = max(len(point.output_tokens[probe]) for point in chosen)
    fig = new_figure(width * len(chosen) + 0.6, panel_inches(None, rows) + 0.8)
    axes = fig.subplots(1, len(chosen), squeeze=False)[0]
    for ax, point in zip(axes, chosen, strict=True):
        weights = point.maps[probe]["cross"]
        if weights.ndim == 4:
            weights = weights[-1].mean(axis=0)  # (T, S): the last layer's heads averaged
        ax.imshow(np.asarray(weights), cmap=CMAP, vmin=0.0, vmax=1.0, aspect="auto", interpolation="nearest")
        label_axis(ax.xaxis, sources, rotation=90)
        label_axis(ax.yaxis, point.output_tokens[probe])
        ax.set_title(point_label(point), fontsize="small")
    return png_data_uri(png_bytes(fig))


def timeline_section(root: Path, anchor: str) -> str:
    """The section's HTML ('' when the run has no timeline.jsonl)."""
    heading = html.escape(_("Watch it learn"))
    try:
        timeline = read_timeline(RunPaths(root).timeline)
    except TimelineError as exc:
        why = _("The timeline cannot be shown: {reason}").format(reason=exc)
        return f'<section id="{anchor}">\n<h3>{heading}</h3>\n<p>{html.escape(why)}</p>\n</section>\n'
    if timeline is None or not timeline.points:
        return ""
    if timeline.model == "transformer":
        what = _("the mean over the last layer's heads")
    else:
        what = _("the decoder's weights")
    text = _(
        "Encoder-decoder attention of each probe sentence ({what}) at the first recorded point, 10%, 50% "
        'and the last of {count} points ({file}; the lab\'s panel "Watch it learn" plays every point).'
    )
    text = html.escape(text).format(
        what=html.escape(what), count=len(timeline.points), file="<code>timeline.jsonl</code>"
    )
    parts = [f'<section id="{anchor}">\n<h3>{heading}</h3>\n', f"<p>{text}</p>\n"]
    for probe, sentence in enumerate(timeline.probes):
        uri = probe_figure_uri(timeline, probe)
        caption = f"{sentence} → {timeline.points[-1].outputs[probe]}"
        alt = html.escape(_("attention of {sentence} as training went on").format(sentence=sentence))
        parts.append(
            f'<figure class="timeline"><img src="{uri}" alt="{alt}">'
            f"<figcaption>{html.escape(caption)}</figcaption></figure>\n"
        )
    return "".join(parts) + "</section>\n"
