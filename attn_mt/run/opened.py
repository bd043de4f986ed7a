"""What opening a model gives back, whatever its kind, and the `--device` names every opener reads.

Torch-free: a CTranslate2 folder is opened and translated without importing torch.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING

from attn_mt.config import Config, bounded_decode
from attn_mt.data.vocab import Vocab
from attn_mt.errors import UserError

if TYPE_CHECKING:
    from attn_mt.models.base import EncoderDecoder
    from attn_mt.run.ctranslate2_folder import Ctranslate2Model

log = logging.getLogger("attn_mt")

DEVICE_TYPES = ("auto", "cpu", "cuda", "mps")
DEVICE_CHOICES = "auto, cpu, cuda, cuda:N (the GPU numbered N), mps"


class ModelKind(Enum):
    """The kinds of model translate, eval, serve and `attn_mt.load` open (run/open.py tells them apart)."""

    RUN_DIR = "run directory"
    EXPORT_FILE = "export file"  # `attn-mt export RUN MODEL.pt`
    CTRANSLATE2_FOLDER = "CTranslate2 folder"  # `attn-mt export RUN OUT --format ctranslate2`

    @property
    def engine(self) -> str:
        """The engine that translates this kind: torch, or ctranslate2."""
        return "ctranslate2" if self is ModelKind.CTRANSLATE2_FOLDER else "torch"

    @property
    def keeps_settings(self) -> bool:
        """Whether this kind keeps its settings in a config.yaml a command may rewrite (a run directory)."""
        return self is ModelKind.RUN_DIR


@dataclass
class LoadedRun:
    """A trained model with its config and vocabularies, opened on a device, ready to translate."""

    config: Config
    src_vocab: Vocab
    tgt_vocab: Vocab
    model: EncoderDecoder | Ctranslate2Model  # a CTranslate2 folder's model (run/ctranslate2_folder.py)
    checkpoint: Path
    step: int
    kind: ModelKind = ModelKind.RUN_DIR
    device: str = "cpu"  # where the model runs: cpu, cuda, cuda:N or mps
    source: Path | None = None  # what was opened: the run directory, export file or CTranslate2 folder
    members: list[Path] | None = None  # an ensemble's models (decoding/ensembles.py), `source` the first

    def eval_dir(self, split: str) -> Path:
        """Where `attn-mt eval --split SPLIT` writes: eval/SPLIT in the folder, or beside an export file;
        an ensemble writes SPLIT-ensemble there, beside its first member's own."""
        if self.source is None:
            raise ValueError("this LoadedRun was not opened from a path, so it has no eval folder")
        name = f"{split}-ensemble" if self.members else split
        if self.kind is ModelKind.EXPORT_FILE:
            return Path(f"{self.source}.eval") / name
        return self.source / "eval" / name


def parse_device(name: str) -> tuple[str, int | None]:
    """`--device name` as (auto, cpu, cuda or mps; the GPU index of `cuda:N`, else None)."""
    kind, colon, index = name.partition(":")
    if kind in DEVICE_TYPES and not colon:
        return kind, None
    if kind == "cuda" and index.isdigit():
        return kind, int(index)
    raise UserError(f"--device {name!r}: expected one of {DEVICE_CHOICES}")


def within_bounds(cfg: Config, where: str | Path) -> Config:
    """A saved model's config with its decode settings inside attn_mt/limits.py's bounds (a run saved
    before the bounds existed), a warning naming `where` for each one brought in."""
    bounded, notes = bounded_decode(cfg)
    for note in notes:
        log.warning("%s: %s", where, note)
    return bounded
