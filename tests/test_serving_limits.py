"""`attn-mt serve` under pressure: a queue bounded in work (503 with Retry-After), deadlines, --max-batch
kept by splitting requests, limits that agree, read timeouts for slow clients, the fd limit and a quiet
log when it is reached, and a bounded shutdown; real HTTP against server processes on 127.0.0.1 with the
session's tiny Transformer run."""

from __future__ import annotations

import json
import re
import resource
import signal
import socket
import threading
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from support.helpers import (
    ANSWER_TIMEOUT_S,
    call,
    load_script,
    raw_answer,
    raw_request,
    server,
    server_process,
    translate,
    translate_lines,
    wait_for_health,
    worker_counts,
    written_text,
)
from support.synthetic import reverse_pairs

from attn_mt.serving.admission import LARGEST_WORK, request_work
from attn_mt.serving.schemas import (
    MAX_CHARS,
    MAX_SENTENCES,
    MAX_SPLIT_SENTENCES,
    MAX_TEXT_CHARS,
    TranslateRequest,
)

SENTENCE = "alpha bravo charlie ."  # 21 characters: 31 units of work a beam


def post_with_headers(address: str, body: dict) -> tuple[int, dict, dict[str, str]]:
    """POST /translate; the status, the JSON answer and the headers (lower-cased names)."""
    request = urllib.request.Request(
        f"http://{address}/translate",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=ANSWER_TIMEOUT_S) as response:
            return (
                response.status,
                json.loads(response.read()),
                {name.lower(): value for name, value in response.headers.items()},
            )
    except urllib.error.HTTPError as error:
        with error:
            headers = {name.lower(): value for name, value in error.headers.items()}
            return error.code, json.loads(error.read()), headers


def test_a_full_queue_answers_503_with_retry_after_at_once(tiny_runs):
    # 100 units of queue; the first request (62 units at beam 2) waits 3 s for company in its batch
    with server(tiny_runs.transformer, "--max-queued-work", "100", "--max-wait-ms", "3000") as address:
        with ThreadPoolExecutor(1) as pool:
            first = pool.submit(translate, address, [SENTENCE], beam=2)
            wait_for_health(address, lambda health: health["queued_work"] == 62)
            started = time.monotonic()
            status, answer, headers = post_with_headers(address, {"sentences": [SENTENCE], "beam": 2})
            refused_in = time.monotonic() - started
            assert first.result(ANSWER_TIMEOUT_S)["results"][0]["translation"]
        assert status == 503 and "busy" in answer["error"] and int(headers["retry-after"]) >= 1
        assert refused_in < 1.0  # at once, not after the queue drains
        status, answer, _ = post_with_headers(address, {"sentences": [SENTENCE], "beam": 1})  # 31 units fit
        assert status == 200
        health = worker_counts(address)
    assert health["refused"] == 1


def test_a_request_not_answered_by_its_deadline_gets_503_and_is_not_decoded(tiny_runs):
    # the batch waits 3 s for company, longer than the request's 1 s deadline
    limits = ("--max-wait-ms", "3000", "--request-timeout", "10", "--max-request-timeout", "20")
    with server(tiny_runs.transformer, *limits) as address:
        status, answer, headers = post_with_headers(address, {"sentences": [SENTENCE], "timeout": 1.0})
        assert status == 503 and "deadline" in answer["error"] and int(headers["retry-after"]) >= 1
        status, answer, _ = post_with_headers(address, {"sentences": [SENTENCE], "timeout": 21.0})
        assert status == 422 and answer["error"] == "timeout: at most 20 seconds on this server, got 21"
        health = wait_for_health(address, lambda health: health["expired"] == 1)
        assert health["dropped"] == 0  # its client waited for the 503: it did not leave
        assert (health["batches"], health["sentences"]) == (0, 0)  # given up before its batch was decoded
        assert translate(address, [SENTENCE], timeout=20.0)["results"][0]["translation"]


