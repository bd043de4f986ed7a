"""The training timeline (train.timeline): how a few probe sentences translate and attend as a run learns.

Shapes: L decoder layers, h heads, S source positions (with <eos>), T output positions (with <eos>).
At the untrained start and at every `train.timeline_every`-th validation (each epoch in book mode,
every `train.valid_every` steps otherwise) the trainer records, for each probe, the greedy output and
its attention maps: the Bahdanau decoder's weights (T, S), or the Transformer's cross-attention of
every layer and head (L, h, T, S) and the last layer's decoder self-attention (h, T, T); with the
losses of that point. The lines go to `timeline.jsonl` in the run directory: a header line (the
probes and their source tokens), then one line per point, each appended with one write and flushed
to disk, so a crash loses at most the line being written (readers skip a torn last line, even one cut
inside a character, and a resumed run drops it and the points after its checkpoint, as metrics.jsonl).
A file that is not a timeline (points without the header line, points holding another number of
probes than the header's) raises `TimelineError`, which names what is wrong. Weights are stored as
integers in thousandths (`scale`). Recording happens between steps, in the trainer's hook time, which is left
out of the training clock.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from attn_mt.config import Config
from attn_mt.data.dataset import NMTData
from attn_mt.decoding.translator import Translator
from attn_mt.errors import UserError
from attn_mt.evaluation.scores import book_pairs
from attn_mt.i18n import _
from attn_mt.models.base import EncoderDecoder
from attn_mt.run.run_dir import parse_metrics, read_jsonl_text
from attn_mt.training.validation import spread_subset

SCALE = 1000  # weights are stored as round(weight * SCALE)
DEFAULT_PROBES = 4
MULTIPLES = (0.0, 0.1, 0.5, 1.0)  # where the small multiples sit, as fractions of the timeline


def probe_sentences(cfg: Config, data: NMTData) -> list[str]:
    """train.timeline_probes, else the book's four sentences (book mode) or four spread over valid."""
    if cfg.train.timeline_probes:
        return list(cfg.train.timeline_probes)
    if cfg.data.mode == "book" or not data.valid:
        return [src for src, _ in book_pairs(cfg.data.tokenizer, cfg.data.direction)]
    return [example.src for example in spread_subset(data.valid, DEFAULT_PROBES)]


def as_thousandths(weights: np.ndarray) -> list[Any]:
    """Weights as nested lists of integers in thousandths."""
    return np.rint(weights * SCALE).astype(np.int32).tolist()


