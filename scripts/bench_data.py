"""Benchmark: preparing and loading split-mode data at 1x, 5x and 10x the corpus, time and resident memory.

    python scripts/bench_data.py --corpus /path/to/fra-eng.zip --scales 1 5 10 --repeats 3 \
        [--compare /path/to/another/checkout] [--torchrun]

For each scale (copies of the corpus, each copy's sentences made distinct by a marker word, in a
scratch folder) and each source tree (this checkout, and --compare if given, taken in turn so a
busy machine hurts both alike), a fresh process:
  * cold: loads the data with an empty cache (`load_data`, which prepares the split);
  * cached: loads it again in a new process, then collates every batch of one epoch, as training
    reads the data, and reads its memory from /proc/self/smaps_rollup and /proc/self/status.
The load is timed inside the process (imports excluded). "data MB" is the process's peak RSS
(VmHWM) minus its RSS after the imports. With --torchrun, two ranks (`torchrun --nproc_per_node 2`,
Gloo on the CPU) each load the cached data and collate their half of the epoch; their Pss
(proportional set size: a page shared by both counts half in each) shows whether the data is
held once or twice. Best of --repeats is kept. Prints one markdown table per measure.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
SMAPS_KEYS = ("Rss", "Pss", "Pss_Anon", "Pss_File")


# ----- inside a probe process (run with the tree under test first on PYTHONPATH) -----


def memory_kb() -> dict[str, int]:
    """This process's Rss, Pss (with its anonymous and file parts) and peak RSS, in kB."""
    values = {}
    for line in Path("/proc/self/smaps_rollup").read_text().splitlines()[1:]:
        key, _, rest = line.partition(":")
        if key in SMAPS_KEYS:
            values[key] = int(rest.split()[0])
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            values["VmHWM"] = int(line.split()[1])
    return values


def probe(args: argparse.Namespace) -> None:
    """Load the data once (timed), optionally collate one epoch, print one JSON line of figures."""
    import torch
    import torch.distributed as dist

    from attn_mt.config import load_config
    from attn_mt.data.dataset import load_data

    torch.set_num_threads(1)
    rank, world = int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))
    if world > 1:
        dist.init_process_group("gloo")
    cfg = load_config(args.config)
    before = memory_kb()
    cpu, wall = time.process_time(), time.perf_counter()
    data = load_data(cfg.data, args.data)
    load_s = time.perf_counter() - wall
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu_s = time.process_time() - cpu + children.ru_utime + children.ru_stime
    loaded = memory_kb()
    if args.epoch:
        plan = data.train.plan(0, cfg.train.seed)
        for indices in plan[rank::world]:
            data.train.collate(indices)
    if world > 1:
        dist.barrier()  # every rank has read its share before any measures
    after = memory_kb()
    figures = [
        {
            "rank": rank,
            "load_s": round(load_s, 3),
            "cpu_s": round(cpu_s, 3),
            "pairs": data.train.num_examples,
            "before": before,
            "loaded": loaded,
            "after": after,
        }
    ]
    if world > 1:  # rank 0 prints every rank's figures (measured before any rank leaves and frees its pages)
        gathered: list[Any] = [None] * world
        dist.all_gather_object(gathered, figures[0])
        figures = gathered
        dist.destroy_process_group()
    if rank == 0:
        print("PROBE " + json.dumps(figures), flush=True)


# ----- the driver -----


def scaled_corpus(corpus: Path, times: int, folder: Path) -> Path:
    """`times` copies of the corpus in one Tatoeba-format file; copy k > 0 ends both sides with " ck"."""
    if times == 1:
        return corpus
    from attn_mt.data.corpus import read_pairs

    path = folder / f"corpus_{times}x.txt"
    if not path.exists():
        pairs = read_pairs(corpus)
        with path.open("w", encoding="utf-8") as out:
            for copy in range(times):
                mark = f" c{copy}" if copy else ""
                out.writelines(f"{en}{mark}\t{fr}{mark}\n" for en, fr in pairs)
    return path


def run_probe(
    tree: Path, cache: Path, corpus: Path, config: Path, epoch: bool, torchrun: bool = False
) -> list[dict[str, Any]]:
    """One probe process (or two torchrun ranks) over `tree`; their JSON figures."""
    env = {**os.environ, "PYTHONPATH": str(tree), "XDG_CACHE_HOME": str(cache), "OMP_NUM_THREADS": "1"}
    config = config if config.is_absolute() else tree / config  # each tree reads its own copy
    probe_args = [str(Path(__file__).resolve()), "probe", "--config", str(config), "--data", str(corpus)]
    probe_args += ["--epoch"] if epoch else []
    if torchrun:
        command = [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nproc_per_node",
            "2",
            *probe_args,
        ]
    else:
        command = [sys.executable, *probe_args]
    done = subprocess.run(command, env=env, capture_output=True, text=True, check=False, cwd=tree)
    if done.returncode:
        raise SystemExit(f"probe failed ({' '.join(command)}):\n{done.stderr[-4000:]}")
    return next(json.loads(line[6:]) for line in done.stdout.splitlines() if line.startswith("PROBE "))


def data_mb(figures: dict[str, Any]) -> float:
    """Peak RSS minus RSS after the imports, MB."""
    return (figures["after"]["VmHWM"] - figures["before"]["Rss"]) / 1024


