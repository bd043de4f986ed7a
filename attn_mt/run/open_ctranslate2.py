"""Open an exported CTranslate2 folder without torch: ctranslate2's device, this machine's cores, and
the compute type the device runs fastest.

Device: `auto` is cuda when ctranslate2 sees a GPU, else cpu; `mps` runs on the CPU (CTranslate2
has no MPS backend); `cuda:N` picks GPU N.
Threads: `machine.cpu_threads()` ($OMP_NUM_THREADS, else the cores this process may use). On the
CPU that many single-thread workers decode batches side by side (measured faster than one
translator with as many OpenMP threads, docs/shipping.md); on CUDA one worker runs.
Compute type: the stored weight type on the CPU, except 8-bit int8 weights on a CPU without VNNI,
whose int8 products saturate (run in float32); on CUDA the GPU's half-precision types (float32
and int16 weights in float16, int8 weights in int8_float16).
CUDA libraries: without torch nobody has loaded cuBLAS, which ctranslate2 loads on its first
translation; on CUDA the opener first loads CUDA 12's from NVIDIA's pip wheels where they are
installed (run/cuda_libraries.py), then translates one token, so a library still missing is a
clear error here instead of a traceback in the middle of a translation.
"""

from __future__ import annotations

import logging
import re
from pathlib import Path

from attn_mt.config import config_from_dict
from attn_mt.errors import UserError
from attn_mt.machine import VNNI_FLAGS, cpu_has_vnni, cpu_threads
from attn_mt.run.ctranslate2_folder import (
    META_FILE,
    MODEL_FILE,
    Ctranslate2Model,
    check_ctranslate2_version,
    import_ctranslate2,
    read_meta,
)
from attn_mt.run.cuda_libraries import preload_cuda12_libraries
from attn_mt.run.opened import LoadedRun, ModelKind, parse_device, within_bounds
from attn_mt.run.run_dir import RunPaths, load_vocabs

GPU_COMPUTE_TYPES = {  # stored weights -> what a GPU computes them in
    "float32": "float16",
    "float16": "float16",
    "int16": "float16",
    "int8": "int8_float16",
    "int8_float32": "int8_float16",
}
CUDA_LIBRARY = re.compile(r"lib(cublas|cublasLt|cudnn|cudart)[\w.]*")
log = logging.getLogger("attn_mt")


def ctranslate2_device(name: str, cuda_devices: int) -> tuple[str, int]:
    """(cpu or cuda, GPU index) for `--device name`, given how many CUDA devices ctranslate2 sees."""
    kind, index = parse_device(name)
    if kind == "auto":
        return ("cuda", 0) if cuda_devices > 0 else ("cpu", 0)
    if kind in ("cpu", "mps"):
        return "cpu", 0
    if cuda_devices == 0:
        raise UserError(f"--device {name}: ctranslate2 sees no CUDA device (use --device auto or cpu)")
    if index is not None and index >= cuda_devices:
        raise UserError(
            f"--device {name}: ctranslate2 sees {cuda_devices} CUDA device(s), "
            f"numbered 0 to {cuda_devices - 1}"
        )
    return "cuda", index or 0


def compute_type_for(
    weights: str, device: str, int8_bits: int | None, vnni: bool, supported: set[str]
) -> str:
    """What ctranslate2 computes `weights` in on `device` (see the module docstring); a UserError if none."""
    if device == "cuda":
        fast = GPU_COMPUTE_TYPES.get(weights, weights)
        chosen = fast if fast in supported else weights
    elif weights.startswith("int8") and int8_bits == 8 and not vnni:
        chosen = "float32"
    else:
        chosen = weights
    if chosen not in supported:
        raise UserError(
            f"the folder holds {weights} weights, which ctranslate2 cannot run on this {device} "
            f"(it runs {', '.join(sorted(supported))}); export the run again with one of those as --quantize"
        )
    return chosen


def cuda_library_error(exc: Exception) -> UserError | None:
    """The clear error for ctranslate2 failing to load a CUDA library, or None for any other failure."""
    found = CUDA_LIBRARY.search(str(exc))
    if found is None:
        return None
    return UserError(
        f"ctranslate2 cannot load the CUDA library {found.group(0)} ({exc}). A CTranslate2 folder is "
        "translated without torch, so torch's copy of the CUDA libraries is not loaded for it: install "
        "CUDA 12's cuBLAS (`pip install nvidia-cublas-cu12`, or the extra `attn-mt[ctranslate2-cuda]`), "
        "which attn-mt then loads from site-packages, or put a folder of CUDA 12 libraries on "
        "LD_LIBRARY_PATH; or translate on the CPU with --device cpu"
    )


