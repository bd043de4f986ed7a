"""`attn-mt serve`: real HTTP against server processes started here on free ports of 127.0.0.1, with
tiny models trained on the reverse task; answers are compared with `attn-mt translate` and with the
model's attention computed in this process."""

from __future__ import annotations

import json
import re
import socket
import urllib.error
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
import torch
from support.devtools import Browser
from support.helpers import (
    ANSWER_TIMEOUT_S,
    CHROMIUM_FLAGS,
    ERROR_CASES,
    SENTENCES,
    TINY_RUN_TERMS,
    answer_error_case,
    as_nbest_lines,
    assert_same_answers,
    call,
    documented_http_errors,
    fetch,
    raw_request,
    server,
    translate,
    translate_lines,
    wait_for_health,
    worker_counts,
)
from support.synthetic import reverse_pairs
from support.tolerances import assert_float32_close

from attn_mt.commands.evaluate import run_eval
from attn_mt.config import load_config
from attn_mt.decoding.engines import translator_for
from attn_mt.decoding.scoring import score_with
from attn_mt.decoding.translator import Translator
from attn_mt.run.open import open_model
from attn_mt.run.run_dir import load_run
from attn_mt.serving.schemas import MAX_SENTENCES


@pytest.fixture(scope="module")
def runs(tiny_runs, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Copies of the session's Transformer (2 layers, 2 heads; evaluated on test) and GRU + Bahdanau runs."""
    dirs = tiny_runs.copy_to(tmp_path_factory.mktemp("serving_runs"))
    run_eval(dirs["transformer"], "test", None, 0, None, "best", str(tiny_runs.corpus), "cpu")
    return dirs


@pytest.fixture(scope="module")
def transformer_server(runs) -> Iterator[str]:
    """The Transformer run served with the default batching options. The tests that share it are about
    answers, not admission: a queue wait of a minute keeps a slow or busy machine from refusing their
    concurrent requests (503), which tests/test_serving_limits.py covers."""
    with server(runs["transformer"], "--max-queue-wait", "60") as address:
        yield address


def test_translations_and_nbest_equal_the_translate_command(runs, transformer_server, run_cli, tmp_path):
    run_dir = runs["transformer"]
    greedy = translate(transformer_server, SENTENCES, beam=1)
    assert (greedy["beam"], greedy["nbest"]) == (1, 1)
    assert [r["translation"] for r in greedy["results"]] == translate_lines(
        run_cli, run_dir, SENTENCES, ["--beam", "1"], tmp_path
    )
    beam = translate(transformer_server, SENTENCES, beam=3, nbest=3, length_penalty=0.5)
    assert as_nbest_lines(beam) == translate_lines(
        run_cli, run_dir, SENTENCES, ["--beam", "3", "--nbest", "3", "--length-penalty", "0.5"], tmp_path
    )
    default = translate(transformer_server, SENTENCES[:3])
    assert default["beam"] == load_config(run_dir / "config.yaml").decode.beam_size  # the run's own: 2
    assert [r["translation"] for r in default["results"]] == translate_lines(
        run_cli, run_dir, SENTENCES[:3], [], tmp_path
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
    assert call(transformer_server, "/health") == (200, {"status": "ok"})  # LibreTranslate's, exactly
    counts = set(worker_counts(transformer_server))
    assert counts == {
        "waiting",
        "batches",
        "sentences",
        "dropped",
        "queued_work",
        "refused",
        "expired",
        "stopped",
    }
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
    assert (info["limits"]["request_timeout_s"], info["limits"]["max_request_timeout_s"]) == (60, 300)
    status, api = call(transformer_server, "/openapi.json")
    assert status == 200 and {"/translate", "/info", "/health"} <= set(api["paths"])
    request_schema = api["components"]["schemas"]["TranslateRequest"]
    assert set(request_schema["properties"]) == {
        "sentences",
        "beam",
        "nbest",
        "length_penalty",
        "attention",
        "split",
        "prefix",
        "sample",
        "temperature",
        "top_k",
        "top_p",
        "seed",
        "alignments",
        "timeout",
    }
    fields = request_schema["properties"]
    assert fields["temperature"]["anyOf"][0]["exclusiveMinimum"] == 0
    assert (fields["top_p"]["anyOf"][0]["exclusiveMinimum"], fields["top_p"]["anyOf"][0]["maximum"]) == (0, 1)
    assert fields["sample"]["anyOf"][0]["minimum"] == 1
    with urllib.request.urlopen(f"http://{transformer_server}/docs", timeout=ANSWER_TIMEOUT_S) as page:
        assert page.status == 200 and b"/openapi.json" in page.read()


def docs_references(html: str) -> list[str]:
    """Every URL the /docs page loads: its scripts, style sheets, icon and the OpenAPI description."""
    return re.findall(r'(?:src|href)="([^"]*)"', html) + re.findall(r"url: '([^']*)'", html)


def test_api_docs_are_served_offline(transformer_server, chromium, tmp_path):
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

    browser = Browser(chromium, CHROMIUM_FLAGS + ["--window-size=1200,1600"], tmp_path / "profile")
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


def test_every_documented_http_error(transformer_server):
    documented = documented_http_errors()
    assert set(documented) == set(ERROR_CASES)
    for case, request in ERROR_CASES.items():
        status, answer = answer_error_case(transformer_server, request)
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


def test_entries_are_translated_sentence_by_sentence_as_translate_does(
    runs, transformer_server, run_cli, tmp_path
):
    entries = ["Alpha bravo. Charlie delta echo.  Golf hotel.", "", "  Alpha bravo.  "]
    answer = translate(transformer_server, entries, beam=2, nbest=2, attention=True)
    printed = translate_lines(run_cli, runs["transformer"], entries, ["--beam", "2"], tmp_path)
    assert [r["translation"] for r in answer["results"]] == printed
    paragraph, blank, spaced = answer["results"]
    parts = paragraph["sentences"]
    assert [p["source"] for p in parts] == ["Alpha bravo.", "Charlie delta echo.", "Golf hotel."]
    alone = translate(transformer_server, [p["source"] for p in parts], beam=2, nbest=2, attention=True)
    assert_same_answers(parts, alone["results"], "the sentences of an entry")
    assert paragraph["attention"] is None and all(p["attention"] for p in parts)
    assert paragraph["source_tokens"] == [t for p in parts for t in p["source_tokens"]]
    for k, candidate in enumerate(paragraph["nbest"]):
        texts = [p["nbest"][k]["text"] for p in parts]
        assert candidate["text"] == f"{texts[0]} {texts[1]}  {texts[2]}"
        assert candidate["score"] == pytest.approx(sum(p["nbest"][k]["score"] for p in parts))
    assert (blank["translation"], blank["nbest"], blank["sentences"]) == ("", [], None)
    assert spaced["translation"] == f"  {parts[0]['translation']}  " and spaced["sentences"] is None
    whole = translate(transformer_server, entries, beam=2, split=False)
    printed = translate_lines(run_cli, runs["transformer"], entries, ["--beam", "2", "--no-split"], tmp_path)
    assert [r["translation"] for r in whole["results"]] == printed
    assert all(r["sentences"] is None for r in whole["results"])


def score_command(run_cli, run: Path, pairs: list[dict], work: Path, *options: str):
    """`attn-mt score RUN` of the pairs, written to two files in `work`."""
    (work / "src").write_text("".join(p["source"] + "\n" for p in pairs), encoding="utf-8")
    (work / "tgt").write_text("".join(p["target"] + "\n" for p in pairs), encoding="utf-8")
    return run_cli("score", str(run), "--source", str(work / "src"), "--target", str(work / "tgt"), *options)


def test_score_gives_the_models_own_output_the_search_score_and_equals_the_command(
    runs, transformer_server, run_cli, tmp_path
):
    found = translate(transformer_server, SENTENCES[:8], beam=3)
    found["results"] = [
        r for r in found["results"] if r["translation"]
    ]  # an empty output has nothing to score
    assert len(found["results"]) >= 5
    pairs = [{"source": r["source"], "target": r["translation"]} for r in found["results"]]
    status, scored = call(transformer_server, "/score", {"pairs": pairs})
    assert status == 200, scored
    assert scored["length_penalty"] == found["length_penalty"]
    for result, score in zip(found["results"], scored["results"], strict=True):
        best = result["nbest"][0]
        assert score["target_tokens"] == best["tokens"]
        assert score["log_prob"] == pytest.approx(best["log_prob"], abs=1e-5)
        assert score["score"] == pytest.approx(best["score"], abs=1e-5)
        assert len(score["token_log_probs"]) == len(best["tokens"]) + 1
    done = score_command(run_cli, runs["transformer"], pairs, tmp_path)
    records = [json.loads(line) for line in done.stdout.splitlines()]
    assert [r["score"] for r in records] == pytest.approx([r["score"] for r in scored["results"]], abs=1e-5)
    status, raw = call(transformer_server, "/score", {"pairs": pairs[:1], "length_penalty": 0.0})
    assert status == 200 and raw["results"][0]["score"] == pytest.approx(raw["results"][0]["log_prob"])
    empty = [{"source": pairs[0]["source"], "target": target} for target in ("", " ")]
    status, at_once = call(transformer_server, "/score", {"pairs": empty})
    assert status == 200, at_once
    engine = translator_for(open_model(runs["transformer"], device="cpu"))
    (alone,) = score_with(engine, [pairs[0]["source"]], [""])
    for result in at_once["results"]:  # an empty target: the model ending at once, <eos> alone
        assert result["target_tokens"] == [] and len(result["token_log_probs"]) == 1
        assert result["log_prob"] == pytest.approx(alone.log_prob, abs=1e-5)


def test_score_gives_alignments_when_asked_equal_to_the_commands(runs, transformer_server, run_cli, tmp_path):
    found = translate(transformer_server, SENTENCES[:6], beam=1, alignments=True)["results"]
    found = [r for r in found if r["translation"]]
    assert len(found) >= 3
    pairs = [{"source": r["source"], "target": r["translation"]} for r in found]
    status, plain = call(transformer_server, "/score", {"pairs": pairs})
    assert status == 200 and all("alignment" not in r for r in plain["results"])
    status, scored = call(transformer_server, "/score", {"pairs": pairs, "alignments": True})
    assert status == 200, scored
    for own, result in zip(found, scored["results"], strict=True):
        alignment = result["alignment"]
        assert alignment == own["alignment"]  # the model's own greedy output: translate's alignment
        links = [tuple(map(int, link.split("-"))) for link in alignment["pairs"].split()]
        assert sorted({j for _, j in links}) == list(range(len(alignment["target_words"])))  # each word once
        assert len(links) == len(alignment["target_words"])
        assert all(0 <= i < len(alignment["source_words"]) for i, _ in links)
    assert [r["score"] for r in scored["results"]] == [r["score"] for r in plain["results"]]
    done = score_command(
        run_cli, runs["transformer"], pairs, tmp_path, "--alignments", str(tmp_path / "align")
    )
    assert done.returncode == 0, done.stderr
    written = (tmp_path / "align").read_text(encoding="utf-8").splitlines()
    assert written == [r["alignment"]["pairs"] for r in scored["results"]]


def test_score_splits_a_pair_into_sentences_as_translate_does(transformer_server):
    line = "Golf alpha echo. Hotel delta."
    (result,) = translate(transformer_server, [line], beam=2, nbest=2)["results"]
    assert len(result["sentences"]) == 2
    best = result["nbest"][0]  # the sentences' outputs joined, their scores added
    pair = {"source": line, "target": best["text"]}
    status, scored = call(transformer_server, "/score", {"pairs": [pair]})
    assert status == 200, scored
    assert scored["results"][0]["score"] == pytest.approx(best["score"], abs=1e-5)
    assert scored["results"][0]["log_prob"] == pytest.approx(best["log_prob"], abs=1e-5)
    status, whole = call(transformer_server, "/score", {"pairs": [pair], "split": False})
    assert status == 200 and abs(whole["results"][0]["log_prob"] - best["log_prob"]) > 1e-3


@pytest.mark.parametrize(
    ("body", "problem"),
    [
        ({"pairs": [{"source": "  ", "target": "alpha ."}]}, "pairs[0].source: String should match pattern"),
        ({"pairs": [{"source": "\x1e", "target": "un ."}]}, "pairs[0].source: String should match pattern"),
        ({"pairs": [{"source": "alpha ."}]}, "pairs[0].target: Field required"),
        ({"pairs": []}, "pairs: List should have at least 1 item"),
        ({"pairs": [{"source": "a", "target": "b", "beam": 2}]}, "pairs[0].beam: unknown field"),
        (
            {"pairs": [{"source": "a", "target": "b"}], "length_penalty": -1.0},
            "length_penalty: Input should be",
        ),
    ],
)
def test_score_refuses_bad_requests_with_422(transformer_server, body, problem):
    status, answer = call(transformer_server, "/score", body)
    assert status == 422 and any(p.startswith(problem) for p in answer["problems"]), answer


def test_concurrent_requests_equal_sequential_ones_and_translate(runs, transformer_server, run_cli, tmp_path):
    run_dir = runs["transformer"]
    sentences = [en for en, _ in reverse_pairs(16, seed=3)]
    options = [{"beam": 1}, {"beam": 2, "nbest": 2}]  # two option sets, interleaved, 8 requests each
    jobs = [([s], options[i % 2]) for i, s in enumerate(sentences)]
    # Batches of 4 and a long wait: every batch is 4 requests with the same options, however they arrive.
    with server(run_dir, "--max-batch", "4", "--max-wait-ms", "10000") as address:
        with ThreadPoolExecutor(len(jobs)) as pool:
            together = list(pool.map(lambda job: translate(address, job[0], **job[1]), jobs))
        health = worker_counts(address)
    assert (health["batches"], health["sentences"]) == (4, 16)
    alone = [translate(transformer_server, s, **opts) for s, opts in jobs]  # one request at a time
    in_one = [translate(transformer_server, sentences, **opts) for opts in options]
    assert_same_answers(together, alone)
    greedy = translate_lines(run_cli, run_dir, sentences, ["--beam", "1"], tmp_path)
    nbest = translate_lines(run_cli, run_dir, sentences, ["--beam", "2", "--nbest", "2"], tmp_path)
    assert [r["translation"] for r in in_one[0]["results"]] == greedy
    assert as_nbest_lines(in_one[1]) == nbest
    for i, answer in enumerate(together):
        if i % 2 == 0:
            assert answer["results"][0]["translation"] == greedy[i]
        else:
            assert [line.split(" ||| ", 1)[1] for line in as_nbest_lines(answer)] == [
                line.split(" ||| ", 1)[1] for line in nbest[2 * i : 2 * i + 2]
            ]


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
        health = worker_counts(address)
    assert_same_answers(staying, alone)
    decoded = (health["batches"], health["sentences"])
    assert decoded == (1, 3) and (health["dropped"], health["expired"]) == (1, 0), health


def test_serve_refuses_a_port_in_use_and_bad_options(runs, run_cli):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        for argv, message in (
            (["--port", str(port)], f"cannot listen on 127.0.0.1:{port}"),
            (["--max-batch", "0"], "--max-batch must be at least 1"),
            (["--checkpoint", "newest"], "--checkpoint newest: no such checkpoint file"),
        ):
            refused = run_cli("serve", str(runs["transformer"]), *argv)
            assert refused.returncode == 2 and message in refused.stderr and "Traceback" not in refused.stderr


def test_explorer_page_in_headless_chromium(runs, transformer_server, chromium, tmp_path):
    sentence = "Alpha bravo charlie delta."
    answer = translate(transformer_server, [sentence], attention=True, beam=3, nbest=3)["results"][0]
    expected = answer["attention"]
    rows, cols = len(expected["output_tokens"]), len(expected["source_tokens"])
    browser = Browser(chromium, CHROMIUM_FLAGS + ["--window-size=1200,1600"], tmp_path / "profile")
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
        legend = browser.evaluate(
            "[...document.querySelectorAll('#heatmap .legend-label, #heatmap .legend-title')]"
            ".map((t) => t.textContent)"
        )
        assert legend == ["0", "0.5", "1", "attention weight (fixed scale 0 to 1)"]
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

        text = "Golf hotel.  India juliet kilo."  # two sentences: each has its own maps
        both = translate(transformer_server, [text], beam=3, nbest=3, attention=True)["results"][0]
        assert [p["source"] for p in both["sentences"]] == ["Golf hotel.", "India juliet kilo."]
        browser.type_text("#source", text)
        browser.evaluate("document.getElementById('status').textContent = ''")
        browser.click("#translate")
        browser.wait_for("document.getElementById('status').textContent.startsWith('beam 3')")
        assert browser.evaluate("document.getElementById('translation').textContent") == both["translation"]
        assert browser.evaluate("document.getElementById('sentence-choice').hidden") is False
        browser.choose("#map", "cross")
        for k, part in enumerate(both["sentences"]):
            browser.choose("#sentence", str(k))
            browser.choose("#layer", "1")
            browser.choose("#head", "average")
            assert heatmap()["colLabels"] == part["attention"]["source_tokens"]
            cross = np.asarray(part["attention"]["maps"]["cross"][1]).mean(axis=0).ravel()
            np.testing.assert_allclose(heatmap()["weights"], cross, atol=1e-5)
        browser.click("#split")  # untick: the text is one sentence again
        browser.evaluate("document.getElementById('status').textContent = ''")
        browser.click("#translate")
        browser.wait_for("document.getElementById('status').textContent.startsWith('beam 3')")
        whole = translate(transformer_server, [text], beam=3, nbest=3, attention=True, split=False)
        assert browser.evaluate("document.getElementById('sentence-choice').hidden") is True
        assert heatmap()["colLabels"] == whole["results"][0]["attention"]["source_tokens"]
        assert browser.errors() == []
        assert all(url.startswith(page + "/") for url in browser.requested_urls()), browser.requested_urls()
        assert {page + "/page/explorer.js", page + "/page/style.css", page + "/translate"} <= set(
            browser.requested_urls()
        )
    finally:
        browser.close()
