"""What several test files share: the repository's paths, headless Chromium, and talking to `attn-mt serve`
over HTTP (a server process on a free port, requests, the documented errors). Test files import from here
(and from the other modules of tests/support/), never from each other."""

from __future__ import annotations

import http.client
import importlib.util
import json
import os
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import IO, Any

import pytest

from attn_mt.serving.schemas import MAX_BODY_BYTES, MAX_CHARS, MAX_SENTENCES
from support.synthetic import reverse_pairs
from support.tolerances import decoding_terms, float32_approx

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


BROWSER_STEP = "`make browser` (apt-get install chromium; `make test` runs it first)"


def chromium_binary() -> str:
    """Debian's chromium from PATH; the test fails (never skips) without it, naming the install step."""
    found = shutil.which("chromium")
    if not found:
        pytest.fail(
            f"the browser test needs headless Chromium, and no `chromium` is on PATH: "
            f"install it with {BROWSER_STEP}"
        )
    return found


ERRORS_DOC = ROOT / "docs" / "errors.md"


START_TIMEOUT_S = 120  # a server that has not printed its address by then has failed


ANSWER_TIMEOUT_S = 60
# The tiny runs decode at most 1.5 x 12 + 5 = 23 steps of 32-term products (the feed-forward layer, the GRU's
# embedding + context) and softmaxes over fewer than 32 tokens or keys; other batch shapes reorder those sums.
TINY_RUN_TERMS = decoding_terms(steps=23, widest=32, keys_or_vocab=32)


# Sentences of the reverse task, one with words the vocabulary lacks, one blank, one over-long.
SENTENCES = [en for en, _ in reverse_pairs(12, seed=7)] + [
    "Alpha zulu bravo.",
    "",
    " ".join(["hotel"] * 60) + ".",
]


@contextmanager
def server(run_dir: Path, *options: str, log: IO[str] | None = None) -> Iterator[str]:
    """`attn-mt serve RUN_DIR --port 0 ...` in its own process; yields its base URL, stops it after."""
    with command_server("serve", str(run_dir), *options, log=log) as address:
        yield address


@contextmanager
def command_server(*arguments: str, log: IO[str] | None = None) -> Iterator[str]:
    """`attn-mt COMMAND ... --port 0 --device cpu` (serve or lab) in its own process; yields its address.
    Its log (a line per request) goes to `log`, a file, or a temporary one: never a pipe nobody drains."""
    with server_process(*arguments, log=log) as (_, address):
        yield address


@contextmanager
def server_process(
    *arguments: str, log: IO[str] | None = None, **popen: Any
) -> Iterator[tuple[subprocess.Popen, str]]:
    """`attn-mt COMMAND ... --port 0 --device cpu` in its own process (`popen`: more Popen arguments),
    its log to `log` (a file; a temporary one by default); yields the process and its address, and
    stops it (SIGINT) after unless it has ended."""
    with nullcontext(log) if log is not None else tempfile.TemporaryFile(mode="w+") as written:
        process = subprocess.Popen(
            [sys.executable, "-m", "attn_mt", *arguments, "--port", "0", "--device", "cpu"],
            stdout=subprocess.PIPE,
            stderr=written,
            text=True,
            env={**os.environ, "OMP_NUM_THREADS": "1"},
            **popen,
        )
        try:
            ready, _, _ = select.select([process.stdout], [], [], START_TIMEOUT_S)
            line = process.stdout.readline() if ready else ""
            if "http://127.0.0.1:" not in line:
                process.kill()
                process.wait()
                pytest.fail(f"the server did not start: {line!r} {written_text(written)[-3000:]}")
            yield process, line.split("http://", 1)[1].split("/", 1)[0]
        finally:
            if process.poll() is None:
                process.send_signal(signal.SIGINT)
                try:
                    process.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait()
            process.stdout.close()


def written_text(log: IO[str]) -> str:
    """What a server wrote to `log` so far, whether `log` was opened for reading too or not."""
    log.flush()
    if isinstance(log.name, str):
        return Path(log.name).read_text(encoding="utf-8", errors="replace")
    log.seek(0)
    return log.read()


def multipart(fields: dict[str, str], filename: str, content: bytes) -> tuple[bytes, str]:
    """A multipart/form-data body with `fields` and one file: the body and its Content-Type."""
    boundary = "attn-mt-test-boundary"
    parts = [
        f'--{boundary}\r\nContent-Disposition: form-data; name="{k}"\r\n\r\n{v}\r\n'.encode()
        for k, v in fields.items()
    ]
    head = f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="{filename}"\r\n\r\n'
    body = b"".join(parts) + head.encode() + content + f"\r\n--{boundary}--\r\n".encode()
    return body, f"multipart/form-data; boundary={boundary}"


