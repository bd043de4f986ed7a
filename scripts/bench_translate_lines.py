"""Benchmark `attn-mt translate` end to end on a file: this checkout against another commit's code.

    git worktree add /tmp/old-507 507b03e
    python scripts/bench_translate_lines.py RUN_DIR --baseline /tmp/old-507 --lines 20000 --pairs 5

Writes the corpus's first `--lines` English lines (raw, one per line) to a file and times whole
`attn-mt translate RUN_DIR -i FILE -o OUT` processes (start-up, reading, splitting, search,
writing): the `--baseline` checkout's code with its default options, `--before`'s code with
`--no-split` and with splitting on, then this checkout's with both; and again, `--pairs` times
(interleaved, so that other work on the machine weighs on every variant alike). Each process
imports its checkout's code (PYTHONPATH) with the same interpreter; `--threads N` sets
OMP_NUM_THREADS (torch's threads) for all of them: on a machine shared with other work, one thread
keeps a descheduled thread's barrier waits out of the figures. Prints one JSON line per run and a
summary: each variant's median wall and CPU (user + system) seconds, its ratio to the first
variant's, and whether its outputs equal the first's (splitting changes the lines that hold several
sentences). The run must load in every checkout (a run trained by the oldest code usually does).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from attn_mt.data.corpus import read_pairs, resolve_corpus
from attn_mt.machine import cpu_name

ROOT = Path(__file__).resolve().parent.parent
MAX_PAIRS = 50  # bound on what one run of this script may do
CLI = "import sys; from attn_mt.cli import main; sys.argv[0] = 'attn-mt'; main()"


def child_cpu_seconds() -> float:
    """User + system CPU seconds of every finished child process so far."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def timed_translate(
    code: Path, run_dir: Path, text: Path, out: Path, options: list[str], threads: int
) -> dict:
    """One `attn-mt translate` process with `code` first on the import path: wall and CPU seconds."""
    env = {**os.environ, "PYTHONPATH": str(code)}
    if threads:
        env["OMP_NUM_THREADS"] = str(threads)
    cmd = [sys.executable, "-c", CLI, "translate", str(run_dir), "-i", str(text), "-o", str(out), *options]
    cpu, start = child_cpu_seconds(), time.perf_counter()
    subprocess.run(cmd, env=env, cwd=code, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return {"wall_s": time.perf_counter() - start, "cpu_s": child_cpu_seconds() - cpu}


def main() -> None:
    """Write the input file, time the variants interleaved, print each run and the medians."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_dir", type=Path)
    parser.add_argument("--baseline", type=Path, help="a checkout (git worktree) of the code to compare")
    parser.add_argument(
        "--before", type=Path, help="another checkout to time with both options (e.g. before a change)"
    )
    parser.add_argument("--lines", type=int, default=20000)
    parser.add_argument("--pairs", type=int, default=5)
    parser.add_argument("--threads", type=int, default=0, help="OMP_NUM_THREADS (0: torch's default)")
    parser.add_argument("--data", help="the corpus (else as attn-mt finds it)")
    args = parser.parse_args()
    if not 1 <= args.pairs <= MAX_PAIRS:
        parser.error(f"--pairs must be 1 to {MAX_PAIRS}")

    variants = [("current --no-split", ROOT, ["--no-split"]), ("current split", ROOT, [])]
    if args.before is not None:
        before = args.before.resolve()
        variants[:0] = [("before --no-split", before, ["--no-split"]), ("before split", before, [])]
    if args.baseline is not None:
        variants.insert(0, ("baseline", args.baseline.resolve(), []))
    pairs = read_pairs(resolve_corpus(args.data))
    with tempfile.TemporaryDirectory() as tmp:
        text = Path(tmp) / "lines.txt"
        text.write_text("".join(en + "\n" for en, _ in pairs[: args.lines]), encoding="utf-8")
        runs: dict[str, list[dict]] = {name: [] for name, _, _ in variants}
        outputs: dict[str, str] = {}
        for pair in range(args.pairs):
            for name, code, options in variants:
                out = Path(tmp) / f"{name.replace(' ', '_')}.txt"
                record = timed_translate(code, args.run_dir.resolve(), text, out, options, args.threads)
                runs[name].append(record)
                outputs[name] = out.read_text(encoding="utf-8")
                print(json.dumps({"pair": pair, "variant": name, **record}), flush=True)
    first = variants[0][0]
    reference = statistics.median(r["wall_s"] for r in runs[first])
    summary = {
        "lines": args.lines,
        "pairs": args.pairs,
        "machine": cpu_name() or platform.machine(),
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "threads": args.threads or "default",
    }
    for name, _, _ in variants:
        wall = statistics.median(r["wall_s"] for r in runs[name])
        summary[name] = {
            "median_wall_s": round(wall, 2),
            "median_cpu_s": round(statistics.median(r["cpu_s"] for r in runs[name]), 2),
            f"wall_vs_{first.replace(' ', '_')}": round(wall / reference, 3),
            "same_output_as_first": outputs[name] == outputs[first],
        }
    print(json.dumps(summary), flush=True)


if __name__ == "__main__":
    main()