def test_a_fresh_server_knows_its_speed_and_refuses_from_the_first_request(tiny_runs):
    # three texts of 990 characters at beam 6 with attention, unsplit: 36,000 units, a long batch of their
    # own that waits 3 s for company; a second request would wait for the first's work, far over 0.01 s
    text = " ".join([SENTENCE] * 46)[:990]
    heavy = {"sentences": [text] * 3, "beam": 6, "attention": True, "split": False}
    options = ("--max-wait-ms", "3000", "--max-queue-wait", "0.01")
    with server(tiny_runs.transformer, *options) as address:
        fresh = worker_counts(address)
        assert (fresh["batches"], fresh["sentences"]) == (0, 0)  # the warm-up batch is no request's
        with ThreadPoolExecutor(1) as pool:
            first = pool.submit(post_with_headers, address, heavy)
            wait_for_health(address, lambda health: health["queued_work"] == 36_000)
            status, answer, headers = post_with_headers(address, heavy)  # before any batch was decoded
            assert first.result(ANSWER_TIMEOUT_S)[0] == 200
        assert status == 503 and "busy" in answer["error"] and int(headers["retry-after"]) >= 1
        assert worker_counts(address)["refused"] == 1


@pytest.mark.slow
@pytest.mark.soak
def test_a_flood_at_start_up_and_again_warm_is_answered_or_refused_at_once_never_at_its_deadline(tiny_runs):
    # 200 paragraphs of 990 characters at once (the flood) on a server that has answered nothing
    # yet, then again with 2 one-sentence clients meanwhile; a queue wait of 0.5 s keeps the flood well
    # over what the worker can answer in time on any machine
    bench = load_script("bench_serve")
    pool = [en.capitalize() + "." for en, _ in reverse_pairs(400, seed=4)]
    options = ("--request-timeout", "20", "--max-queue-wait", "0.5")
    with server(tiny_runs.transformer, *options) as address:
        fresh = bench.burst(address, pool, 200, short_clients=0)
        warm = bench.burst(address, pool, 200, short_clients=2)
        counts = worker_counts(address)
    for flood in (fresh, warm):
        for kind in ("paragraphs", "short"):
            answers = flood[kind]
            refused = answers["statuses"].get("503", 0)
            assert set(answers["statuses"]) <= {"200", "503"}, flood
            assert answers["503_with_retry_after"] == refused and answers["503_past_the_deadline"] == 0, flood
        assert 0 < flood["paragraphs"]["statuses"].get("503", 0) < 200, flood  # refused from the first
    assert (counts["expired"], counts["dropped"]) == (0, 0)


def test_max_batch_is_honoured_exactly_by_splitting_requests(tiny_runs, run_cli, tmp_path):
    sentences = [en for en, _ in reverse_pairs(10, seed=11)]
    with server(tiny_runs.transformer, "--max-batch", "4") as address:
        answer = translate(address, sentences, beam=1)
        health = worker_counts(address)
    assert (health["batches"], health["sentences"]) == (3, 10)  # 4 + 4 + 2, never 10 at once
    expected = translate_lines(run_cli, tiny_runs.transformer, sentences, ["--beam", "1"], tmp_path)
    assert [r["translation"] for r in answer["results"]] == expected


def test_the_character_limit_is_reachable_and_split_sentences_are_bounded_by_it(tiny_runs):
    with server(tiny_runs.transformer) as address:
        paragraph = " ".join(f"Alpha bravo charlie {i} delta." for i in range(78))  # 78 sentences
        status, answer = call(address, "/translate", {"q": paragraph, "source": "en", "target": "fr"})
        assert status == 200 and answer["translatedText"]
        tiny = " ".join(["Hi!"] * (MAX_SPLIT_SENTENCES + 1))
        assert len(tiny) < MAX_TEXT_CHARS
        status, answer = call(address, "/translate", {"q": tiny, "source": "en", "target": "fr"})
        assert status == 400 and f"more than {MAX_SPLIT_SENTENCES} sentences" in answer["error"]
        entries = [" ".join(["Hi!"] * 250)] * 64  # 64 texts of 999 characters, 16,000 sentences
        status, answer = call(address, "/translate", {"sentences": entries, "beam": 1})
        assert status == 422 and answer["error"] == (
            f"sentences: 16000 sentences once split, more than {MAX_SPLIT_SENTENCES} in one request"
        )