def call(
    address: str,
    path: str,
    body: object = None,
    raw: bytes | None = None,
    content_type: str | None = "application/json",
    headers: dict[str, str] | None = None,
) -> tuple[int, dict]:
    """One HTTP request (POST when there is a body); the status and the decoded JSON answer."""
    data = raw if raw is not None else (None if body is None else json.dumps(body).encode("utf-8"))
    if data is not None and content_type is None:  # urllib would declare a form
        connection = http.client.HTTPConnection(address, timeout=ANSWER_TIMEOUT_S)
        try:
            connection.request("POST", path, body=data, headers=headers or {})
            response = connection.getresponse()
            return response.status, json.loads(response.read())
        finally:
            connection.close()
    request = urllib.request.Request(
        f"http://{address}{path}", data=data, method="GET" if data is None else "POST", headers=headers or {}
    )
    if data is not None and content_type is not None:
        request.add_header("Content-Type", content_type)
    try:
        with urllib.request.urlopen(request, timeout=ANSWER_TIMEOUT_S) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        with error:
            return error.code, json.loads(error.read())


def fetch(address: str, path: str) -> tuple[int, str, bytes]:
    """GET a page or file: its status, content type and bytes."""
    try:
        with urllib.request.urlopen(f"http://{address}{path}", timeout=ANSWER_TIMEOUT_S) as response:
            return response.status, response.headers.get("Content-Type", ""), response.read()
    except urllib.error.HTTPError as error:
        with error:
            return error.code, error.headers.get("Content-Type", ""), error.read()


WORKER_METRICS = {  # serve's /metrics sample -> the count's name here
    "attn_mt_queue_depth": "waiting",
    "attn_mt_decoder_batches_total": "batches",
    "attn_mt_decoder_sentences_total": "sentences",
    "attn_mt_decoder_dropped_total": "dropped",
    "attn_mt_decoder_refused_total": "refused",
    "attn_mt_decoder_expired_total": "expired",
    "attn_mt_decoder_stopped_total": "stopped",
    "attn_mt_queued_work": "queued_work",
}


def worker_counts(address: str) -> dict[str, int]:
    """The requests waiting for a batch, their work, and the decoding worker's batches, sentences,
    dropped, refused and expired jobs and stopped batches, read from serve's GET /metrics (Prometheus'
    text format)."""
    status, _, text = fetch(address, "/metrics")
    assert status == 200, text
    counts = {}
    for line in text.decode().splitlines():
        name, _, value = line.partition(" ")
        if name in WORKER_METRICS:
            counts[WORKER_METRICS[name]] = int(float(value))
    return counts


def wait_for_health(address: str, condition: Callable[[dict], bool]) -> dict:
    """Poll serve's counts (`worker_counts`) until `condition` holds for them; those counts."""
    deadline = time.monotonic() + ANSWER_TIMEOUT_S
    while True:
        counts = worker_counts(address)
        if condition(counts):
            return counts
        assert time.monotonic() < deadline, f"the server's counts never met the condition: {counts}"
        time.sleep(0.05)


def translate(address: str, sentences: list[str], **options: object) -> dict:
    """POST /translate and insist on success."""
    status, answer = call(address, "/translate", {"sentences": sentences, **options})
    assert status == 200, answer
    return answer


def assert_same_answers(got: object, expected: object, where: str = "answer") -> None:
    """Equal JSON answers: texts and tokens exactly, numbers to float32's rounding (batches reorder sums)."""
    if isinstance(expected, dict):
        assert isinstance(got, dict) and set(got) == set(expected), where
        for key in expected:
            assert_same_answers(got[key], expected[key], f"{where}.{key}")
    elif isinstance(expected, list):
        assert isinstance(got, list) and len(got) == len(expected), where
        for i, (a, b) in enumerate(zip(got, expected, strict=True)):
            assert_same_answers(a, b, f"{where}[{i}]")
    elif isinstance(expected, float):
        assert got == float32_approx(expected, terms=TINY_RUN_TERMS), where
    else:
        assert got == expected, where


def as_nbest_lines(answer: dict) -> list[str]:
    """An answer in the Moses-style lines `attn-mt translate --nbest N` prints."""
    lines = []
    for i, result in enumerate(answer["results"]):
        pairs = [(c["text"], c["score"]) for c in result["nbest"]]
        pairs += [("", 0.0)] * (answer["nbest"] - len(pairs))
        lines += [f"{i} ||| {text} ||| {score:.4f}" for text, score in pairs]
    return lines


# Requests for each row of the HTTP table in docs/errors.md.
TOO_MANY = {"sentences": ["alpha ."] * (MAX_SENTENCES + 1)}


