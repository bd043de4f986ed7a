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
4. with `--scenario`: `overload` (one-sentence clients against clients of the largest legal request:
   the short requests' latency, every status, the server's peak memory), `idle-connections` (idle
   sockets held open, then a new client's request, and the server's log size), `sigterm` (paragraph
   requests queued, then SIGTERM: the time to exit and how every client was answered), `burst`
   (`--burst` LibreTranslate paragraphs of 990 characters sent at once to a fresh server, with
   `--short-clients` one-sentence clients sending meanwhile, then the same again on the now warm
   server: how each was answered, every 503's Retry-After, the short requests' p99 and 503 share).
Sentences are English lines of the corpus (`--data`, else as `attn-mt` finds it). Prints one JSON
object with every figure; docs/serving.md holds the results.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import resource
import select
import signal
import socket
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
MAX_PRESSURE_CLIENTS = 512
IDLE_WAIT_S = 60  # how long the idle-connections scenario waits for the server to close them
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


def start_server(
    run_dir: Path, extra: list[str], log: Path | None = None, fd_limit: int | None = None
) -> tuple[subprocess.Popen, str]:
    """`attn-mt serve RUN_DIR --port 0` on 127.0.0.1; the process and its host:port. Its stderr (a line
    per request) goes into `log`, or a temporary file, never onto the terminal."""
    if log is None:
        handle, name = tempfile.mkstemp(prefix="bench_serve-", suffix=".log")
        os.close(handle)
        log = Path(name)
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
        stderr=log.open("w"),
        text=True,
        preexec_fn=None
        if fd_limit is None
        else lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (fd_limit,) * 2),
    )
    ready, _, _ = select.select([process.stdout], [], [], 300)
    line = process.stdout.readline() if ready else ""
    if "http://127.0.0.1:" not in line:
        process.kill()
        process.wait()
        sys.exit(f"the server did not start: {line!r}\n{log.read_text()[-3000:]}")
    return process, line.split("http://", 1)[1].split("/", 1)[0]


def post(address: str, body: bytes, timeout: float = 120) -> tuple[int, dict | None]:
    """POST /translate; the status and the JSON answer (None when the connection failed)."""
    request = urllib.request.Request(f"http://{address}/translate", data=body, method="POST")
    request.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
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