def closed_within(sock: socket.socket, seconds: float) -> tuple[bool, bytes]:
    """Whether the server closed the connection within `seconds`, and what it sent before."""
    sock.settimeout(seconds)
    received = b""
    try:
        while chunk := sock.recv(4096):
            received += chunk
    except TimeoutError:
        return False, received
    except ConnectionResetError:
        pass
    return True, received


def test_idle_and_slow_connections_are_closed_and_others_answered(tiny_runs):
    limits = ("--header-timeout", "1", "--body-timeout", "1", "--keep-alive-timeout", "1")
    with server(tiny_runs.transformer, *limits) as address:
        host, port = address.rsplit(":", 1)
        idle = socket.create_connection((host, int(port)))
        half_head = socket.create_connection((host, int(port)))
        half_head.sendall(b"POST /translate HTTP/1.1\r\nHost: " + address.encode() + b"\r\n")
        body = json.dumps({"sentences": [SENTENCE]}).encode()
        half_body = raw_request(address, body[:5], len(body))
        trickle = socket.create_connection((host, int(port)))
        stop = threading.Event()

        def drip() -> None:  # a header line a byte every 0.2 s: each byte would reset an idle timer
            for byte in b"GET /health HTTP/1.1\r\nX-Slow: " + b"a" * 100:
                if stop.wait(0.2):
                    return
                try:
                    trickle.send(bytes([byte]))
                except OSError:
                    return

        dripping = threading.Thread(target=drip)
        dripping.start()
        try:
            assert translate(address, [SENTENCE])["results"][0]["translation"]  # others are served meanwhile
            for sock in (idle, half_head, trickle):
                closed, received = closed_within(sock, 5)
                assert closed and received == b""
            closed, received = closed_within(half_body, 5)
            assert closed and received.startswith(b"HTTP/1.1 408 ")
            assert b"the request body did not arrive within 1 s" in received
        finally:
            stop.set()
            dripping.join()
            for sock in (idle, half_head, half_body, trickle):
                sock.close()


def metric_samples(address: str) -> dict[str, float]:
    """Every sample of serve's GET /metrics, by its name with labels."""
    with urllib.request.urlopen(f"http://{address}/metrics", timeout=ANSWER_TIMEOUT_S) as response:
        lines = response.read().decode().splitlines()
    return {
        name: float(value)
        for name, _, value in (line.rpartition(" ") for line in lines if line and not line.startswith("#"))
    }


def test_a_body_that_times_out_is_logged_and_counted_408_and_a_client_that_leaves_499(tiny_runs, tmp_path):
    with (
        (tmp_path / "serve.log").open("w") as logged,
        server(tiny_runs.transformer, "--body-timeout", "1", log=logged) as address,
    ):
        slow = raw_request(address, b'{"sen', 100)  # 100 bytes declared, 5 sent
        closed, received = closed_within(slow, 10)
        assert closed and received.startswith(b"HTTP/1.1 408 ")
        wait_for_metric(address, 'attn_mt_requests_total{route="/translate",status="408"}')
        leaving = raw_request(address, b'{"sen', 100)
        leaving.close()  # before its body, and any answer
        samples = wait_for_metric(address, 'attn_mt_requests_total{route="/translate",status="499"}')
        log = written_text(logged)
    assert samples['attn_mt_requests_total{route="/translate",status="408"}'] == 1
    assert samples['attn_mt_rejections_total{status="408"}'] == 1
    assert not any('status="500"' in name for name in samples), samples
    assert re.search(r"POST /translate 408 0 sentences \d+\.\d ms", log), log
    assert re.search(r"POST /translate 499 0 sentences", log) and " 500 " not in log, log


def wait_for_metric(address: str, name: str) -> dict[str, float]:
    """Poll GET /metrics until the sample `name` appears; every sample then."""
    deadline = time.monotonic() + ANSWER_TIMEOUT_S
    while name not in (samples := metric_samples(address)):
        assert time.monotonic() < deadline, f"{name} never appeared in /metrics"
        time.sleep(0.05)
    return samples


