"""`attn-mt serve`: real HTTP against server processes started here on free ports of 127.0.0.1, with
tiny models trained on the reverse task; answers are compared with `attn-mt translate` and with the
model's attention computed in this process."""

from __future__ import annotations

import http.client
import json
import os
import re
import select
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest
import torch
from devtools import Browser
from synthetic import reverse_pairs
from test_report import CHROMIUM_FLAGS, chromium_binary
from tolerances import assert_float32_close, decoding_terms, float32_approx

from attn_mt.cli import main
from attn_mt.commands.evaluate import run_eval
from attn_mt.config import load_config
from attn_mt.decoding.translator import Translator
from attn_mt.run.run_dir import load_run
from attn_mt.serving.schemas import MAX_BODY_BYTES, MAX_CHARS, MAX_SENTENCES

ROOT = Path(__file__).resolve().parent.parent
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
def server(run_dir: Path, *options: str) -> Iterator[str]:
    """`attn-mt serve RUN_DIR --port 0 ...` in its own process; yields its base URL, stops it after."""
    process = subprocess.Popen(
        [sys.executable, "-m", "attn_mt", "serve", str(run_dir), "--port", "0", "--device", "cpu", *options],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    try:
        ready, _, _ = select.select([process.stdout], [], [], START_TIMEOUT_S)
        line = process.stdout.readline() if ready else ""
        if "http://127.0.0.1:" not in line:
            process.kill()
            pytest.fail(f"the server did not start: {line!r} {process.stderr.read()[-3000:]}")
        yield line.split("http://", 1)[1].split("/", 1)[0]
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGINT)
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        process.stdout.close()
        process.stderr.close()


def call(
    address: str,
    path: str,
    body: object = None,
    raw: bytes | None = None,
    content_type: str = "application/json",
) -> tuple[int, dict]:
    """One HTTP request (POST when there is a body); the status and the decoded JSON answer."""
    data = raw if raw is not None else (None if body is None else json.dumps(body).encode("utf-8"))
    request = urllib.request.Request(
        f"http://{address}{path}", data=data, method="GET" if data is None else "POST"
    )
    if data is not None:
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


def wait_for_health(address: str, condition: Callable[[dict], bool]) -> dict:
    """Poll /health until `condition` holds for its answer; that answer."""
    deadline = time.monotonic() + ANSWER_TIMEOUT_S
    while True:
        status, health = call(address, "/health")
        assert status == 200, health
        if condition(health):
            return health
        assert time.monotonic() < deadline, f"/health never met the condition: {health}"
        time.sleep(0.05)


def translate(address: str, sentences: list[str], **options: object) -> dict:
    """POST /translate and insist on success."""
    status, answer = call(address, "/translate", {"sentences": sentences, **options})
    assert status == 200, answer
    return answer


def cli_translate(run_dir: Path, sentences: list[str], options: list[str], capsys, monkeypatch) -> list[str]:
    """What `attn-mt translate` prints for the sentences (given on standard input, one per line)."""
    source = run_dir.parent / "cli_input.txt"
    source.write_text("".join(s + "\n" for s in sentences), encoding="utf-8")
    capsys.readouterr()
    monkeypatch.setattr(
        sys,
        "argv",
        ["attn-mt", "translate", str(run_dir), "--input", str(source), "--device", "cpu", *options],
    )
    with pytest.raises(SystemExit) as info:
        main()
    assert info.value.code == 0
    return capsys.readouterr().out.splitlines()


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


