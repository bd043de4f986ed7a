"""An exported CTranslate2 folder (`attn-mt export RUN OUT --format ctranslate2`): detect, check, open.

The folder holds what CTranslate2 reads (`model.bin`, `config.json`, the vocabulary JSON) and what
attn-mt needs around it, laid out as in a run directory so the same loaders read it:
    attn_mt_ctranslate2.json   format stamp, attn-mt and ctranslate2 versions, the run's resolved
                               config (its decode and data sections), checkpoint, step, weight type
    src_vocab.json, tgt_vocab.json (+ src_vocab.model, tgt_vocab.model for sentencepiece runs)
    data_report.json           the run's data report (eval checks a corpus against its training split)
`ctranslate2` is imported only when a folder is written or opened (the `ctranslate2` extra).
"""

from __future__ import annotations

import json
import logging
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from attn_mt.config import config_from_dict
from attn_mt.errors import UserError
from attn_mt.run.run_dir import LoadedRun, RunPaths, load_vocabs

FOLDER_FORMAT = "attn-mt-ctranslate2"
FOLDER_FORMAT_VERSION = 1
META_FILE = "attn_mt_ctranslate2.json"
MODEL_FILE = "model.bin"  # CTranslate2's weights
INSTALL_HINT = "pip install 'attn-mt[ctranslate2]'"
WEIGHT_TYPES = ("float32", "int8", "int8_float32", "int16", "float16")  # what --quantize may ask for
VNNI_FLAGS = ("avx512_vnni", "avx_vnni", "amx_int8")  # int8 dot products without 16-bit saturation
log = logging.getLogger("attn_mt")


def import_ctranslate2() -> Any:
    """The ctranslate2 module, or a UserError naming the extra that installs it."""
    try:
        import ctranslate2
    except ImportError:
        raise UserError(f"CTranslate2 is not installed: {INSTALL_HINT}") from None
    return ctranslate2


def cpu_flags() -> set[str]:
    """This CPU's feature flags from /proc/cpuinfo (empty where there is none)."""
    try:
        text = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return set()
    return {flag for line in text.splitlines() if line.startswith("flags") for flag in line.split()[2:]}


def cpu_has_vnni() -> bool:
    """Whether the CPU multiplies int8 with VNNI or AMX (no intermediate 16-bit sums that saturate)."""
    return bool(cpu_flags() & set(VNNI_FLAGS))


def ctranslate2_device(name: str) -> str:
    """The device `--device name` gives a CTranslate2 folder (auto: cuda if ctranslate2 has one; mps: cpu)."""
    if name not in ("auto", "cpu", "cuda", "mps"):  # run/device.py's choices, checked without torch
        raise UserError(f"--device {name!r}: expected one of auto, cpu, cuda, mps")
    if name == "auto":
        return "cuda" if import_ctranslate2().get_cuda_device_count() > 0 else "cpu"
    return "cpu" if name == "mps" else name


def cpu_threads() -> int:
    """CPU threads, without asking torch: $OMP_NUM_THREADS if set, else the cores this process may use."""
    value = os.environ.get("OMP_NUM_THREADS", "")
    if value.isdigit() and int(value) > 0:
        return int(value)
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def is_ctranslate2_folder(path: Path) -> bool:
    """Whether `path` is a folder holding a CTranslate2 model (attn-mt's or another converter's)."""
    path = Path(path)
    return path.is_dir() and ((path / META_FILE).is_file() or (path / MODEL_FILE).is_file())


@dataclass
class Ctranslate2Model:
    """An exported folder opened with `ctranslate2.Translator`, in place of a torch model."""

    folder: Path
    translator: Any  # ctranslate2.Translator
    weights: str  # the weight type stored at export: float32, int8 (7 or 8 bits), int16, float16
    compute_type: str  # what ctranslate2 computes in (float32 for 8-bit int8 weights on a CPU without VNNI)
    int8_bits: int | None  # 7 when int8 weights were kept within +-63, 8 otherwise; None when not int8
    num_parameters: int
    device: str
    workers: int  # translators working in parallel (ctranslate2's inter_threads)
    threads_per_worker: int  # OpenMP threads of each (intra_threads)
    attention_layer: int  # the decoder layer whose cross-attention ctranslate2 returns (0-based)


