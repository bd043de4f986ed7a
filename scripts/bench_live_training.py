"""Benchmark: a book run trained from the lab's "train live" panel against `attn-mt train`, back to back.

    python scripts/bench_live_training.py --model gru_bahdanau --epochs 250

First `attn-mt train configs/d2l_<model>.yaml` runs as a command, then the same config and seed from the
lab's LiveTrainer (lab/live.py, the process the panel starts), polled as the page polls it.
Both are timed from start to the end of the process (wall seconds), and each run's own run_summary.json
wall time is printed beside. Results are printed as one JSON line; copy them into docs/lab.md.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from attn_mt.config import SHIPPED_CONFIGS
from attn_mt.lab.live import CONFIGS, LiveTrainer, live_panel

POLL_S = 1.0  # the page's polling interval


def main() -> None:
    """Time both ways of training one book config and print them."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", choices=tuple(CONFIGS), default="gru_bahdanau")
    parser.add_argument("--epochs", type=int, default=250)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        command = [sys.executable, "-m", "attn_mt", "train", str(SHIPPED_CONFIGS / CONFIGS[args.model])]
        command += ["--run-dir", str(folder / "cli"), "--quiet", "--set", f"train.epochs={args.epochs}"]
        command += ["--set", f"train.seed={args.seed}"]
        started = time.monotonic()
        subprocess.run(command, check=True)
        cli_s = time.monotonic() - started
        (folder / "lab").mkdir()
        trainer = LiveTrainer({}, {"runs": [], "panels": []}, folder / "lab")
        started = time.monotonic()
        status = live_panel(
            trainer, {"action": "start", "model": args.model, "seed": args.seed, "epochs": args.epochs}
        )
        while status["state"] == "running":
            time.sleep(POLL_S)
            status = live_panel(trainer, {})
        live_s = time.monotonic() - started
        summaries = [
            json.loads((run / "run_summary.json").read_text())
            for run in (folder / "cli", Path(status["run_dir"]))
        ]
    print(
        json.dumps(
            {
                "model": args.model,
                "epochs": args.epochs,
                "train_command_s": round(cli_s, 1),
                "lab_s": round(live_s, 1),
                "lab_state": status["state"],
                "run_summary_wall_s": [summary["wall_s"] for summary in summaries],
            }
        )
    )


if __name__ == "__main__":
    main()