@pytest.fixture(scope="module")
def runs(tiny_runs, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Copies of the session's Transformer (2 layers, 2 heads; evaluated on test) and GRU + Bahdanau runs."""
    dirs = tiny_runs.copy_to(tmp_path_factory.mktemp("serving_runs"))
    run_eval(dirs["transformer"], "test", None, 0, None, "best", str(tiny_runs.corpus), "cpu")
    return dirs


@pytest.fixture(scope="module")
def transformer_server(runs) -> Iterator[str]:
    """The Transformer run served with the default batching options."""
    with server(runs["transformer"]) as address:
        yield address


def test_translations_and_nbest_equal_the_translate_command(runs, transformer_server, capsys, monkeypatch):
    run_dir = runs["transformer"]
    greedy = translate(transformer_server, SENTENCES, beam=1)
    assert (greedy["beam"], greedy["nbest"]) == (1, 1)
    assert [r["translation"] for r in greedy["results"]] == cli_translate(
        run_dir, SENTENCES, ["--beam", "1"], capsys, monkeypatch
    )
    beam = translate(transformer_server, SENTENCES, beam=3, nbest=3, length_penalty=0.5)
    assert as_nbest_lines(beam) == cli_translate(
        run_dir, SENTENCES, ["--beam", "3", "--nbest", "3", "--length-penalty", "0.5"], capsys, monkeypatch
    )
    default = translate(transformer_server, SENTENCES[:3])
    assert default["beam"] == load_config(run_dir / "config.yaml").decode.beam_size  # the run's own: 2
    assert [r["translation"] for r in default["results"]] == cli_translate(
        run_dir, SENTENCES[:3], [], capsys, monkeypatch
    )

    for result in beam["results"]:
        assert len(result["nbest"]) == (3 if result["source"] else 0)
        scores = [c["score"] for c in result["nbest"]]
        assert scores == sorted(scores, reverse=True)
        assert result["translation"] == (result["nbest"][0]["text"] if result["nbest"] else "")
    unknown, blank, long = beam["results"][-3:]
    assert unknown["source_tokens"] == ["alpha", "zulu", "bravo", "."]
    assert any("zulu" in w for w in unknown["warnings"])
    assert blank["source_tokens"] == [] and blank["translation"] == "" and blank["attention"] is None
    assert any("source cut to" in w for w in long["warnings"])


def test_attention_maps_have_the_models_shapes_and_values(runs, transformer_server):
    answer = translate(transformer_server, SENTENCES[:4], attention=True, beam=2)
    loaded = load_run(runs["transformer"], "best", "cpu")
    translator = Translator(loaded.model, loaded.src_vocab, loaded.tgt_vocab, loaded.config)
    layers, heads = loaded.config.model.num_layers, loaded.config.model.num_heads
    expected_translations = translator.translate(SENTENCES[:4], beam_size=2)
    for result, expected in zip(answer["results"], expected_translations, strict=True):
        attention = result["attention"]
        S, T = len(result["source_tokens"]) + 1, len(result["nbest"][0]["tokens"]) + 1
        assert attention["source_tokens"] == [*result["source_tokens"], "<eos>"]
        assert attention["output_tokens"] == [*result["nbest"][0]["tokens"], "<eos>"]
        assert attention["decoder_input_tokens"] == ["<bos>", *result["nbest"][0]["tokens"]]
        shapes = {name: np.asarray(maps).shape for name, maps in attention["maps"].items()}
        assert shapes == {
            "encoder_self": (layers, heads, S, S),
            "decoder_self": (layers, heads, T, T),
            "cross": (layers, heads, T, S),
        }
        reference = translator.attention(expected)
        for name, maps in attention["maps"].items():
            assert_float32_close(
                torch.tensor(maps), torch.from_numpy(reference.maps[name]), terms=TINY_RUN_TERMS
            )
            np.testing.assert_allclose(np.sum(maps, axis=-1), 1.0, atol=1e-4)
        assert not np.allclose(attention["maps"]["cross"][0][0], attention["maps"]["cross"][0][1])


def test_gru_bahdanau_attention_is_one_alignment(runs):
    run_dir = runs["gru_bahdanau"]
    with server(run_dir, "--checkpoint", "last") as address:
        answer = translate(address, SENTENCES[:2], attention=True)
        _, info = call(address, "/info")
    loaded = load_run(run_dir, "last", "cpu")
    translator = Translator(loaded.model, loaded.src_vocab, loaded.tgt_vocab, loaded.config)
    for result, expected in zip(answer["results"], translator.translate(SENTENCES[:2]), strict=True):
        maps = result["attention"]["maps"]
        S, T = len(result["source_tokens"]) + 1, len(result["nbest"][0]["tokens"]) + 1
        assert list(maps) == ["cross"] and np.asarray(maps["cross"]).shape == (1, 1, T, S)
        reference = translator.attention(expected).maps["cross"]
        assert_float32_close(
            torch.tensor(maps["cross"][0][0]), torch.from_numpy(reference), terms=TINY_RUN_TERMS
        )
    assert info["model"] == "gru_bahdanau" and info["checkpoint"] == "last.pt" and info["eval_scores"] == {}


def test_health_info_and_api_description(runs, transformer_server):
    run_dir = runs["transformer"]
    status, health = call(transformer_server, "/health")
    assert status == 200 and health["status"] == "ok"
    assert set(health) == {"status", "waiting", "batches", "sentences", "dropped"}
    host, port = transformer_server.rsplit(":", 1)
    assert host == "127.0.0.1"
    outside = {a[4][0] for a in socket.getaddrinfo(socket.gethostname(), None, socket.AF_INET)}
    for ip in {ip for ip in outside if not ip.startswith("127.")}:  # not reachable from the network
        with pytest.raises(OSError):
            socket.create_connection((ip, int(port)), timeout=5).close()
    status, info = call(transformer_server, "/info")
    assert status == 200
    loaded = load_run(run_dir, "best", "cpu")
    assert info["model"] == "transformer" and info["checkpoint"] == "best.pt"
    assert info["step"] == loaded.step > 0
    assert info["config"] == loaded.config.to_dict()
    assert info["source_vocab_size"] == len(loaded.src_vocab)
    assert info["target_vocab_size"] == len(loaded.tgt_vocab)
    assert info["parameters"] == sum(p.numel() for p in loaded.model.parameters())
    scores = json.loads((run_dir / "eval" / "test" / "scores.json").read_text())
    assert info["eval_scores"]["test"]["bleu"] == scores["bleu"]
    assert info["limits"]["max_sentences"] == MAX_SENTENCES and info["batching"]["max_batch"] == 64
    status, api = call(transformer_server, "/openapi.json")
    assert status == 200 and {"/translate", "/info", "/health"} <= set(api["paths"])
    request_schema = api["components"]["schemas"]["TranslateRequest"]
    assert set(request_schema["properties"]) == {"sentences", "beam", "nbest", "length_penalty", "attention"}
    with urllib.request.urlopen(f"http://{transformer_server}/docs", timeout=ANSWER_TIMEOUT_S) as page:
        assert page.status == 200 and b"/openapi.json" in page.read()


def docs_references(html: str) -> list[str]:
    """Every URL the /docs page loads: its scripts, style sheets, icon and the OpenAPI description."""
    return re.findall(r'(?:src|href)="([^"]*)"', html) + re.findall(r"url: '([^']*)'", html)


def test_api_docs_are_served_offline(transformer_server, tmp_path):
    status, kind, page = fetch(transformer_server, "/docs")
    html = page.decode("utf-8")
    assert status == 200 and kind.startswith("text/html") and "SwaggerUIBundle" in html
    assert "://" not in html  # nothing from another host: no CDN, no fonts
    references = docs_references(html)
    assert {"/openapi.json", "/docs/static/swagger-ui-bundle.js", "/docs/static/swagger-ui.css"} <= set(
        references
    ), references
    for reference in references:
        assert reference.startswith("/") and not reference.startswith("//"), reference
        status, kind, content = fetch(transformer_server, reference)
        assert status == 200 and len(content) > 0, reference
    status, _, content = fetch(transformer_server, "/redoc")  # only one API page, the offline one
    assert status == 404 and set(json.loads(content)) == {"error", "problems"}

    browser = Browser(chromium_binary(), CHROMIUM_FLAGS + ["--window-size=1200,1600"], tmp_path / "profile")
    try:
        origin = f"http://{transformer_server}"
        browser.open(origin + "/docs")
        shown = browser.wait_for(
            "(() => { const paths = [...document.querySelectorAll('.opblock-summary-path')]"
            ".map((e) => e.dataset.path); return paths.length >= 3 && paths; })()"
        )
        assert {"/translate", "/health", "/info"} <= set(shown), shown
        assert browser.errors() == []
        assert all(url.startswith(origin + "/") for url in browser.requested_urls()), browser.requested_urls()
    finally:
        browser.close()


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
    "unknown-field": {"body": {"sentences": ["alpha ."], "checkpoint": "/etc/passwd"}},
    "body-too-large": {"declared": MAX_BODY_BYTES + 1},
    "unknown-path": {"path": "/translations", "get": True},
    "wrong-method": {"path": "/translate", "get": True},
}