def largest_request(pool: list[str]) -> bytes:
    """The largest legal /translate body: 64 texts of 1,000 characters, beam 16, n-best 16, attention,
    a 700-character prefix (so no text is split)."""
    text = " ".join(pool)
    text = " ".join([text] * (64_000 // len(text) + 1))  # enough for 64 texts whatever the pool
    texts = [text[i * 1000 : (i + 1) * 1000] for i in range(64)]
    body = {"sentences": texts, "beam": 16, "nbest": 16, "attention": True, "prefix": text[:700]}
    return json.dumps(body).encode()


def status_key(status: int) -> str:
    """An answer's status as a count's name (0: no answer at all)."""
    return str(status) if status else "no_answer"


def overload(
    address: str, pid: int, pool: list[str], seconds: float, clients: int, large_clients: int
) -> dict:
    """`clients` one-sentence greedy clients and `large_clients` clients of the largest request, all
    sending back to back for `seconds`; the short requests' latency, every status, the server's peak RSS."""
    deadline = time.monotonic() + seconds
    lock = threading.Lock()
    short_ms: dict[int, list[float]] = {}  # status -> latencies of the one-sentence requests
    statuses: dict[str, dict[str, int]] = {"short": {}, "large": {}}
    large = largest_request(pool)

    def client(number: int, kind: str) -> None:
        rng = random.Random(number)
        while time.monotonic() < deadline:
            body = (
                large
                if kind == "large"
                else json.dumps({"sentences": [rng.choice(pool)], "beam": 1}).encode()
            )
            started = time.perf_counter()
            status, _ = post(address, body, timeout=600)
            took = 1000 * (time.perf_counter() - started)
            with lock:
                count = statuses[kind]
                count[status_key(status)] = count.get(status_key(status), 0) + 1
                if kind == "short":
                    short_ms.setdefault(status, []).append(took)
            if status == 503:
                time.sleep(1.0)  # the shortest Retry-After the server gives

    peak = rss_mib(pid)
    kinds = ["large"] * large_clients + ["short"] * clients
    with ThreadPoolExecutor(len(kinds)) as threads:
        running = [threads.submit(client, n, kind) for n, kind in enumerate(kinds)]
        while any(not f.done() for f in running):
            peak = max(peak, rss_mib(pid))
            time.sleep(0.5)
        for future in running:
            future.result()
    latency = {
        status_key(status): {
            "p50_ms": round(percentile(values, 50), 1),
            "p99_ms": round(percentile(values, 99), 1),
            "max_ms": round(max(values), 1),
        }
        for status, values in sorted(short_ms.items())
    }
    return {
        "seconds": seconds,
        "short_clients": clients,
        "large_clients": large_clients,
        "statuses": statuses,
        "short_latency_by_status": latency,
        "rss_peak_mib": round(peak, 1),
    }


MAX_SHORT_REQUESTS = 2000  # a burst's short clients stop after this many requests each, if not before


def timed_post(address: str, body: bytes) -> tuple[int, float, str | None, str]:
    """POST /translate: the status (0 without an answer), the seconds taken, the Retry-After, the error."""
    request = urllib.request.Request(f"http://{address}/translate", data=body, method="POST")
    request.add_header("Content-Type", "application/json")
    started = time.perf_counter()
    try:
        with urllib.request.urlopen(request, timeout=600) as response:
            response.read()
            return response.status, time.perf_counter() - started, None, ""
    except urllib.error.HTTPError as error:
        with error:
            answer = json.loads(error.read() or b"null")
            said = answer.get("error", "") if isinstance(answer, dict) else ""
            return error.code, time.perf_counter() - started, error.headers.get("Retry-After"), said
    except OSError:
        return 0, time.perf_counter() - started, None, ""


def paragraphs(pool: list[str], count: int, length: int = 990) -> list[str]:
    """`count` paragraphs of `length` characters: the pool's sentences one after another, cut at `length`."""
    text = " ".join(pool)
    text = " ".join([text] * (count * length // len(text) + 2))
    return [text[i * length : (i + 1) * length].strip() for i in range(count)]


def summary(answers: list[tuple[int, float, str | None, str]]) -> dict:
    """How a group of answers went: statuses, the 503s' share and Retry-Afters, the deadline 503s, and the
    200s' latency."""
    refused = [a for a in answers if a[0] == 503]
    answered_ms = [1000 * a[1] for a in answers if a[0] == 200]
    counts: dict[str, int] = {}
    for status, *_ in answers:
        counts[status_key(status)] = counts.get(status_key(status), 0) + 1
    return {
        "requests": len(answers),
        "statuses": counts,
        "share_503": round(len(refused) / len(answers), 3) if answers else 0.0,
        "503_with_retry_after": sum(a[2] is not None for a in refused),
        "503_past_the_deadline": sum("deadline" in a[3] for a in refused),
        "503_slowest_ms": round(1000 * max((a[1] for a in refused), default=0.0), 1),
        "200_p50_ms": round(percentile(answered_ms, 50), 1) if answered_ms else None,
        "200_p99_ms": round(percentile(answered_ms, 99), 1) if answered_ms else None,
        "200_slowest_ms": round(max(answered_ms), 1) if answered_ms else None,
    }


def burst(address: str, pool: list[str], count: int, short_clients: int) -> dict:
    """`count` LibreTranslate paragraphs of 990 characters sent at once, one client each, while
    `short_clients` clients send one-sentence greedy requests back to back (a second apart after a
    503) until the last paragraph is answered (at most MAX_SHORT_REQUESTS each); how both kinds were
    answered (`summary`)."""
    bodies = [
        json.dumps({"q": text, "source": "en", "target": "fr"}).encode() for text in paragraphs(pool, count)
    ]
    done = threading.Event()

    def short_client(number: int) -> list[tuple[int, float, str | None, str]]:
        rng = random.Random(number)
        answers = []
        while not done.is_set() and len(answers) < MAX_SHORT_REQUESTS:
            body = json.dumps({"sentences": [rng.choice(pool)], "beam": 1}).encode()
            answers.append(timed_post(address, body))
            if answers[-1][0] == 503:
                done.wait(1.0)  # the shortest Retry-After the server gives
        return answers

    with ThreadPoolExecutor(count + short_clients) as threads:
        shorts = [threads.submit(short_client, n) for n in range(short_clients)]
        long = list(threads.map(lambda body: timed_post(address, body), bodies))
        done.set()
        short = [answer for future in shorts for answer in future.result()]
    return {"paragraphs": summary(long), "short": summary(short)}


def still_open(sock: socket.socket) -> bool:
    """Whether the server has not closed this connection (nothing to read yet)."""
    sock.setblocking(False)
    try:
        return sock.recv(1) != b""
    except BlockingIOError:
        return True
    except OSError:
        return False


def idle_connections(address: str, count: int, log: Path, sentence: str) -> dict:
    """Open `count` connections that send nothing, then time a new client's request; the server's log size."""
    host, port = address.rsplit(":", 1)
    idle = []
    started = time.perf_counter()
    for _ in range(count):
        try:
            idle.append(socket.create_connection((host, int(port)), timeout=5))
        except OSError:
            break
    opened = len(idle)
    try:
        started = time.perf_counter()
        status, _ = post(address, json.dumps({"sentences": [sentence], "beam": 1}).encode(), timeout=120)
        new_client_s = time.perf_counter() - started
        closed_after_s = None
        open_ones = list(idle)
        while open_ones and time.perf_counter() - started < IDLE_WAIT_S:  # until the server closes them
            time.sleep(0.5)
            open_ones = [sock for sock in open_ones if still_open(sock)]
        if not open_ones:
            closed_after_s = round(time.perf_counter() - started, 1)
    finally:
        for sock in idle:
            sock.close()
    return {
        "idle_connections_opened": opened,
        "new_client_status": status,
        "new_client_s": round(new_client_s, 2),
        "idle_all_closed_by_server_after_s": closed_after_s,
        "server_log_bytes": log.stat().st_size,
    }


def metrics(address: str) -> dict[str, float]:
    """GET /metrics: each sample without labels, by name."""
    text = urllib.request.urlopen(f"http://{address}/metrics", timeout=60).read().decode()
    samples = (line.split(" ") for line in text.splitlines() if line and not line.startswith("#"))
    return {parts[0]: float(parts[1]) for parts in samples if len(parts) == 2 and "{" not in parts[0]}


def sigterm_with_queue(process: subprocess.Popen, address: str, pool: list[str], count: int) -> dict:
    """`count` requests of one paragraph each (16 sentences, beam 4) queued, then SIGTERM: how long the
    server takes to exit, and how every client was answered."""
    paragraph = " ".join(pool[:16])
    body = json.dumps({"sentences": [paragraph], "beam": 4}).encode()
    with ThreadPoolExecutor(count) as threads:
        answers = [threads.submit(post, address, body, 600) for _ in range(count)]
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            seen = metrics(address)
            queued = seen["attn_mt_queue_depth"] + seen["attn_mt_decoder_refused_total"]
            if queued >= count - 1:  # every request queued or refused, but one being decoded
                break
            time.sleep(0.05)
        signalled = time.perf_counter()
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=600)
        exit_s = time.perf_counter() - signalled
        counts: dict[str, int] = {}
        for future in answers:
            key = status_key(future.result()[0])
            counts[key] = counts.get(key, 0) + 1
    return {"queued": count, "exit_after_sigterm_s": round(exit_s, 2), "statuses": counts}


def pressure(args: argparse.Namespace, pool: list[str]) -> dict:
    """The --scenario chosen: overload, idle connections, or SIGTERM with a queue."""
    log = Path(tempfile.mkstemp(prefix="bench_serve_", suffix=".log")[1])
    extra = [*args.serve_option]
    process, address = start_server(args.run_dir, extra, log, args.server_fd_limit)
    report = {
        "machine": machine(),
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "command": " ".join(sys.argv),
    }
    try:
        if args.scenario == "burst":  # the server as it starts: no request before the burst
            report["fresh"] = burst(address, pool, args.burst, args.short_clients)
            report["warm"] = burst(address, pool, args.burst, args.short_clients)
            report["metrics"] = metrics(address)
        else:
            translate(address, pool[:2], beam=1)  # warm-up
        if args.scenario == "overload":
            report["overload"] = overload(
                address, process.pid, pool, args.seconds, args.load_clients, args.large_clients
            )
        elif args.scenario == "idle-connections":
            report["idle"] = idle_connections(address, args.connections, log, pool[0])
        elif args.scenario == "sigterm":
            report["sigterm"] = sigterm_with_queue(process, address, pool, args.queued)
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGINT)
            process.wait(timeout=120)
    report["server_log_bytes"] = log.stat().st_size
    report["server_log_tail"] = log.read_text(errors="replace")[-600:]
    log.unlink()
    return report


def machine() -> str:
    """The CPU model and the number of CPUs."""
    model = platform.processor() or platform.machine()
    for line in Path("/proc/cpuinfo").read_text().splitlines() if Path("/proc/cpuinfo").exists() else []:
        if line.startswith("model name"):
            model = line.split(":", 1)[1].strip()
            break
    return f"{model}, {os.cpu_count()} CPUs"


def main() -> None:
    """Start the server, run the measurements of the --scenario, stop it, print the figures."""
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
    parser.add_argument(
        "--scenario",
        choices=["throughput", "overload", "idle-connections", "sigterm", "burst"],
        default="throughput",
        help="throughput: batching, idle latency, load (the default); overload: --load-clients one-sentence "
        "clients against --large-clients of the largest request for --seconds; idle-connections: "
        "--connections idle sockets, then one request; sigterm: --queued paragraphs queued, then SIGTERM; "
        "burst: --burst paragraphs at once to a fresh server with --short-clients, then again, warm",
    )
    parser.add_argument("--burst", type=int, default=200, help="paragraphs of the burst scenario")
    parser.add_argument("--short-clients", type=int, default=4, help="one-sentence clients during a burst")
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--large-clients", type=int, default=2)
    parser.add_argument("--connections", type=int, default=1100)
    parser.add_argument("--queued", type=int, default=100)
    parser.add_argument("--server-fd-limit", type=int, help="the server's open-file limit, soft and hard")
    parser.add_argument(
        "--serve-option", action="append", default=[], help="one more argument for attn-mt serve (repeatable)"
    )
    args = parser.parse_args()
    if not 1 <= args.clients <= MAX_CLIENTS or not 1 <= args.load_clients <= MAX_PRESSURE_CLIENTS:
        sys.exit(
            f"--clients must be between 1 and {MAX_CLIENTS}, --load-clients up to {MAX_PRESSURE_CLIENTS}"
        )
    if not 0 <= args.load_minutes <= MAX_LOAD_MINUTES or not 0 < args.seconds <= 60 * MAX_LOAD_MINUTES:
        sys.exit(f"--load-minutes and --seconds must be at most {MAX_LOAD_MINUTES} minutes")
    if not 0 <= args.large_clients <= 8 or not 1 <= args.connections <= 4000 or not 1 <= args.queued <= 500:
        sys.exit("--large-clients must be 0-8, --connections 1-4000, --queued 1-500")
    if not 1 <= args.burst <= MAX_PRESSURE_CLIENTS or not 0 <= args.short_clients <= 16:
        sys.exit(f"--burst must be 1-{MAX_PRESSURE_CLIENTS}, --short-clients 0-16")
    if args.scenario != "throughput":
        english = sorted({en for en, _ in read_pairs(resolve_corpus(args.data))})
        print(json.dumps(pressure(args, random.Random(args.seed).sample(english, 2000)), indent=2))
        return

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
            "machine": machine(),
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