def delta_mb(figures: dict[str, Any], key: str) -> float:
    """Growth of one smaps figure from before the load to after the epoch, MB."""
    return (figures["after"][key] - figures["before"][key]) / 1024


def measure(args: argparse.Namespace) -> None:
    """Interleave trees and repeats for every scale; print best-of tables."""
    trees = {"this checkout": ROOT, **({"compare": args.compare.resolve()} if args.compare else {})}
    scratch = Path(tempfile.mkdtemp(prefix="attn-mt-bench-data-"))
    results: dict[tuple[int, str], dict[str, list]] = {}
    try:
        for times in args.scales:
            corpus = scaled_corpus(args.corpus.resolve(), times, scratch)
            for repeat in range(args.repeats):
                for name, tree in trees.items():
                    cache = scratch / f"cache-{name.replace(' ', '-')}-{times}-{repeat}"
                    cold = run_probe(tree, cache, corpus, args.config, epoch=False)[0]
                    cached = run_probe(tree, cache, corpus, args.config, epoch=True)[0]
                    ranks = run_probe(tree, cache, corpus, args.config, True, True) if args.torchrun else []
                    shutil.rmtree(cache, ignore_errors=True)
                    record = results.setdefault((times, name), {"cold": [], "cached": [], "ranks": []})
                    record["cold"].append(cold)
                    record["cached"].append(cached)
                    record["ranks"].append(ranks)
                    if args.json:  # after every measurement, so a stopped benchmark keeps what it did
                        args.json.write_text(json.dumps({f"{t}x {n}": r for (t, n), r in results.items()}))
                    print(
                        f"{times}x {name} repeat {repeat + 1}: cold {cold['load_s']:.2f} s, cached "
                        f"{cached['load_s']:.2f} s, data {data_mb(cached):.0f} MB",
                        file=sys.stderr,
                        flush=True,
                    )
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    print_tables(results, args.torchrun)


def print_tables(results: dict[tuple[int, str], dict[str, list]], torchrun: bool) -> None:
    """Best-of figures per scale and tree as markdown tables."""
    print(
        "| corpus | tree | pairs kept | cold load s (CPU s) | cold peak RSS MB | cached load s | "
        "data MB (anon / file Pss) |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for (times, name), record in results.items():
        cold = min(record["cold"], key=lambda f: f["load_s"])
        cached = min(record["cached"], key=lambda f: f["load_s"])
        memory = min(record["cached"], key=data_mb)
        print(
            f"| {times}x | {name} | {cached['pairs']:,} | {cold['load_s']:.2f} ({cold['cpu_s']:.1f}) | "
            f"{cold['after']['VmHWM'] / 1024:.0f} | {cached['load_s']:.2f} | {data_mb(memory):.0f} "
            f"({delta_mb(memory, 'Pss_Anon'):.0f} / {delta_mb(memory, 'Pss_File'):.0f}) |"
        )
    if not torchrun:
        return
    print()
    print(
        "| corpus | tree | one process: data Rss MB (anon / file) | 2 ranks: data Pss MB per rank "
        "(anon / file) | 2 ranks: sum of data Pss MB |"
    )
    print("| --- | --- | --- | --- | --- |")
    for (times, name), record in results.items():
        single = min(record["cached"], key=lambda f: delta_mb(f, "Rss"))
        ranks = min(record["ranks"], key=lambda rs: sum(delta_mb(f, "Pss") for f in rs))
        per_rank = ", ".join(
            f"{delta_mb(f, 'Pss'):.0f} ({delta_mb(f, 'Pss_Anon'):.0f} / {delta_mb(f, 'Pss_File'):.0f})"
            for f in sorted(ranks, key=lambda f: f["rank"])
        )
        total = sum(delta_mb(f, "Pss") for f in ranks)
        print(
            f"| {times}x | {name} | {delta_mb(single, 'Rss'):.0f} ({delta_mb(single, 'Pss_Anon'):.0f} / "
            f"{delta_mb(single, 'Pss_File'):.0f}) | {per_rank} | {total:.0f} |"
        )


def main() -> None:
    """Parse the options: `probe` runs inside a measured process, anything else drives the benchmark."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("mode", nargs="?", default="measure", choices=("measure", "probe"))
    parser.add_argument("--corpus", type=Path, help="the corpus to scale (fra-eng.zip)")
    parser.add_argument("--data", help="(probe) the corpus file to load")
    parser.add_argument(
        "--config",
        type=Path,
        default=Path("configs/transformer.yaml"),
        help="a split-mode config; a relative path is read from each tree",
    )
    parser.add_argument("--scales", type=int, nargs="+", default=[1, 5, 10])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--compare", type=Path, help="another checkout measured the same way, in turn")
    parser.add_argument("--torchrun", action="store_true", help="also two torchrun ranks (Gloo) per scale")
    parser.add_argument("--epoch", action="store_true", help="(probe) collate one epoch after loading")
    parser.add_argument("--json", type=Path, help="also write every figure here")
    args = parser.parse_args()
    if args.mode == "probe":
        probe(args)
    elif args.corpus is None:
        parser.error("--corpus is required")
    else:
        measure(args)


if __name__ == "__main__":
    main()
