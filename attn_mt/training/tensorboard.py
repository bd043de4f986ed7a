"""TensorBoard event files of a run (train.tensorboard: true), in RUN/tensorboard/.

Every number the trainer appends to metrics.jsonl is also written as a scalar at its step (tags in
`TAGS`: train/loss, train/lr, train/target_tokens_per_s, train/grad_norm, valid/loss, valid/bleu,
...). At each validation a few sample translations go in as a text table and the encoder-decoder
attention of one fixed validation sentence as an image (the heatmap of `evaluation/plots.py`).

A resumed run opens the writer with `purge_step` just past the checkpoint's step, so readers drop
what an earlier session wrote after it (work lost to a crash). When that session ended with a final
validation at the checkpoint's step (one the resumed run does not repeat, and metrics.jsonl drops
on resume), the purge starts at that step instead and the records a resume keeps there are written
again. Either way the curves continue without a duplicated or missing step and equal metrics.jsonl.

Writing needs the `tensorboard` package (`pip install 'attn-mt[tensorboard]'`), which
torch.utils.tensorboard uses; `require_tensorboard` checks for it before a run starts.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from attn_mt.data.splits import EvalExample
from attn_mt.decoding.attention import TITLES, SentenceAttention
from attn_mt.decoding.translator import Translator
from attn_mt.errors import UserError
from attn_mt.evaluation.plots import attention_figure
from attn_mt.run.run_dir import RunPaths, read_metrics

INSTALL = "pip install 'attn-mt[tensorboard]'"
FOLDER = "tensorboard"  # inside the run directory
TAGS = {  # metrics.jsonl key -> TensorBoard tag; other numeric keys go under train/
    "loss": "train/loss",
    "epoch_loss": "train/epoch_loss",
    "train_loss": "train/loss_at_validation",
    "lr": "train/lr",
    "tokens_per_s": "train/target_tokens_per_s",
    "grad_norm": "train/grad_norm",
    "valid_loss": "valid/loss",
    "valid_bleu": "valid/bleu",
}
NOT_SCALARS = {"step", "epoch", "elapsed_s", "final"}  # position and flags, not curves
SAMPLES_TAG, ATTENTION_TAG = "valid/samples", "valid/attention"


@dataclass(frozen=True)
class Sample:
    """One validation sentence, the model's translation and its first reference."""

    source: str
    output: str
    reference: str


def require_tensorboard() -> None:
    """Fail with a UserError naming the install command when the tensorboard package is missing."""
    try:
        importlib.import_module("tensorboard")
        importlib.import_module("torch.utils.tensorboard")
    except ImportError:
        raise UserError(f"train.tensorboard: true needs the tensorboard package: {INSTALL}") from None


def tag_of(key: str) -> str:
    """The TensorBoard tag of a metrics.jsonl key."""
    return TAGS.get(key, f"train/{key}")


class TensorBoardLog:
    """Writes one run's scalars, sample translations and attention images as TensorBoard events."""

    def __init__(
        self, folder: Path, purge_step: int | None = None, rewrite: Sequence[Mapping[str, Any]] = ()
    ):
        """Open `folder`; readers drop events from `purge_step` on; `rewrite` records are written first."""
        require_tensorboard()
        from torch.utils.tensorboard import SummaryWriter

        self.folder = Path(folder)
        self.writer = SummaryWriter(log_dir=str(self.folder), purge_step=purge_step)
        for record in rewrite:
            self.scalars(int(record["step"]), record)

    @classmethod
    def for_run(cls, paths: RunPaths, resume_step: int | None = None) -> TensorBoardLog:
        """The writer of the run in `paths`; on resume, call it before metrics.jsonl is truncated."""
        if resume_step is None:
            return cls(paths.root / FOLDER)
        at_step = [r for r in read_metrics(paths.metrics) if r.get("step") == resume_step]
        if not any(r.get("final") for r in at_step):
            return cls(paths.root / FOLDER, resume_step + 1)
        return cls(paths.root / FOLDER, resume_step, [r for r in at_step if not r.get("final")])

    def scalars(self, step: int, values: Mapping[str, Any]) -> None:
        """Every number of one metrics.jsonl record (its step, epoch, time and flags left out)."""
        for key, value in values.items():
            if key in NOT_SCALARS or isinstance(value, bool) or not isinstance(value, (int, float)):
                continue
            self.writer.add_scalar(tag_of(key), float(value), step)

    def validation(self, step: int, samples: Sequence[Sample], attention: SentenceAttention | None) -> None:
        """The sample translations as a table and the cross-attention heatmap as an image."""
        if samples:
            self.writer.add_text(SAMPLES_TAG, samples_table(samples), step)
        if attention is not None and "cross" in attention.maps:
            rows, cols = attention.labels("cross")
            image = figure_pixels(attention_figure(attention.maps["cross"], rows, cols, TITLES["cross"]))
            self.writer.add_image(ATTENTION_TAG, image, step, dataformats="HWC")
        self.writer.flush()

    def flush(self) -> None:
        """Write pending events to disk (TensorBoard shows them on its next poll)."""
        self.writer.flush()

    def close(self) -> None:
        """Flush and close the event file."""
        self.writer.close()


def samples_table(samples: Sequence[Sample]) -> str:
    """A Markdown table (TensorBoard renders text as Markdown) of source, output and reference."""

    def cell(text: str) -> str:
        return text.replace("|", "\\|").replace("\n", " ") or " "

    lines = ["| source | output | reference |", "|---|---|---|"]
    lines += [f"| {cell(s.source)} | {cell(s.output)} | {cell(s.reference)} |" for s in samples]
    return "\n".join(lines)


def figure_pixels(fig: Any) -> np.ndarray:
    """The RGB pixels (H, W, 3) of a matplotlib Figure on an Agg canvas."""
    fig.canvas.draw()
    return np.asarray(fig.canvas.buffer_rgba())[..., :3].copy()  # (H, W, 3) uint8


def sample_translations(
    translator: Translator, examples: Sequence[EvalExample], count: int = 3
) -> tuple[list[Sample], SentenceAttention | None]:
    """Greedy translations of the first `count` examples and the attention of the first one.

    The Validator's translator and examples give the same sentences at every validation. Decoding
    is greedy in eval mode, which draws no random numbers, so training continues unchanged.
    """
    chosen = list(examples[:count])
    if not chosen:
        return [], None
    outputs = translator.translate([ex.src for ex in chosen], beam_size=1)
    samples = [
        Sample(ex.src, out.text, ex.refs[0] if ex.refs else "")
        for ex, out in zip(chosen, outputs, strict=True)
    ]
    attention = translator.attention(outputs[0]) if outputs[0].hypotheses else None
    return samples, attention
