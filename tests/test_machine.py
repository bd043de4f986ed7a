"""attn_mt/machine.py: the facts about this CPU that torch, CTranslate2 and data preparation share."""

from __future__ import annotations

import os
import subprocess
import sys

from attn_mt import machine

CPUINFO = """processor\t: 0
model name\t: Some CPU 3000
flags\t\t: fpu sse2 avx2 avx512f avx512_vnni
processor\t: 1
model name\t: Some CPU 3000
flags\t\t: fpu sse2 avx2 avx512f avx512_vnni
"""


def test_flags_and_name_come_from_cpuinfo(tmp_path):
    info = tmp_path / "cpuinfo"
    info.write_text(CPUINFO, encoding="utf-8")
    assert machine.cpu_flags(info) == {"fpu", "sse2", "avx2", "avx512f", "avx512_vnni"}
    assert machine.cpu_name(info) == "Some CPU 3000"
    assert machine.cpu_flags(tmp_path / "none") == set() and machine.cpu_name(tmp_path / "none") == ""


def test_bf16_and_vnni_follow_the_flags(monkeypatch):
    for flags, bf16, vnni in (
        ({"avx2"}, False, False),
        ({"avx512_vnni"}, False, True),
        ({"avx_vnni"}, False, True),
        ({"avx512_bf16", "avx512_vnni"}, True, True),
        ({"amx_bf16", "amx_int8"}, True, True),
    ):
        monkeypatch.setattr(machine, "cpu_flags", lambda found=flags: found)
        assert (machine.cpu_has_native_bf16(), machine.cpu_has_vnni()) == (bf16, vnni), flags


def test_threads_follow_omp_num_threads_else_the_cores(monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    assert machine.cpu_threads() == 3
    for unusable in ("0", "two", ""):
        monkeypatch.setenv("OMP_NUM_THREADS", unusable)
        assert machine.cpu_threads() == machine.available_cores()
    assert machine.available_cores() == len(os.sched_getaffinity(0))


def test_the_machine_module_imports_no_torch():
    code = "import sys, attn_mt.machine; print(sorted(m for m in sys.modules if m.split('.')[0] == 'torch'))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"