def test_requests_over_limit_concurrency_get_a_logged_counted_json_503(tiny_runs, tmp_path):
    body = json.dumps({"sentences": [SENTENCE], "beam": 1}).encode()
    with (
        (tmp_path / "serve.log").open("w") as logged,
        server(tiny_runs.transformer, "--limit-concurrency", "1", log=logged) as address,
    ):
        held = raw_request(address, body[:5], len(body))  # in flight until the rest of its body comes
        deadline = time.monotonic() + ANSWER_TIMEOUT_S
        while (refused := call_with_headers(address, "/health"))[0] == 200:  # until the server has it
            assert time.monotonic() < deadline, "the held request never counted"
            time.sleep(0.05)
        held.sendall(body[5:])
        assert raw_answer(held)[0] == 200  # the request in flight is answered
        samples = metric_samples(address)
        log = written_text(logged)
    status, answer, headers = refused
    assert status == 503 and "1 requests in flight, --limit-concurrency" in answer["error"]
    assert int(headers["retry-after"]) >= 1 and headers["content-type"] == "application/json"
    assert samples['attn_mt_requests_total{route="/health",status="503"}'] == 1
    assert samples['attn_mt_rejections_total{status="503"}'] == 1
    assert "GET /health 503 0 sentences" in log


def call_with_headers(address: str, path: str) -> tuple[int, dict, dict[str, str]]:
    """GET `path`: the status, the JSON answer and the headers (lower-cased names)."""
    try:
        with urllib.request.urlopen(f"http://{address}{path}", timeout=ANSWER_TIMEOUT_S) as response:
            headers = {name.lower(): value for name, value in response.headers.items()}
            return response.status, json.loads(response.read()), headers
    except urllib.error.HTTPError as error:
        with error:
            headers = {name.lower(): value for name, value in error.headers.items()}
            return error.code, json.loads(error.read()), headers


def test_the_fd_limit_is_raised_and_running_out_logs_one_line_not_a_flood(tiny_runs, tmp_path):
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    lowered = min(256, hard)
    with server_process(
        "serve",
        str(tiny_runs.transformer),
        preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (lowered, hard)),
    ) as (process, _):
        limits = Path(f"/proc/{process.pid}/limits").read_text()
        assert re.search(rf"Max open files\s+{hard}\s+{hard}", limits), limits

    cap = 128  # soft and hard: the server cannot raise it, and 200 idle clients exhaust it
    with (
        (tmp_path / "serve.log").open("w") as logged,
        server_process(
            "serve",
            str(tiny_runs.transformer),
            "--header-timeout",
            "1",
            log=logged,
            preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (cap, cap)),
        ) as (process, address),
    ):
        host, port = address.rsplit(":", 1)
        idle = [socket.create_connection((host, int(port))) for _ in range(200)]
        try:
            time.sleep(1.5)  # the server runs out of descriptors, then closes the idle ones it holds
            started = time.monotonic()
            assert translate(address, [SENTENCE])["results"][0]["translation"]  # a new client gets in
            assert time.monotonic() - started < 30
        finally:
            for sock in idle:
                sock.close()
        process.send_signal(signal.SIGINT)
        process.wait(timeout=30)
        log = written_text(logged)
    lines = [line for line in log.splitlines() if "too many open files" in line.lower()]
    assert 1 <= len(lines) <= 2 and "Traceback" not in log and len(log) < 5000, log[-3000:]
    assert f"(the limit is {cap})" in lines[0]


