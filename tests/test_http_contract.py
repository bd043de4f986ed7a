"""`attn-mt serve`'s HTTP contract, checked by an independent fuzzer: Schemathesis over /openapi.json."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import server

CONFIG = Path(__file__).with_name("schemathesis.toml")
FUZZ_SECONDS = 30  # bounded: a longer run is `schemathesis run URL/openapi.json --checks all` by hand


@pytest.fixture(scope="module")
def run_dir(tiny_runs, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tiny_runs.copy_to(tmp_path_factory.mktemp("contract"))["transformer"]


def test_schemathesis_finds_no_failure_with_every_check(run_dir):
    """Every operation, every check (server errors, status codes, schemas, headers such as a 405's
    Allow, schema-valid bodies accepted and invalid ones refused) for FUZZ_SECONDS, seeded."""
    runner = shutil.which("schemathesis", path=str(Path(sys.executable).parent))
    assert runner, "schemathesis is missing: install the dev extra (pip install -e '.[dev]')"
    with server(run_dir) as address:
        result = subprocess.run(
            [
                runner,
                "--config-file",
                str(CONFIG),
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
    assert (
        "5/5" in result.stdout
    )  # every operation was tested: /translate, /score, /languages, /health, /info