ERROR_CASES: dict[str, dict] = {
    "malformed-json": {"raw": b'{"sentences": ["alpha ."'},
    "no-body": {"raw": b""},
    "not-an-object": {"body": ["alpha ."]},
    "form-body": {"raw": b"sentences=alpha", "content_type": "application/x-www-form-urlencoded"},
    "missing-sentences": {"body": {"beam": 2}},
    "empty-list": {"body": {"sentences": []}},
    "not-a-list": {"body": {"sentences": "alpha ."}},
    "not-text": {"body": {"sentences": ["alpha .", 3]}},
    "too-many-sentences": {"body": TOO_MANY},
    "too-long-sentence": {"body": {"sentences": ["a" * (MAX_CHARS + 1)]}},
    "beam-as-text": {"body": {"sentences": ["alpha ."], "beam": "2"}},
    "beam-zero": {"body": {"sentences": ["alpha ."], "beam": 0}},
    "beam-too-large": {"body": {"sentences": ["alpha ."], "beam": 17}},
    "nbest-over-beam": {"body": {"sentences": ["alpha ."], "beam": 2, "nbest": 3}},
    "negative-length-penalty": {"body": {"sentences": ["alpha ."], "length_penalty": -1.0}},
    "attention-not-boolean": {"body": {"sentences": ["alpha ."], "attention": "yes"}},
    "prefix-too-long": {"body": {"sentences": ["alpha ."], "prefix": "un " * 300}},
    "prefix-count": {"body": {"sentences": ["alpha ."], "prefix": ["un", "deux"]}},
    "sampling-without-sample": {"body": {"sentences": ["alpha ."], "top_k": 3}},
    "sample-with-beam": {"body": {"sentences": ["alpha ."], "sample": 2, "beam": 3}},
    "sample-too-large": {"body": {"sentences": ["alpha ."], "sample": 17}},
    "temperature-zero": {"body": {"sentences": ["alpha ."], "sample": 2, "temperature": 0.0}},
    "top-p-too-large": {"body": {"sentences": ["alpha ."], "sample": 2, "top_p": 1.5}},
    "alignments-not-boolean": {"body": {"sentences": ["alpha ."], "alignments": "yes"}},
    "unknown-field": {"body": {"sentences": ["alpha ."], "checkpoint": "/etc/passwd"}},
    "timeout-too-long": {"body": {"sentences": ["alpha ."], "timeout": 301.0}},
    "too-many-split-sentences": {"body": {"sentences": [" ".join(["Hi!"] * 250)] * MAX_SENTENCES}},
    "body-too-large": {"declared": MAX_BODY_BYTES + 1},
    "json-as-text": {"raw": b'{"sentences": ["alpha ."]}', "content_type": "text/plain"},
    "no-content-type": {"raw": b'{"sentences": ["alpha ."]}', "content_type": None},
    "foreign-host": {"body": {"sentences": ["alpha ."]}, "headers": {"Host": "rebound.example:8000"}},
    "cross-origin-api": {"path": "/score", "preflight": "https://elsewhere.example"},
    "cross-origin-post": {
        "body": {"sentences": ["alpha ."]},
        "headers": {"Origin": "https://elsewhere.example"},
    },
    "unknown-path": {"path": "/translations", "get": True},
    "wrong-method": {"path": "/translate", "get": True},
}


def answer_error_case(address: str, request: dict) -> tuple[int, dict]:
    """Send one of ERROR_CASES to the server at `address` as it is meant to arrive; its status and answer."""
    if request.get("get"):
        return call(address, request["path"])
    if "preflight" in request:
        return preflight_answer(address, request["path"], request["preflight"])
    if "declared" in request:  # refused on its Content-Length, before the body is sent
        return raw_answer(raw_request(address, b"", request["declared"]))
    return call(
        address,
        "/translate",
        request.get("body"),
        raw=request.get("raw"),
        content_type=request.get("content_type", "application/json"),
        headers=request.get("headers"),
    )


def documented_http_errors() -> dict[str, tuple[int, str]]:
    """id -> (status, message fragment) from the server's table in docs/errors.md (five columns)."""
    cases = {}
    for line in ERRORS_DOC.read_text(encoding="utf-8").splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split(" | ")]
        if len(cells) == 5 and cells[0] not in ("id", "---"):
            cases[cells[0]] = (int(cells[1]), cells[4].strip("`"))
    return cases


def preflight_answer(address: str, path: str, origin: str) -> tuple[int, dict]:
    """A browser's CORS preflight for a JSON POST to `path` from a page of `origin`; status and answer."""
    connection = http.client.HTTPConnection(address, timeout=ANSWER_TIMEOUT_S)
    try:
        asked = {"Origin": origin, "Access-Control-Request-Method": "POST"}
        connection.request("OPTIONS", path, headers=asked)
        response = connection.getresponse()
        return response.status, json.loads(response.read())
    finally:
        connection.close()