def documented_http_errors() -> dict[str, tuple[int, str]]:
    """id -> (status, message fragment) from the server's table in docs/errors.md (five columns)."""
    cases = {}
    for line in ERRORS_DOC.read_text(encoding="utf-8").splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split(" | ")]
        if len(cells) == 5 and cells[0] not in ("id", "---"):
            cases[cells[0]] = (int(cells[1]), cells[4].strip("`"))
    return cases


def test_every_documented_http_error(transformer_server):
    documented = documented_http_errors()
    assert set(documented) == set(ERROR_CASES)
    for case, request in ERROR_CASES.items():
        if request.get("get"):
            status, answer = call(transformer_server, request["path"])
        elif "declared" in request:  # refused on its Content-Length, before the body is sent
            status, answer = raw_answer(raw_request(transformer_server, b"", request["declared"]))
        else:
            kind = request.get("content_type", "application/json")
            status, answer = call(
                transformer_server,
                "/translate",
                request.get("body"),
                raw=request.get("raw"),
                content_type=kind,
            )
        expected_status, message = documented[case]
        assert status == expected_status, (case, answer)
        assert set(answer) == {"error", "problems"} and message in answer["error"], (case, answer)
        assert "Traceback" not in json.dumps(answer)
    status, answer = call(transformer_server, "/translate", {"sentences": ["alpha .", 3], "beam": "2"})
    assert status == 422 and answer["problems"] == [
        "sentences[1]: Input should be a valid string",
        "beam: Input should be a valid integer",
    ]
    assert translate(transformer_server, ["alpha ."] * MAX_SENTENCES)["results"][0]["translation"] != ""


