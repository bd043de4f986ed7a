"""`attn-mt serve`'s and `attn-mt lab`'s HTTP contracts, checked by an independent fuzzer: Schemathesis
over each one's /openapi.json."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from support.helpers import command_server, server

CONFIG = Path(__file__).with_name("schemathesis.toml")
LAB_CONFIG = Path(__file__).with_name("schemathesis_lab.toml")
FUZZ_SECONDS = 30  # bounded: a longer run is `schemathesis run URL/openapi.json --checks all` by hand


@pytest.fixture(scope="module")
def run_dir(tiny_runs, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tiny_runs.copy_to(tmp_path_factory.mktemp("contract"))["transformer"]


def fuzz(address: str, config: Path) -> str:
    """Schemathesis over the server's /openapi.json with every check for FUZZ_SECONDS, seeded; its report."""
    runner = shutil.which("schemathesis", path=str(Path(sys.executable).parent))
    assert runner, "schemathesis is missing: install the dev extra (pip install -e '.[dev]')"
    result = subprocess.run(
        [
            runner,
            "--config-file",
            str(config),
            "run",
            f"http://{address}/openapi.json",
            "--checks",
            "all",
            "--workers",
            "1",
            "--max-time",
            str(FUZZ_SECONDS),
            "--seed",
            "1",
        ],
        capture_output=True,
        text=True,
        timeout=FUZZ_SECONDS + 120,
    )
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-2000:]
    return result.stdout


def test_schemathesis_finds_no_failure_with_every_check(run_dir):
    """Every operation, every check (server errors, status codes, schemas, headers such as a 405's
    Allow, schema-valid bodies accepted and invalid ones refused) for FUZZ_SECONDS, seeded."""
    with server(run_dir) as address:
        report = fuzz(address, CONFIG)
    # every operation was tested: /translate, /score, /languages, /health, /info, and LibreTranslate's
    # /detect, /frontend/settings, /translate_file, /download_file/{name}, /suggest, /spec
    assert "11/11" in report


def test_schemathesis_finds_no_failure_in_the_lab(tiny_runs):
    """The same over the lab's two operations: the panel list, and every panel on fuzzed inputs."""
    with command_server("lab", str(tiny_runs.gru_bahdanau), str(tiny_runs.transformer)) as address:
        report = fuzz(address, LAB_CONFIG)
    assert "2/2" in report