def raw_request(address: str, body: bytes, declared_length: int) -> socket.socket:
    """Open a connection and send a POST /translate head and `body` (possibly less than declared)."""
    host, port = address.rsplit(":", 1)
    sock = socket.create_connection((host, int(port)), timeout=ANSWER_TIMEOUT_S)
    head = (
        f"POST /translate HTTP/1.1\r\nHost: {address}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {declared_length}\r\n\r\n"
    )
    sock.sendall(head.encode("ascii") + body)
    return sock


def raw_answer(sock: socket.socket) -> tuple[int, dict]:
    """Read the HTTP answer on a connection opened by `raw_request`."""
    with sock:
        response = http.client.HTTPResponse(sock)
        response.begin()
        return response.status, json.loads(response.read())


def translate_lines(
    run_cli: Callable, model: Path, sentences: list[str], options: list[str], work: Path
) -> list[str]:
    """What `attn-mt translate MODEL` prints for the sentences, given in a file of `work`, one per line."""
    source = work / "cli_input.txt"
    source.write_text("".join(s + "\n" for s in sentences), encoding="utf-8")
    result = run_cli("translate", str(model), "--input", str(source), "--device", "cpu", *options)
    assert result.returncode == 0, result.stderr
    return result.stdout.splitlines()


def onnx_greedy_is_torchs(run_dir: Path, folder: Path, run_cli: Callable, sentences: list[str]) -> Any:
    """Export `run_dir` to ONNX in `folder`; onnxruntime's greedy output of `sentences` must be torch's, token
    for token, or part from it only at a near-tie (support/near_ties.py). Returns the folder's OnnxModel."""
    import torch

    from attn_mt.data.dataset import encode_sources
    from attn_mt.decoding.outputs import prepare_sentence
    from attn_mt.decoding.search import greedy_search
    from attn_mt.run.run_dir import load_run
    from attn_mt.shipping.onnx_graphs import OnnxModel
    from support.near_ties import assert_near_tie, greedy_parting
    from support.tolerances import decoding_terms

    result = run_cli("export", str(run_dir), str(folder), "--format", "onnx")
    assert result.returncode == 0, result.stderr
    run = load_run(run_dir, "best")
    encoded = encode_sources(
        [prepare_sentence(run.config, run.src_vocab, s) for s in sentences], run.src_vocab, max_len=40
    )
    assert len(set(encoded.src_lens.tolist())) > 1, "the batch must hold padding"
    with torch.inference_mode():
        expected = greedy_search(
            run.model, encoded.src, encoded.src_lens, bos_id=2, eos_id=3, max_len_a=1.5, max_len_b=5
        )
    limits = torch.floor(encoded.src_lens * 1.5 + 5).long().numpy()
    model = OnnxModel(folder)
    got = model.greedy(encoded.src.numpy(), encoded.src_lens.numpy(), 2, 3, limits)
    widest = max(run.config.model.num_hiddens, run.config.model.ffn_num_hiddens)
    terms = decoding_terms(steps=int(limits.max()), widest=widest, keys_or_vocab=len(run.tgt_vocab))
    for row, (tokens, hypothesis) in enumerate(zip(got, expected, strict=True)):
        src_ids, src_len = encoded.src[row].tolist(), int(encoded.src_lens[row])
        parting = greedy_parting(
            run.model, src_ids, src_len, hypothesis.tokens, tokens, bos_id=2, eos_id=3, terms=terms
        )
        assert_near_tie(parting, f"ONNX against torch on {sentences[row]!r}")
    assert any(len(tokens) > 2 for tokens in got)
    return model


def load_script(name: str, monkeypatch: pytest.MonkeyPatch | None = None) -> Any:
    """scripts/NAME.py as a module (scripts/ is not a package), registered in sys.modules under NAME (its
    dataclasses look their module up): while the test runs with `monkeypatch`, else for the session."""
    path = Path(__file__).resolve().parents[2] / "scripts" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    if monkeypatch is None:
        sys.modules[name] = module
    else:
        monkeypatch.setitem(sys.modules, name, module)
    spec.loader.exec_module(module)
    return module


def make_dry_run(tmp_path: Path, *arguments: str) -> str:
    """`make -n ARGUMENTS` in a fresh clone (the Makefile and pyproject.toml only: no .venv): its stdout.

    A make of its own, not a sub-make of `make test`, which would print its directories and pass on flags.
    """
    clone = tmp_path / "clone"
    clone.mkdir(exist_ok=True)
    shutil.copy(ROOT / "Makefile", clone / "Makefile")
    shutil.copy(ROOT / "pyproject.toml", clone / "pyproject.toml")
    alone = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MAKELEVEL", "MFLAGS")}
    done = subprocess.run(
        ["make", "-n", *arguments], capture_output=True, text=True, cwd=clone, check=True, env=alone
    )
    return done.stdout