def test_a_wrong_method_names_the_allowed_ones_and_whole_numbers_are_integers(transformer_server):
    """RFC 9110: a 405 answer carries Allow. JSON Schema's "integer" holds 2.0, so beam and nbest take it."""
    request = urllib.request.Request(f"http://{transformer_server}/translate", method="GET")
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(request, timeout=ANSWER_TIMEOUT_S)
    with refused.value as answer:
        assert answer.code == 405 and answer.headers["Allow"] == "POST"
        assert set(json.loads(answer.read())) == {"error", "problems"}
    whole = translate(transformer_server, SENTENCES[:2], beam=2.0, nbest=2.0)
    assert whole == translate(transformer_server, SENTENCES[:2], beam=2, nbest=2)
    status, answer = call(transformer_server, "/translate", {"sentences": ["alpha ."], "nbest": 1.5})
    assert status == 422 and answer["problems"] == [
        "nbest: Input should be a valid integer, got a fractional number"
    ]


def test_concurrent_requests_equal_sequential_ones_and_translate(
    runs, transformer_server, capsys, monkeypatch
):
    run_dir = runs["transformer"]
    sentences = [en for en, _ in reverse_pairs(16, seed=3)]
    options = [{"beam": 1}, {"beam": 2, "nbest": 2}]  # two option sets, interleaved, 8 requests each
    jobs = [([s], options[i % 2]) for i, s in enumerate(sentences)]
    # Batches of 4 and a long wait: every batch is 4 requests with the same options, however they arrive.
    with server(run_dir, "--max-batch", "4", "--max-wait-ms", "10000") as address:
        with ThreadPoolExecutor(len(jobs)) as pool:
            together = list(pool.map(lambda job: translate(address, job[0], **job[1]), jobs))
        _, health = call(address, "/health")
    assert (health["batches"], health["sentences"]) == (4, 16)
    alone = [translate(transformer_server, s, **opts) for s, opts in jobs]  # one request at a time
    in_one = [translate(transformer_server, sentences, **opts) for opts in options]
    assert_same_answers(together, alone)
    greedy = cli_translate(run_dir, sentences, ["--beam", "1"], capsys, monkeypatch)
    nbest = cli_translate(run_dir, sentences, ["--beam", "2", "--nbest", "2"], capsys, monkeypatch)
    assert [r["translation"] for r in in_one[0]["results"]] == greedy
    assert as_nbest_lines(in_one[1]) == nbest
    for i, answer in enumerate(together):
        if i % 2 == 0:
            assert answer["results"][0]["translation"] == greedy[i]
        else:
            assert [line.split(" ||| ", 1)[1] for line in as_nbest_lines(answer)] == [
                line.split(" ||| ", 1)[1] for line in nbest[2 * i : 2 * i + 2]
            ]


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


