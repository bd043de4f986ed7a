"""run/cuda_libraries.py: CUDA 12's libraries found in NVIDIA's pip wheels and loaded for ctranslate2,
on a made-up site-packages layout (no GPU, no wheel needed)."""

from __future__ import annotations

import ctypes
import subprocess
import sys
from pathlib import Path

import pytest

from attn_mt.run import cuda_libraries
from attn_mt.run.cuda_libraries import find_cuda12_libraries, preload_cuda12_libraries


def wheel_layout(root: Path, package: str, *names: str) -> Path:
    """site-packages/nvidia/PACKAGE/lib/NAME files under `root`, as NVIDIA's -cu12 wheels lay them out."""
    lib = root / "nvidia" / package / "lib"
    lib.mkdir(parents=True, exist_ok=True)
    for name in names:
        (lib / name).write_bytes(b"\x7fELF")
    return root


def test_the_finder_takes_each_library_from_the_first_root_that_has_it_in_load_order(tmp_path):
    first = wheel_layout(
        tmp_path / "venv", "cublas", "libcublas.so.12", "libcublasLt.so.12", "libnvblas.so.12"
    )
    second = wheel_layout(tmp_path / "user", "cublas", "libcublas.so.12")
    wheel_layout(second, "cuda_runtime", "libcudart.so.12")
    (tmp_path / "empty").mkdir()
    found = find_cuda12_libraries([str(tmp_path / "empty"), "", str(first), second])
    assert found == [
        second / "nvidia" / "cuda_runtime" / "lib" / "libcudart.so.12",
        first / "nvidia" / "cublas" / "lib" / "libcublasLt.so.12",  # cuBLASLt before the cuBLAS that opens it
        first / "nvidia" / "cublas" / "lib" / "libcublas.so.12",
    ]
    assert find_cuda12_libraries([tmp_path / "empty", tmp_path / "missing"]) == []
    cuda13 = wheel_layout(tmp_path / "cu13", "cublas", "libcublas.so.13")  # another major version: not it
    assert find_cuda12_libraries([cuda13]) == []


@pytest.fixture
def loads(monkeypatch) -> list[tuple[str, int]]:
    """ctypes.CDLL recorded instead of called (the fake files are not libraries); a fresh cache."""
    calls: list[tuple[str, int]] = []

    def fake_cdll(path: str, mode: int = 0) -> object:
        if "broken" in path:
            raise OSError(f"{path}: invalid ELF header")
        calls.append((path, mode))
        return object()

    monkeypatch.setattr(ctypes, "CDLL", fake_cdll)
    monkeypatch.setattr(cuda_libraries, "_loaded", {})
    monkeypatch.setattr(sys, "platform", "linux")
    return calls


def test_preloading_loads_them_globally_once_and_skips_what_fails(tmp_path, loads):
    root = wheel_layout(tmp_path / "site", "cublas", "libcublas.so.12", "libcublasLt.so.12")
    loaded = preload_cuda12_libraries([root])
    lib = root / "nvidia" / "cublas" / "lib"
    assert loads == [
        (str(lib / "libcublasLt.so.12"), ctypes.RTLD_GLOBAL),
        (str(lib / "libcublas.so.12"), ctypes.RTLD_GLOBAL),
    ]
    assert loaded == [lib / "libcublasLt.so.12", lib / "libcublas.so.12"]
    assert preload_cuda12_libraries([root]) == loaded and len(loads) == 2  # once per process
    broken = wheel_layout(tmp_path / "broken", "cuda_runtime", "libcudart.so.12")
    assert preload_cuda12_libraries([broken]) == loaded  # logged and left to ctranslate2's own error


def test_without_the_wheel_or_off_linux_nothing_is_loaded(tmp_path, loads, monkeypatch):
    assert preload_cuda12_libraries([tmp_path]) == [] and loads == []
    root = wheel_layout(tmp_path / "site", "cublas", "libcublas.so.12")
    monkeypatch.setattr(sys, "platform", "win32")
    assert preload_cuda12_libraries([root]) == [] and loads == []


def test_the_finder_imports_no_torch():
    code = (
        "import sys\n"
        "from attn_mt.run.cuda_libraries import preload_cuda12_libraries\n"
        "preload_cuda12_libraries()\n"
        "from attn_mt.run import open_ctranslate2\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'torch'))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"