def first_translation(translator: object, token: str) -> None:
    """Translate one token, so ctranslate2 loads its CUDA libraries now; a missing one is a clear error."""
    try:
        translator.translate_batch([[token]], beam_size=1, max_decoding_length=1)
    except RuntimeError as exc:
        raise cuda_library_error(exc) or UserError(f"ctranslate2 cannot translate on CUDA: {exc}") from None


def open_ctranslate2_folder(folder: Path, checkpoint: str, device: str, quantize: str | None) -> LoadedRun:
    """Open an exported folder: its config and vocabularies, and a `Ctranslate2Model` on `device`."""
    folder = Path(folder)
    if checkpoint != "best":
        raise UserError(f"--checkpoint {checkpoint}: {folder} is a CTranslate2 folder, which holds one model")
    if quantize is not None:
        raise UserError(
            f"--quantize {quantize}: {folder} is a CTranslate2 folder, whose weight type was "
            "chosen at export; export the run again with `--format ctranslate2 --quantize TYPE`"
        )
    meta = read_meta(folder)
    ctranslate2 = import_ctranslate2()
    check_ctranslate2_version(
        folder, str(meta.get("ctranslate2_version", "unknown")), ctranslate2.__version__
    )
    kind, index = ctranslate2_device(device, ctranslate2.get_cuda_device_count())
    cfg = config_from_dict(meta["config"], f"config inside {folder / META_FILE}", saved=True)
    cfg = within_bounds(cfg, folder / META_FILE)
    src_vocab, tgt_vocab = load_vocabs(RunPaths(folder), cfg)
    if not (folder / MODEL_FILE).is_file():
        raise UserError(f"{folder} is incomplete: no {MODEL_FILE} (CTranslate2's weights)")
    weights = str(meta.get("weights", "float32"))
    int8_bits = meta.get("int8_bits")
    bits = int8_bits if isinstance(int8_bits, int) else None
    vnni = cpu_has_vnni()
    try:
        compute_type = compute_type_for(
            weights, kind, bits, vnni, set(ctranslate2.get_supported_compute_types(kind, index))
        )
    except UserError as exc:
        raise UserError(f"{folder}: {exc}") from None
    if kind == "cpu" and compute_type != weights:
        log.warning(
            "%s holds 8-bit int8 weights, whose int8 products saturate on this CPU (it has no %s) "
            "and lose accuracy; running them in float32 instead (slower). Exported on this machine, "
            "int8 weights are kept within 7 bits and run in int8",
            folder,
            " or ".join(VNNI_FLAGS),
        )
    if kind == "cuda":
        preload_cuda12_libraries()
    threads = cpu_threads()
    workers, per_worker = (threads, 1) if kind == "cpu" else (1, threads)
    try:
        translator = ctranslate2.Translator(
            str(folder),
            device=kind,
            device_index=index,
            compute_type=compute_type,
            inter_threads=workers,
            intra_threads=per_worker,
        )
    except (RuntimeError, ValueError) as exc:
        problem = cuda_library_error(exc)
        if problem is not None:
            raise problem from None
        raise UserError(f"ctranslate2 {ctranslate2.__version__} cannot open {folder}: {exc}") from None
    if kind == "cuda":
        first_translation(translator, src_vocab.idx_to_token[src_vocab.eos_id])
    model = Ctranslate2Model(
        folder,
        translator,
        weights,
        compute_type,
        bits,
        int(meta.get("parameters", 0)),
        kind,
        index,
        workers,
        per_worker,
        cfg.model.depths.decoder - 1,
    )
    where = kind if kind == "cpu" else f"cuda:{index}"
    step = int(meta.get("step", 0))
    return LoadedRun(
        cfg,
        src_vocab,
        tgt_vocab,
        model,
        folder / MODEL_FILE,
        step,
        ModelKind.CTRANSLATE2_FOLDER,
        where,
        folder,
    )