def test_clients_that_disconnect_do_not_disturb_others(transformer_server):
    same = {"beam": 2, "nbest": 2, "attention": True}
    before = translate(transformer_server, SENTENCES, **same)
    body = json.dumps({"sentences": SENTENCES, "beam": 2, "nbest": 2, "attention": True}).encode()
    half = raw_request(transformer_server, body[: len(body) // 2], len(body))  # leaves mid-body
    whole = [raw_request(transformer_server, body, len(body)) for _ in range(4)]  # leave before the answer
    with ThreadPoolExecutor(4) as pool:
        during = list(pool.map(lambda _: translate(transformer_server, SENTENCES, **same), range(4)))
        for sock in [half, *whole]:
            sock.close()
    after = translate(transformer_server, SENTENCES, **same)
    assert_same_answers(during, [before] * 4)
    assert_same_answers(after, before)
    assert call(transformer_server, "/health")[0] == 200


def test_a_client_that_leaves_while_queued_is_not_decoded(runs, transformer_server):
    sentences = [en for en, _ in reverse_pairs(4, seed=5)]
    alone = [translate(transformer_server, [s], beam=1) for s in sentences[1:]]
    # Room for 4 sentences and a 5 s wait: whether the worker meets the cancelled job in the batch it
    # is gathering or before it, the 3 later requests are decoded as one batch without it.
    with server(runs["transformer"], "--max-batch", "4", "--max-wait-ms", "5000") as address:
        body = json.dumps({"sentences": sentences[:1], "beam": 1}).encode()
        leaving = raw_request(address, body, len(body))
        wait_for_health(address, lambda health: health["waiting"] == 1)
        leaving.close()
        wait_for_health(address, lambda health: health["waiting"] == 0)  # the server saw it leave
        with ThreadPoolExecutor(3) as pool:
            staying = list(pool.map(lambda s: translate(address, [s], beam=1), sentences[1:]))
        _, health = call(address, "/health")
    assert_same_answers(staying, alone)
    assert (health["batches"], health["sentences"], health["dropped"]) == (1, 3, 1), health


def test_serve_refuses_a_port_in_use_and_bad_options(runs, capsys, monkeypatch):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        for argv, message in (
            (["--port", str(port)], f"cannot listen on 127.0.0.1:{port}"),
            (["--max-batch", "0"], "--max-batch must be at least 1"),
            (["--checkpoint", "newest"], "--checkpoint newest: no such checkpoint file"),
        ):
            monkeypatch.setattr(sys, "argv", ["attn-mt", "serve", str(runs["transformer"]), *argv])
            with pytest.raises(SystemExit) as info:
                main()
            stderr = capsys.readouterr().err
            assert info.value.code == 2 and message in stderr and "Traceback" not in stderr


def test_explorer_page_in_headless_chromium(runs, transformer_server, tmp_path):
    sentence = "Alpha bravo charlie delta."
    answer = translate(transformer_server, [sentence], attention=True, beam=3, nbest=3)["results"][0]
    expected = answer["attention"]
    rows, cols = len(expected["output_tokens"]), len(expected["source_tokens"])
    browser = Browser(chromium_binary(), CHROMIUM_FLAGS + ["--window-size=1200,1600"], tmp_path / "profile")
    try:
        page = f"http://{transformer_server}"
        browser.open(page + "/")
        browser.wait_for("document.getElementById('model').textContent.includes('transformer')")
        browser.type_text("#source", sentence)
        browser.type_text("#beam", "3")
        browser.type_text("#nbest", "3")
        browser.click("#translate")
        browser.wait_for("document.querySelectorAll('#heatmap rect.cell').length > 0")

        def heatmap() -> dict:
            return browser.evaluate(
                "(() => { const cells = [...document.querySelectorAll('#heatmap rect.cell')]; return {"
                "rows: new Set(cells.map((c) => c.dataset.row)).size,"
                "cols: new Set(cells.map((c) => c.dataset.col)).size, cells: cells.length,"
                "weights: cells.map((c) => Number(c.dataset.weight)),"
                "rowLabels: [...document.querySelectorAll('#heatmap .row-label')].map((t) => t.textContent),"
                "colLabels: [...document.querySelectorAll('#heatmap .col-label')].map((t) => t.textContent)};"
                "})()"
            )

        def expected_weights(name: str, layer: int, head: int | None) -> np.ndarray:
            maps = np.asarray(expected["maps"][name][layer])  # (h, Q, K)
            return (maps.mean(axis=0) if head is None else maps[head]).ravel()

        shown = heatmap()  # the cross-attention of layer 1, average of heads, first
        assert (shown["rows"], shown["cols"], shown["cells"]) == (rows, cols, rows * cols)
        assert shown["rowLabels"] == expected["output_tokens"]
        assert shown["colLabels"] == expected["source_tokens"]
        assert browser.evaluate("document.getElementById('translation').textContent") == answer["translation"]
        table = browser.evaluate("[...document.querySelectorAll('#nbest-list tr')].map((r) => r.innerText)")
        assert table == [f"{k}\t{c['text']}\t{c['score']:.4f}" for k, c in enumerate(answer["nbest"], 1)]
        np.testing.assert_allclose(shown["weights"], expected_weights("cross", 0, None), atol=1e-5)
        browser.choose("#head", "0")
        head_one = heatmap()["weights"]
        browser.choose("#head", "1")
        head_two = heatmap()["weights"]
        np.testing.assert_allclose(head_one, expected_weights("cross", 0, 0), atol=1e-5)
        np.testing.assert_allclose(head_two, expected_weights("cross", 0, 1), atol=1e-5)
        assert not np.allclose(head_one, head_two)
        browser.choose("#layer", "1")
        np.testing.assert_allclose(heatmap()["weights"], expected_weights("cross", 1, 1), atol=1e-5)

        browser.choose("#map", "encoder_self")
        encoder = heatmap()
        assert (encoder["rows"], encoder["cols"]) == (cols, cols)
        np.testing.assert_allclose(encoder["weights"], expected_weights("encoder_self", 1, 1), atol=1e-5)
        browser.choose("#map", "decoder_self")
        decoder = heatmap()
        assert (decoder["rows"], decoder["cols"]) == (rows, rows)
        assert decoder["colLabels"] == expected["decoder_input_tokens"]

        browser.hover("#heatmap rect.cell[data-row='1'][data-col='0']")
        weight = expected["maps"]["decoder_self"][1][1][1][0]
        assert f"weight {weight:.4f}" in browser.wait_for(
            "document.getElementById('hover').textContent.includes('weight') && "
            "document.getElementById('hover').textContent"
        )
        other = translate(transformer_server, ["Golf hotel."], beam=3, nbest=3, attention=True)["results"][0]
        browser.type_text("#source", "Golf hotel.")
        browser.evaluate("document.getElementById('status').textContent = ''")
        browser.press_enter()  # Enter in the text box translates too
        browser.wait_for("document.getElementById('status').textContent.startsWith('beam 3')")
        assert browser.evaluate("document.getElementById('source').value") == "Golf hotel."
        assert browser.evaluate("document.getElementById('translation').textContent") == other["translation"]
        assert heatmap()["rowLabels"] == other["attention"]["output_tokens"]  # still decoder self-attention
        assert heatmap()["colLabels"] == other["attention"]["decoder_input_tokens"]
        assert browser.errors() == []
        assert all(url.startswith(page + "/") for url in browser.requested_urls()), browser.requested_urls()
        assert {page + "/page/explorer.js", page + "/page/style.css", page + "/translate"} <= set(
            browser.requested_urls()
        )
    finally:
        browser.close()
