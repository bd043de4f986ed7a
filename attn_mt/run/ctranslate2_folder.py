"""An exported CTranslate2 folder (`attn-mt export RUN OUT --format ctranslate2`): its files and checks.

The folder holds what CTranslate2 reads (`model.bin`, `config.json`, the vocabulary JSON) and what
attn-mt needs around it, laid out as in a run directory so the same loaders read it:
    attn_mt_ctranslate2.json   format stamp, attn-mt and ctranslate2 versions, the run's resolved
                               config (its decode and data sections), checkpoint, step, weight type
    src_vocab.json, tgt_vocab.json (+ src_vocab.model, tgt_vocab.model for sentencepiece runs)
    data_report.json           the run's data report (eval checks a corpus against its training split)
`ctranslate2` is imported only when a folder is written or opened (the `ctranslate2` extra);
run/open_ctranslate2.py opens a folder.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from attn_mt.errors import UserError

FOLDER_FORMAT = "attn-mt-ctranslate2"
FOLDER_FORMAT_VERSION = 1
META_FILE = "attn_mt_ctranslate2.json"
MODEL_FILE = "model.bin"  # CTranslate2's weights
INSTALL_HINT = "pip install 'attn-mt[ctranslate2]'"
WEIGHT_TYPES = ("float32", "int8", "int8_float32", "int16", "float16")  # what --quantize may ask for


def import_ctranslate2() -> Any:
    """The ctranslate2 module, or a UserError naming the extra that installs it."""
    try:
        import ctranslate2
    except ImportError:
        raise UserError(f"CTranslate2 is not installed: {INSTALL_HINT}") from None
    return ctranslate2


@dataclass
class Ctranslate2Model:
    """An exported folder opened with `ctranslate2.Translator`, in place of a torch model."""

    folder: Path
    translator: Any  # ctranslate2.Translator
    weights: str  # the weight type stored at export: float32, int8 (7 or 8 bits), int16, float16
    compute_type: str  # what ctranslate2 computes in (float32 for 8-bit int8 weights on a CPU without VNNI)
    int8_bits: int | None  # 7 when int8 weights were kept within +-63, 8 otherwise; None when not int8
    num_parameters: int
    device: str  # cpu or cuda
    device_index: int  # which GPU (0 on the CPU)
    workers: int  # translators working in parallel (ctranslate2's inter_threads)
    threads_per_worker: int  # OpenMP threads of each (intra_threads)
    attention_layer: int  # the decoder layer whose cross-attention ctranslate2 returns (0-based)


def read_meta(folder: Path) -> dict[str, Any]:
    """The folder's attn-mt JSON, refusing folders of other converters and newer attn-mt formats."""
    path = folder / META_FILE
    if not path.is_file():
        raise UserError(
            f"{folder} holds a CTranslate2 model that `attn-mt export --format ctranslate2` did "
            f"not write (no {META_FILE}): attn-mt needs the run's config and vocabularies"
        )
    try:
        meta = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise UserError(f"{path} is damaged: {exc}") from None
    if (
        not isinstance(meta, dict)
        or meta.get("format") != FOLDER_FORMAT
        or not isinstance(meta.get("config"), dict)
    ):
        raise UserError(f"{path} is not an attn-mt CTranslate2 export description")
    version = meta.get("format_version")
    if not isinstance(version, int) or version > FOLDER_FORMAT_VERSION:
        raise UserError(
            f"{folder} was exported by a newer attn-mt (folder format {version}, this attn-mt "
            f"reads {FOLDER_FORMAT_VERSION}): update attn-mt or export the run again"
        )
    return meta


def _major(version: str) -> str:
    """The major part of a version string ('4' of '4.8.5')."""
    return re.split(r"[.+]", str(version), maxsplit=1)[0]


def check_ctranslate2_version(folder: Path, made_with: str, installed: str) -> None:
    """Refuse a folder written by another major version of ctranslate2 than the one installed."""
    if _major(made_with) != _major(installed):
        raise UserError(
            f"{folder} was exported with ctranslate2 {made_with}, but ctranslate2 {installed} is "
            f"installed: install ctranslate2 {_major(made_with)}.x or export the run again"
        )
