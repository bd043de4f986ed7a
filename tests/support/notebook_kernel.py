"""Running a notebook in a fresh Jupyter kernel that imports this checkout's attn_mt (tests/test_notebooks.py,
tests/test_exercises.py)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

from support.helpers import ROOT

CELL_TIMEOUT_S = 300
KERNEL = "attn-mt-tests"


def kernel_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A kernelspec for this very Python, found through $JUPYTER_PATH, and an environment in which the
    kernel imports this checkout's attn_mt on one torch thread; returns the folder the kernel runs in."""
    spec = tmp_path / "jupyter" / "kernels" / KERNEL
    spec.mkdir(parents=True)
    argv = [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"]
    (spec / "kernel.json").write_text(
        json.dumps({"argv": argv, "display_name": KERNEL, "language": "python"})
    )
    monkeypatch.setenv("JUPYTER_PATH", str(tmp_path / "jupyter"))
    paths = [str(ROOT), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(paths))
    monkeypatch.setenv("OMP_NUM_THREADS", "1")  # the tiny runs train faster on one thread of a busy machine
    monkeypatch.setenv("MPLBACKEND", "Agg")
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.setenv("TMPDIR", str(work))  # the notebooks' corpora and runs (tempfile.mkdtemp) land here
    return work


def execute_notebook(notebook: nbformat.NotebookNode, folder: Path) -> nbformat.NotebookNode:
    """Run every cell of `notebook` in `folder`, in the kernel `kernel_environment` set up."""
    client = NotebookClient(
        notebook, timeout=CELL_TIMEOUT_S, kernel_name=KERNEL, resources={"metadata": {"path": str(folder)}}
    )
    client.execute()
    return notebook
