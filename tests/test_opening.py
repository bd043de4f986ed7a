"""One way in: `open_model` tells a run directory, an export file and a CTranslate2 folder apart once, and
every command, the server and `attn_mt.load` open a model through it, on the same device with the same
workers. CTranslate2 on CUDA: device names, the compute type a GPU runs fastest, a clear error when
ctranslate2 cannot load cuBLAS (shown here with fakes; no GPU needed)."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import ctranslate2
import pytest
import yaml
from support.helpers import call, server

import attn_mt
from attn_mt.errors import UserError
from attn_mt.run.open import model_kind, open_model
from attn_mt.run.open_ctranslate2 import compute_type_for, cuda_library_error, first_translation
from attn_mt.run.opened import ModelKind, parse_device

PACKAGE = Path(attn_mt.__file__).parent
CPU_TYPES = {"float32", "int8", "int8_float32", "int16"}
GPU_TYPES = {"float32", "float16", "bfloat16", "int8", "int8_float16", "int8_float32", "int8_bfloat16"}


def test_each_kind_is_told_apart_and_opened_with_its_kind_and_device(
    subword_run, subword_folder, run_cli, tmp_path
):
    exported = tmp_path / "model.pt"
    assert run_cli("export", str(subword_run), str(exported)).returncode == 0
    cases = {
        subword_run: ModelKind.RUN_DIR,
        exported: ModelKind.EXPORT_FILE,
        subword_folder: ModelKind.CTRANSLATE2_FOLDER,
    }
    for path, kind in cases.items():
        assert model_kind(path) is kind
        opened = open_model(path, device="cpu")
        assert (opened.kind, opened.device, opened.source) == (kind, "cpu", path)
    assert model_kind(tmp_path / "missing") is ModelKind.RUN_DIR
    with pytest.raises(UserError, match="run directory not found"):
        open_model(tmp_path / "missing", device="cpu")
    assert open_model(exported, device="cpu").eval_dir("test") == tmp_path / "model.pt.eval" / "test"
    assert open_model(subword_folder, device="cpu").eval_dir("test") == subword_folder / "eval" / "test"


def test_only_the_opener_tells_the_kinds_apart():
    """No module but run/open.py detects a kind, and none outside run/ compares kinds."""
    detecting, comparing = [], []
    for path in sorted(PACKAGE.rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        name = str(path.relative_to(PACKAGE))
        if "is_ctranslate2_folder" in text:
            detecting.append(name)
        if re.search(r"ModelKind\.\w+", text) and not name.startswith("run/"):
            comparing.append(name)
    assert detecting == ["run/open.py"] and comparing == []


def test_every_way_in_opens_a_folder_on_the_same_device_with_the_same_workers(
    subword_folder, subword_run, run_cli, monkeypatch, tmp_path
):
    folder = Path(shutil.copytree(subword_folder, tmp_path / "ct2"))  # eval writes eval/ into it
    opened: list[dict] = []
    real = ctranslate2.Translator

    def spy(path: str, **options):
        opened.append(options)
        return real(path, **options)

    monkeypatch.setattr(ctranslate2, "Translator", spy)
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    served = []
    monkeypatch.setattr("attn_mt.commands.serve.run_server", lambda run, *rest: served.append(run))
    corpus = subword_run.parent / "reverse.txt"
    assert run_cli("translate", str(folder), "--device", "auto", "Alpha bravo.").returncode == 0
    assert run_cli("eval", str(folder), "--device", "auto", "--data", str(corpus)).returncode == 0
    assert run_cli("serve", str(folder), "--device", "auto").returncode == 0
    loaded = attn_mt.load(folder, device="auto")
    assert len(opened) == 4 and all(options == opened[0] for options in opened), opened
    assert served[0].device == loaded.device == ("cuda:0" if ctranslate2.get_cuda_device_count() else "cpu")
    if loaded.device == "cpu":
        assert (opened[0]["inter_threads"], opened[0]["intra_threads"]) == (3, 1)


def test_device_names_every_opener_reads():
    assert [parse_device(n) for n in ("auto", "cpu", "cuda", "mps", "cuda:1")] == [
        ("auto", None),
        ("cpu", None),
        ("cuda", None),
        ("mps", None),
        ("cuda", 1),
    ]
    for wrong in ("gpu", "cuda:", "cuda:x", "cpu:0", "mps:1"):
        with pytest.raises(UserError, match="expected one of auto, cpu, cuda, cuda:N"):
            parse_device(wrong)


def test_a_gpu_computes_in_half_precision_and_a_cpu_in_the_stored_type():
    assert compute_type_for("float32", "cuda", None, False, GPU_TYPES) == "float16"
    assert compute_type_for("int8", "cuda", 8, False, GPU_TYPES) == "int8_float16"
    assert compute_type_for("int8_float32", "cuda", 7, False, GPU_TYPES) == "int8_float16"
    assert compute_type_for("float16", "cuda", None, False, GPU_TYPES) == "float16"
    no_half = {"float32", "int8_float32"}  # a GPU without fast float16 keeps the stored type
    assert compute_type_for("float32", "cuda", None, False, no_half) == "float32"
    assert compute_type_for("float32", "cpu", None, False, CPU_TYPES) == "float32"
    assert compute_type_for("int8", "cpu", 7, False, CPU_TYPES) == "int8"
    assert compute_type_for("int8", "cpu", 8, True, CPU_TYPES) == "int8"
    assert compute_type_for("int8", "cpu", 8, False, CPU_TYPES) == "float32"  # would saturate
    with pytest.raises(UserError, match="holds float16 weights, which ctranslate2 cannot run on this cpu"):
        compute_type_for("float16", "cpu", None, False, CPU_TYPES)


def test_a_missing_cuda_library_is_a_clear_error_naming_the_fix():
    class NoCublas:
        def translate_batch(self, *args, **kwargs):
            raise RuntimeError("Library libcublas.so.12 is not found or cannot be loaded")

    with pytest.raises(UserError) as refused:
        first_translation(NoCublas(), "<eos>")
    message = str(refused.value)
    assert "cannot load the CUDA library libcublas.so.12" in message
    assert "pip install nvidia-cublas-cu12" in message and "LD_LIBRARY_PATH" in message
    assert "--device cpu" in message
    assert cuda_library_error(RuntimeError("out of memory")) is None

    class OutOfMemory:
        def translate_batch(self, *args, **kwargs):
            raise RuntimeError("CUDA failed with error out of memory")

    with pytest.raises(
        UserError, match="ctranslate2 cannot translate on CUDA: CUDA failed with error out of"
    ):
        first_translation(OutOfMemory(), "<eos>")


def test_a_run_saved_with_decode_settings_over_the_bounds_opens_within_them(subword_run, tmp_path, run_cli):
    """A run saved before the bounds existed (decode.beam_size 20, length penalty 50) opens with 16 and 10,
    with a warning: translate works, serve's LibreTranslate route (which decodes with the run's beam)
    answers 200, and the Python API refuses a beam over 16 as every other entry point does."""
    run_dir = Path(shutil.copytree(subword_run, tmp_path / "run"))
    config = yaml.safe_load((run_dir / "config.yaml").read_text(encoding="utf-8"))
    config["decode"].update(beam_size=20, length_penalty=50.0)
    (run_dir / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
    opened = open_model(run_dir, device="cpu")
    assert (opened.config.decode.beam_size, opened.config.decode.length_penalty) == (16, 10.0)
    printed = run_cli("translate", str(run_dir), "Alpha bravo.", "--device", "cpu")
    assert printed.returncode == 0, printed.stderr
    assert f"{run_dir / 'config.yaml'}: decode.beam_size is 20, outside 1..16" in printed.stderr
    with pytest.raises(UserError, match="beam must be at most 16, got 17"):
        attn_mt.load(run_dir).translate(["Alpha bravo."], beam=17)
    with server(run_dir) as address:
        status, answer = call(address, "/translate", {"q": "Alpha bravo.", "source": "en", "target": "fr"})
        assert status == 200, answer
        status, answer = call(address, "/translate", {"sentences": ["Alpha bravo."]})
        assert status == 200 and (answer["beam"], answer["length_penalty"]) == (16, 10.0)
