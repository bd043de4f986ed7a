"""CUDA 12's libraries from NVIDIA's pip wheels, loaded for ctranslate2 in a process without torch.

ctranslate2 4.x's wheels are built against CUDA 12 and open cuBLAS by name (libcublas.so.12) on
their first GPU product. A machine whose system libraries are another CUDA major version (13, say)
has none by that name; torch's CUDA 12 builds bring their own, but a CTranslate2 folder is
translated without torch. NVIDIA's `nvidia-cublas-cu12` wheel (the `ctranslate2-cuda` extra)
installs them under site-packages/nvidia/cublas/lib. `preload_cuda12_libraries` finds them on
sys.path and loads them with RTLD_GLOBAL, so ctranslate2's later dlopen by name finds them already
in the process. Without the wheel nothing is loaded, and run/open_ctranslate2.py's clear error
stays what a user sees. No torch is imported here.
"""

from __future__ import annotations

import ctypes
import logging
import sys
from collections.abc import Iterable
from pathlib import Path

# (folder under site-packages/nvidia, library), in load order: cuBLAS opens cuBLASLt
CUDA12_LIBRARIES = (
    ("cuda_runtime", "libcudart.so.12"),
    ("cublas", "libcublasLt.so.12"),
    ("cublas", "libcublas.so.12"),
)
log = logging.getLogger("attn_mt")
_loaded: dict[str, Path] = {}  # library name -> the file loaded, once per process


def find_cuda12_libraries(roots: Iterable[str | Path]) -> list[Path]:
    """Each CUDA12_LIBRARIES file, from the first of `roots` (sys.path entries) that has it, in load order."""
    found = []
    folders = [Path(root) for root in roots if root]
    for package, name in CUDA12_LIBRARIES:
        for folder in folders:
            candidate = folder / "nvidia" / package / "lib" / name
            if candidate.is_file():
                found.append(candidate)
                break
    return found


def preload_cuda12_libraries(roots: Iterable[str | Path] | None = None) -> list[Path]:
    """Load the CUDA 12 libraries of NVIDIA's wheels globally (Linux only); the files loaded, if any.

    A library that fails to load (a broken install, a missing driver) is logged and left to
    ctranslate2, whose own failure then gives the clear error.
    """
    if not sys.platform.startswith("linux"):
        return []
    for path in find_cuda12_libraries(sys.path if roots is None else roots):
        if path.name in _loaded:
            continue
        try:
            ctypes.CDLL(str(path), mode=ctypes.RTLD_GLOBAL)
        except OSError as exc:
            log.debug("cannot preload %s: %s", path, exc)
            continue
        _loaded[path.name] = path
    return list(_loaded.values())