def kept_maps(maps: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The maps a point keeps: the cross-attention, and the last decoder layer's self-attention."""
    kept = {"cross": maps["cross"]}
    if "decoder_self" in maps:
        kept["decoder_self"] = maps["decoder_self"][-1]  # (h, T, T) of the last layer
    return kept


class Timeline:
    """Writes the probes' outputs and attention at the recorded points of one run (rank 0 only)."""

    def __init__(self, model: EncoderDecoder, data: NMTData, cfg: Config, device: torch.device, path: Path):
        self.model, self.path, self.cfg = model, path, cfg
        self.probes = probe_sentences(cfg, data)
        self.translator = Translator(model, data.src_vocab, data.tgt_vocab, cfg, device)

    def due(self, step: int, epoch: int) -> bool:
        """Whether the validation at `step` (after `epoch` whole epochs) is one to record."""
        every, valid_every = self.cfg.train.timeline_every, self.cfg.train.valid_every
        number = step // valid_every if valid_every else epoch
        return number % every == 0

    def record(
        self, step: int, epoch: int, elapsed_s: float, scores: dict[str, float], final: bool = False
    ) -> None:
        """Translate the probes greedily with the model as it is now and append the point."""
        was_training = self.model.training
        self.model.eval()
        try:
            translations = self.translator.translate(self.probes, beam_size=1)
            attentions = [self.translator.attention(translation) for translation in translations]
        finally:
            self.model.train(was_training)
        lines = []
        if not self.path.exists():
            header = {
                "header": True,
                "model": self.cfg.model.type,
                "scale": SCALE,
                "probes": self.probes,
                "source_tokens": [attention.source_tokens for attention in attentions],
            }
            lines.append(header)
        point: dict[str, Any] = {"step": step, "epoch": epoch, "elapsed_s": round(elapsed_s, 2)}
        point["scores"] = {name: round(value, 5) for name, value in scores.items()}
        if final:
            point["final"] = True
        point["probes"] = [
            {
                "output": translation.text,
                "output_tokens": attention.output_tokens,
                "maps": {name: as_thousandths(w) for name, w in kept_maps(attention.maps).items()},
            }
            for translation, attention in zip(translations, attentions, strict=True)
        ]
        lines.append(point)
        append_lines(self.path, lines)


def append_lines(path: Path, records: list[dict[str, Any]]) -> None:
    """Append JSON lines with one write, flushed to the disk before returning."""
    text = "".join(json.dumps(record, separators=(",", ":"), ensure_ascii=False) + "\n" for record in records)
    with path.open("a", encoding="utf-8") as handle:
        handle.write(text)
        handle.flush()
        os.fsync(handle.fileno())


@dataclass
class TimelinePoint:
    """One recorded point, its weights back in [0, 1]."""

    step: int
    epoch: int
    elapsed_s: float
    scores: dict[str, float]
    outputs: list[str]
    output_tokens: list[list[str]]
    maps: list[dict[str, np.ndarray]]  # per probe: map name -> weights


@dataclass
class RecordedTimeline:
    """A run's timeline.jsonl, read: its probes and points in order."""

    model: str
    probes: list[str]
    source_tokens: list[list[str]]
    points: list[TimelinePoint]


class TimelineError(UserError):
    """A timeline.jsonl that holds points but cannot be read as a timeline (a damaged file)."""


def read_timeline(path: Path) -> RecordedTimeline | None:
    """The timeline of `path` (None when it holds no line yet); a torn last line is skipped, and a
    file that is not a timeline raises TimelineError."""
    if not path.exists():
        return None
    records, _ = parse_metrics(read_jsonl_text(path))
    if not records:
        return None
    header = next((record for record in records if record.get("header")), None)
    found = [record for record in records if not record.get("header")]
    if header is None:
        raise TimelineError(
            f"{path} is damaged: it holds {len(found)} points but no header line (the probes and their "
            "source tokens); move it away, and a resumed run records a new timeline from there"
        )
    try:
        scale = float(header["scale"])
        probes = len(header["probes"])
        points = [timeline_point(record, scale, probes) for record in found]
        return RecordedTimeline(header["model"], header["probes"], header["source_tokens"], points)
    except TimelineError as exc:
        raise TimelineError(f"{path}: {exc}") from None
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise TimelineError(f"{path} is damaged: a line is not a timeline record ({exc!r})") from None


def timeline_point(record: dict[str, Any], scale: float, probes: int) -> TimelinePoint:
    """One point line, its weights back in [0, 1]; TimelineError when it holds other than `probes`
    probes (the run was resumed with other train.timeline_probes, before that was refused)."""
    if len(record["probes"]) != probes:
        raise TimelineError(
            f"the point at step {record['step']} holds {len(record['probes'])} probes, the header "
            f"{probes}: the run was resumed with other train.timeline_probes; move the file away (a "
            "resumed run then records a new timeline)"
        )
    return TimelinePoint(
        record["step"],
        record["epoch"],
        record["elapsed_s"],
        record["scores"],
        [probe["output"] for probe in record["probes"]],
        [probe["output_tokens"] for probe in record["probes"]],
        [
            {name: np.asarray(w, dtype=np.float32) / scale for name, w in probe["maps"].items()}
            for probe in record["probes"]
        ],
    )


def multiple_indices(count: int) -> list[int]:
    """The points of the small multiples of `count` points: first, 10%, 50% and last, each once."""
    return sorted({round(fraction * (count - 1)) for fraction in MULTIPLES})


def point_label(point: TimelinePoint) -> str:
    """`epoch E, step S` (or `before training`) for a caption, in the language in force."""
    if point.step == 0:
        return _("before training")
    return _("epoch {epoch}, step {step}").format(epoch=point.epoch, step=point.step)
