"""Benchmark `attn-mt serve`: batching of concurrent clients, idle latency, and a bounded load test.

    python scripts/bench_serve.py RUN_DIR [--clients 64] [--idle-requests 200] [--load-minutes 2]

Starts `attn-mt serve RUN_DIR` on a free port of 127.0.0.1 (never another address) and measures:
1. batching: `--clients` sentences sent by as many concurrent clients, one sentence each, against
   the same sentences sent one request at a time (greedy); sentences per second of both and their
   ratio (best of `--repeats`), and that both give the same translations;
2. idle latency: `--idle-requests` single-sentence greedy requests, one after the other;
   p50 / p99 / max in milliseconds;
3. load: `--load-clients` clients for `--load-minutes` minutes sending requests of 1-16
   sentences (greedy, or beam 4 with 2-best, 5% with attention), 1% of them malformed; counts the
   answers by status class, reads the server's resident memory (VmRSS) at the start and the end,
   and checks every well-formed answer against `attn-mt translate` on the same sentences.
Sentences are English lines of the corpus (`--data`, else as `attn-mt` finds it). Prints one JSON
object with every figure; docs/serving.md holds the results.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import select
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from attn_mt.data.corpus import read_pairs, resolve_corpus

MAX_CLIENTS = 256  # bounds on what one run of this script may do
MAX_LOAD_MINUTES = 15
MALFORMED = [  # bodies the server must refuse with a 4xx
    b'{"sentences": ["i lost ."',
    b'{"sentences": []}',
    b'{"sentences": "i lost ."}',
    b'{"sentences": [3]}',
    b'{"sentences": ["i lost ."], "beam": "4"}',
    json.dumps({"sentences": ["a" * 1001]}).encode(),
]
RSS_EVERY_S = 15  # how often the load test reads the server's memory
OPTIONS = [{"beam": 1}, {"beam": 4, "nbest": 2}]  # the two option sets of the load test


def start_server(run_dir: Path, extra: list[str]) -> tuple[subprocess.Popen, str]:
    """`attn-mt serve RUN_DIR --port 0` on 127.0.0.1; the process and its host:port."""
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "attn_mt",
            "serve",
            str(run_dir),
            "--host",
            "127.0.0.1",
            "--port",
            "0",
            *extra,
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    ready, _, _ = select.select([process.stdout], [], [], 300)
    line = process.stdout.readline() if ready else ""
    if "http://127.0.0.1:" not in line:
        process.kill()
        sys.exit(f"the server did not start: {line!r}")
    return process, line.split("http://", 1)[1].split("/", 1)[0]


def post(address: str, body: bytes) -> tuple[int, dict | None]:
    """POST /translate; the status and the JSON answer (None when the connection failed)."""
    request = urllib.request.Request(f"http://{address}/translate", data=body, method="POST")
    request.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(request, timeout=120) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        with error:
            return error.code, json.loads(error.read() or b"null")
    except OSError:
        return 0, None


def translate(address: str, sentences: list[str], **options: object) -> dict:
    """A well-formed request that must succeed."""
    status, answer = post(address, json.dumps({"sentences": sentences, **options}).encode())
    if status != 200 or answer is None:
        sys.exit(f"request failed with {status}: {answer}")
    return answer


def rss_mib(pid: int) -> float:
    """Resident memory of a process in MiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def percentile(values: list[float], q: float) -> float:
    """The q-th percentile (nearest rank) of the values."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q / 100 * len(ordered) + 0.5) - 1))]


def client_after(barrier: threading.Barrier, address: str, sentence: str) -> dict:
    """One client: wait for the others, then send one greedy one-sentence request."""
    barrier.wait()
    return translate(address, [sentence], beam=1)


def batching(address: str, sentences: list[str], repeats: int) -> dict:
    """Sentences/s of one-sentence requests sent concurrently against one at a time."""
    best_alone = best_together = 0.0
    for _ in range(repeats):
        start = time.perf_counter()
        alone = [translate(address, [s], beam=1) for s in sentences]
        best_alone = max(best_alone, len(sentences) / (time.perf_counter() - start))
        barrier = threading.Barrier(len(sentences) + 1)  # all clients start together
        with ThreadPoolExecutor(len(sentences)) as pool:
            futures = [pool.submit(client_after, barrier, address, s) for s in sentences]
            barrier.wait()
            start = time.perf_counter()
            together = [f.result() for f in futures]
            best_together = max(best_together, len(sentences) / (time.perf_counter() - start))
        same = [a["results"][0]["translation"] for a in alone] == [
            t["results"][0]["translation"] for t in together
        ]
        if not same:
            sys.exit("concurrent and sequential requests gave different translations")
    return {
        "clients": len(sentences),
        "sequential_sentences_per_s": round(best_alone, 1),
        "concurrent_sentences_per_s": round(best_together, 1),
        "ratio": round(best_together / best_alone, 2),
        "same_translations": True,
    }


def idle_latency(address: str, sentences: list[str]) -> dict:
    """Latency of single-sentence greedy requests sent one after another."""
    latencies = []
    for sentence in sentences:
        start = time.perf_counter()
        translate(address, [sentence], beam=1)
        latencies.append(1000 * (time.perf_counter() - start))
    return {
        "requests": len(latencies),
        "p50_ms": round(percentile(latencies, 50), 1),
        "p99_ms": round(percentile(latencies, 99), 1),
        "max_ms": round(max(latencies), 1),
    }


def load_test(address: str, pid: int, pool: list[str], minutes: float, clients: int, seed: int) -> dict:
    """Mixed requests from several clients for a bounded time; statuses, memory and answers."""
    deadline = time.monotonic() + 60 * minutes
    lock = threading.Lock()
    counts = {"2xx": 0, "4xx": 0, "5xx": 0, "failed": 0, "malformed_sent": 0, "malformed_refused": 0}
    answers: dict[int, dict[str, list[str]]] = {0: {}, 1: {}}  # option set -> sentence -> outputs
    mismatched = 0
    sentences_done = 0

    def client(number: int) -> None:
        nonlocal mismatched, sentences_done
        rng = random.Random(seed + number)
        while time.monotonic() < deadline:
            if rng.random() < 0.01:
                status, _ = post(address, rng.choice(MALFORMED))
                with lock:
                    counts["malformed_sent"] += 1
                    counts["malformed_refused"] += 400 <= status < 500
                    counts[f"{status // 100}xx" if status else "failed"] += 1
                continue
            which = 0 if rng.random() < 0.75 else 1
            batch = rng.sample(pool, rng.choice([1, 1, 1, 2, 4, 8, 16]))
            body = {"sentences": batch, **OPTIONS[which], "attention": rng.random() < 0.05}
            status, answer = post(address, json.dumps(body).encode())
            with lock:
                counts[f"{status // 100}xx" if status else "failed"] += 1
                if status != 200:
                    continue
                sentences_done += len(batch)
                for sentence, result in zip(batch, answer["results"], strict=True):
                    outputs = [c["text"] for c in result["nbest"]]
                    if answers[which].setdefault(sentence, outputs) != outputs:
                        mismatched += 1  # the same sentence answered differently at another time

    rss = [round(rss_mib(pid), 1)]
    started = time.perf_counter()
    with ThreadPoolExecutor(clients) as threads:
        running = [threads.submit(client, number) for number in range(clients)]
        while time.monotonic() < deadline:  # the server's memory every RSS_EVERY_S seconds
            time.sleep(min(RSS_EVERY_S, max(0.0, deadline - time.monotonic())))
            rss.append(round(rss_mib(pid), 1))
        for future in running:
            future.result()
    elapsed = time.perf_counter() - started
    rss.append(round(rss_mib(pid), 1))
    return {
        "minutes": minutes,
        "clients": clients,
        **counts,
        "sentences": sentences_done,
        "sentences_per_s": round(sentences_done / elapsed, 1),
        "rss_start_mib": rss[0],
        "rss_end_mib": rss[-1],
        f"rss_mib_every_{RSS_EVERY_S}s": rss,
        "answers_that_changed": mismatched,
        "answers": answers,
    }


def translate_command(run_dir: Path, sentences: list[str], options: list[str]) -> list[str]:
    """What `attn-mt translate` prints for the sentences."""
    with tempfile.TemporaryDirectory() as tmp:
        source = Path(tmp) / "input.txt"
        source.write_text("".join(s + "\n" for s in sentences), encoding="utf-8")
        out = subprocess.run(
            [sys.executable, "-m", "attn_mt", "translate", str(run_dir), "--input", str(source), *options],
            capture_output=True,
            text=True,
            check=True,
        )
    return out.stdout.splitlines()


def compare_with_translate(run_dir: Path, answers: dict[int, dict[str, list[str]]]) -> dict:
    """Every answer of the load test against `attn-mt translate` on the same sentences and options."""
    checked = differing = 0
    for which, by_sentence in answers.items():
        sentences = sorted(by_sentence)
        if not sentences:
            continue
        beam, nbest = OPTIONS[which]["beam"], OPTIONS[which].get("nbest", 1)
        lines = translate_command(run_dir, sentences, ["--beam", str(beam), "--nbest", str(nbest)])
        if nbest > 1:
            lines = [line.split(" ||| ")[1] for line in lines]
        for i, sentence in enumerate(sentences):
            checked += 1
            differing += by_sentence[sentence] != lines[i * nbest : (i + 1) * nbest]
    return {"distinct_sentences_checked": checked, "differing_from_translate": differing}


def main() -> None:
    """Start the server, run the three measurements, stop it, print the figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_dir", type=Path)
    parser.add_argument("--data", help="corpus file (default: as attn-mt finds it)")
    parser.add_argument("--clients", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--idle-requests", type=int, default=200)
    parser.add_argument("--load-minutes", type=float, default=2.0)
    parser.add_argument("--load-clients", type=int, default=16)
    parser.add_argument("--pool", type=int, default=1000, help="distinct sentences of the load test")
    parser.add_argument("--max-batch", type=int, default=64)
    parser.add_argument("--max-wait-ms", type=float, default=5.0)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    if not 1 <= args.clients <= MAX_CLIENTS or not 1 <= args.load_clients <= MAX_CLIENTS:
        sys.exit(f"--clients and --load-clients must be between 1 and {MAX_CLIENTS}")
    if not 0 <= args.load_minutes <= MAX_LOAD_MINUTES:
        sys.exit(f"--load-minutes must be between 0 and {MAX_LOAD_MINUTES}")

    english = sorted({en for en, _ in read_pairs(resolve_corpus(args.data))})
    rng = random.Random(args.seed)
    pool = rng.sample(english, args.pool + args.clients + args.idle_requests)
    concurrent, idle = pool[: args.clients], pool[args.clients : args.clients + args.idle_requests]
    load_pool = pool[args.clients + args.idle_requests :]
    process, address = start_server(
        args.run_dir, ["--max-batch", str(args.max_batch), "--max-wait-ms", str(args.max_wait_ms)]
    )
    try:
        translate(address, concurrent[:8], beam=1)  # warm-up
        info = json.loads(urllib.request.urlopen(f"http://{address}/info", timeout=60).read())
        report = {
            "machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs",
            "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
            "command": " ".join(sys.argv),
            "model": info["model"],
            "parameters": info["parameters"],
            "checkpoint_step": info["step"],
            "eval_scores": {split: s.get("bleu") for split, s in info["eval_scores"].items()},
            "batching": batching(address, concurrent, args.repeats),
            "idle_latency": idle_latency(address, idle),
        }
        if args.load_minutes > 0:
            load = load_test(address, process.pid, load_pool, args.load_minutes, args.load_clients, args.seed)
            answers = load.pop("answers")
            report["load"] = {**load, **compare_with_translate(args.run_dir, answers)}
    finally:
        process.send_signal(signal.SIGINT)
        process.wait(timeout=60)
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