def test_sigterm_finishes_what_fits_answers_the_rest_503_and_a_second_signal_exits_at_once(
    tiny_runs, tmp_path
):
    # 16 texts of 45 sentences (720 once split) at beam 6 with attention: 45 batches of 16 for the tiny model
    heavy = {"sentences": [" ".join([SENTENCE] * 46)[:990]] * 16, "beam": 6, "nbest": 6, "attention": True}
    # a queue wait of 10 minutes lets all of them in: admission control would refuse most at once
    options = ("--shutdown-timeout", "3", "--max-batch", "16", "--max-queue-wait", "600")
    with (
        (tmp_path / "serve.log").open("w") as logged,
        server_process("serve", str(tiny_runs.transformer), *options, log=logged) as (process, address),
    ):
        with ThreadPoolExecutor(12) as pool:
            answers = [pool.submit(post_with_headers, address, heavy) for _ in range(12)]
            # a request stays in the queue until its last sentence is in a batch: 12 waiting means all 12
            # arrived, so none is refused on arrival and every 503 is one the shutdown deadline cut short
            wait_for_health(address, lambda health: health["waiting"] == 12)
            signalled = time.monotonic()
            process.send_signal(signal.SIGTERM)
            statuses = [future.result(ANSWER_TIMEOUT_S)[0] for future in answers]
        assert process.wait(timeout=30) == -signal.SIGTERM  # the graceful path ends re-raising the signal
        log = written_text(logged)
        took = time.monotonic() - signalled
    assert set(statuses) <= {200, 503} and 503 in statuses, statuses
    assert took < 3 + 1.5, took
    stopped = re.search(r"stopped [\d.]+ s after the signal; (\d+) requests not finished", log)
    assert stopped and int(stopped.group(1)) == statuses.count(503), log

    # batches of one sentence: each request needs 720 of them, far longer than the 0.2 s between the signals
    one_at_a_time = ("--shutdown-timeout", "30", "--max-batch", "1", "--max-queue-wait", "600")
    patient = server_process("serve", str(tiny_runs.transformer), *one_at_a_time)
    with patient as (process, address), ThreadPoolExecutor(4) as pool:
        pending = [pool.submit(post_with_headers, address, heavy) for _ in range(4)]
        wait_for_health(address, lambda health: health["waiting"] == 4)  # all in, none wholly decoded
        process.send_signal(signal.SIGTERM)
        time.sleep(0.2)
        signalled = time.monotonic()
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=5) == 128 + signal.SIGTERM
        assert time.monotonic() - signalled < 2
        for future in pending:  # the connections end unanswered instead of hanging
            assert isinstance(future.exception(ANSWER_TIMEOUT_S), OSError)


def test_serve_refuses_contradictory_limits(tiny_runs, run_cli):
    for argv, message in (
        (["--request-timeout", "400"], "--request-timeout must be above 0 and at most --max-request-timeout"),
        (["--max-queued-work", "0"], "--max-queued-work must be at least 1"),
        (["--shutdown-timeout", "0"], "--shutdown-timeout must be above 0"),
        (["--limit-concurrency", "0"], "--limit-concurrency must be at least 1"),
    ):
        refused = run_cli("serve", str(tiny_runs.transformer), *argv)
        assert refused.returncode == 2 and message in refused.stderr and "Traceback" not in refused.stderr


def test_a_client_that_never_reads_its_answer_is_dropped_after_the_body_timeout(tiny_runs):
    # 5.4 MB of attention maps, more than the loopback socket buffers hold (4 MB here), in 1 s of decoding
    text = " ".join([SENTENCE] * 46)[:990]
    heavy = {"sentences": [text] * 64, "beam": 1, "attention": True, "split": False}
    body = json.dumps(heavy).encode()
    with server(tiny_runs.transformer, "--body-timeout", "1") as address:
        host, port = address.rsplit(":", 1)
        reader = socket.socket()
        reader.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # reads nothing, buffers little
        reader.connect((host, int(port)))
        head = (
            f"POST /translate HTTP/1.1\r\nHost: {address}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n\r\n"
        )
        reader.sendall(head.encode() + body)
        wait_for_health(address, lambda health: health["sentences"] > 0 and health["waiting"] == 0)
        time.sleep(4)  # the answer is written, the buffers fill, and the 1 s passes
        received = b""
        with reader:
            try:
                while chunk := reader.recv(1 << 16):
                    received += chunk
            except ConnectionResetError:
                pass
        declared = re.search(rb"content-length: (\d+)", received[:4096], re.IGNORECASE)
        assert declared is None or len(received) < int(declared.group(1))  # never the whole answer
        assert translate(address, [SENTENCE])["results"][0]["translation"]


def test_the_load_scripts_largest_request_is_legal_and_as_large_as_admission_counts():
    bench = load_script("bench_serve")
    pool = [en for en, _ in reverse_pairs(400, seed=2)]
    request = TranslateRequest.model_validate_json(bench.largest_request(pool))
    assert len(request.sentences) == MAX_SENTENCES and {len(s) for s in request.sentences} == {MAX_CHARS}
    assert (request.beam, request.nbest, request.attention, len(request.prefix)) == (16, 16, True, 700)
    items = [(s, request.prefix) for s in request.sentences]
    assert request_work(items, request.beam, request.attention) <= LARGEST_WORK