def _meta(folder: Path) -> dict[str, Any]:
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


def load_ctranslate2_folder(
    folder: Path, device: str = "cpu", threads: int = 1, quantize: str | None = None, checkpoint: str = "best"
) -> LoadedRun:
    """Open an exported folder: its config and vocabularies, and a `Ctranslate2Model` over `threads` cores.

    `device` is cpu or cuda (mps, which CTranslate2 lacks, runs on the CPU). On the CPU, `threads`
    single-thread workers decode batches side by side (measured faster than one translator with
    `threads` OpenMP threads, docs/shipping.md); on CUDA one worker runs.
    """
    folder = Path(folder)
    device = "cpu" if device == "mps" else device
    if checkpoint != "best":
        raise UserError(f"--checkpoint {checkpoint}: {folder} is a CTranslate2 folder, which holds one model")
    if quantize is not None:
        raise UserError(
            f"--quantize {quantize}: {folder} is a CTranslate2 folder, whose weight type was "
            "chosen at export; export the run again with `--format ctranslate2 --quantize TYPE`"
        )
    meta = _meta(folder)
    ctranslate2 = import_ctranslate2()
    made_with = str(meta.get("ctranslate2_version", "unknown"))
    check_ctranslate2_version(folder, made_with, ctranslate2.__version__)
    if device == "cuda" and ctranslate2.get_cuda_device_count() == 0:
        raise UserError("--device cuda: ctranslate2 sees no CUDA device (use --device cpu)")
    cfg = config_from_dict(meta["config"], f"config inside {folder / META_FILE}")
    src_vocab, tgt_vocab = load_vocabs(RunPaths(folder), cfg)
    if not (folder / MODEL_FILE).is_file():
        raise UserError(f"{folder} is incomplete: no {MODEL_FILE} (CTranslate2's weights)")
    weights = str(meta.get("weights", "float32"))
    int8_bits = meta.get("int8_bits")
    supported = ctranslate2.get_supported_compute_types(device)
    compute_type = weights
    if device == "cpu" and weights.startswith("int8") and int8_bits == 8 and not cpu_has_vnni():
        compute_type = "float32"
        log.warning(
            "%s holds 8-bit int8 weights, whose int8 products saturate on this CPU (it has no %s) "
            "and lose accuracy; running them in float32 instead (slower). Exported on this machine, "
            "int8 weights are kept within 7 bits and run in int8",
            folder,
            " or ".join(VNNI_FLAGS),
        )
    if compute_type not in supported:
        raise UserError(
            f"{folder} holds {weights} weights, which ctranslate2 cannot run on this {device} "
            f"(it runs {', '.join(sorted(supported))}); export the run again with one of those "
            "as --quantize"
        )
    workers, per_worker = (max(threads, 1), 1) if device == "cpu" else (1, max(threads, 1))
    try:
        translator = ctranslate2.Translator(
            str(folder),
            device=device,
            compute_type=compute_type,
            inter_threads=workers,
            intra_threads=per_worker,
        )
    except (RuntimeError, ValueError) as exc:
        raise UserError(f"ctranslate2 {ctranslate2.__version__} cannot open {folder}: {exc}") from None
    bits = int8_bits if isinstance(int8_bits, int) else None
    model = Ctranslate2Model(
        folder,
        translator,
        weights,
        compute_type,
        bits,
        int(meta.get("parameters", 0)),
        device,
        workers,
        per_worker,
        cfg.model.num_layers - 1,
    )
    return LoadedRun(cfg, src_vocab, tgt_vocab, model, folder / MODEL_FILE, int(meta.get("step", 0)))
