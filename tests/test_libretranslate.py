"""LibreTranslate's API on `attn-mt serve`: its own Python client, unchanged, translates through it."""

from __future__ import annotations

import html
import http.client
import http.server
import json
import sys
import threading
import urllib.error
import urllib.parse
from collections.abc import Iterator
from email.message import Message
from pathlib import Path

import pytest
from devtools import Browser
from helpers import CHROMIUM_FLAGS, call, server
from libretranslatepy import LibreTranslateAPI

from attn_mt.data.sentences import split_line
from attn_mt.decoding.translator import Translator
from attn_mt.run.run_dir import load_run
from attn_mt.serving.libretranslate import LibreTranslateError, plan
from attn_mt.serving.schemas import LibreTranslateRequest
from attn_mt.web.guard import cors_policy, host_policy

PARAGRAPH = "Alpha bravo. Charlie delta echo.  Golf hotel alpha bravo."
SENTENCES = ["Alpha bravo.", "Charlie delta echo.", "Golf hotel alpha bravo."]


@pytest.fixture(scope="module")
def run_dir(tiny_runs, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tiny_runs.copy_to(tmp_path_factory.mktemp("libretranslate"))["transformer"]


@pytest.fixture(scope="module")
def address(run_dir) -> Iterator[str]:
    with server(run_dir) as where:
        yield where


@pytest.fixture(scope="module")
def translator(run_dir) -> Translator:
    run = load_run(run_dir, device="cpu")
    return Translator(run.model, run.src_vocab, run.tgt_vocab, run.config)


def test_the_libretranslate_client_translates_a_paragraph_sentence_by_sentence(address, translator):
    client = LibreTranslateAPI(f"http://{address}/")  # it posts forms, as it does to LibreTranslate
    alone = [t.text for t in translator.translate(SENTENCES)]  # the run's own beam, as the server
    assert client.translate(PARAGRAPH, "en", "fr") == f"{alone[0]} {alone[1]}  {alone[2]}"
    assert client.translate("  Alpha bravo.\n\nGolf hotel alpha bravo. ", "auto", "fr") == (
        f"  {alone[0]}\n\n{alone[2]} "
    )
    assert client.languages() == [
        {"code": "en", "name": "English", "targets": ["fr"]},
        {"code": "fr", "name": "French", "targets": []},
    ]
    with pytest.raises(urllib.error.HTTPError) as refused:
        client.translate(PARAGRAPH, "en", "de")
    assert refused.value.code == 400


def test_json_lists_alternatives_and_auto_detection(address, translator):
    status, answer = call(
        address, "/translate", {"q": SENTENCES[:2], "source": "auto", "target": "fr", "alternatives": 2}
    )
    assert status == 200
    best = translator.translate(SENTENCES[:2], beam_size=3, nbest=3)
    assert answer["translatedText"] == [t.text for t in best]
    assert answer["alternatives"] == [t.outputs[1:3] for t in best]
    assert answer["detectedLanguage"] == [{"language": "en", "confidence": 100.0}] * 2
    status, answer = call(address, "/translate", {"q": SENTENCES[0], "source": "en", "target": "fr"})
    assert status == 200 and set(answer) == {"translatedText"} and isinstance(answer["translatedText"], str)


@pytest.mark.parametrize(
    ("body", "error"),
    [
        ({"q": "Alpha.", "source": "de", "target": "fr"}, "de is not supported"),
        ({"q": "Alpha.", "source": "en", "target": "es"}, "es is not supported"),
        ({"q": "Alpha.", "source": "en"}, "Invalid request: missing target parameter"),
        ({"q": "Alpha.", "target": "fr"}, "Invalid request: missing source parameter"),
        ({"q": "Alpha.", "source": "", "target": "fr"}, "Invalid request: missing source parameter"),
        ({"q": "", "source": "en", "target": "fr"}, "Invalid request: missing q parameter"),
        ({"source": "en", "target": "fr"}, "Invalid request: missing q parameter"),
        ({"q": [], "source": "en", "target": "fr"}, "Invalid request: missing q parameter"),
        (
            {"q": "Alpha.", "source": "en", "target": "fr", "format": "markdown"},
            "Invalid request: format: Input should be 'text' or 'html'",
        ),
        (
            {"q": "Alpha.", "source": "en", "target": "fr", "alternatives": 1.5},
            "Invalid request: alternatives",
        ),
        (
            {"q": "Alpha.", "source": "en", "target": "fr", "alternatives": "two"},
            "Invalid request: alternatives",
        ),
        ({"q": ["Alpha. " * 40] * 2, "source": "en", "target": "fr"}, "more than 64 sentences"),
        (
            {"q": "Alpha.", "source": "en", "target": "fr", "alternatives": "15"},
            "beam size 16 needs at least 32 target vocabulary",
        ),
    ],
)
def test_libretranslate_errors_are_400_with_an_error_line(address, body, error):
    status, answer = call(address, "/translate", body)
    assert status == 400 and error in answer["error"], answer


def test_answers_match_libretranslates_for_alternatives_forms_and_line_breaks(address, translator):
    many = {
        "q": SENTENCES[0],
        "source": "en",
        "target": "fr",
        "alternatives": "5",
    }  # digits, as it reads them
    status, answer = call(address, "/translate", many)
    assert status == 200, answer
    outputs = translator.translate([SENTENCES[0]], beam_size=6, nbest=6)[0].outputs
    expected = []
    for text in outputs[1:]:
        if text.strip() and text != outputs[0] and text not in expected:
            expected.append(text)
    assert answer["translatedText"] == outputs[0] and answer["alternatives"] == expected
    assert outputs[0] not in answer["alternatives"] and len(set(answer["alternatives"])) == len(expected)
    form = urllib.parse.urlencode(
        [("q", f"{SENTENCES[0]}\r\n{SENTENCES[1]}"), ("q", "ignored."), ("source", "en"), ("target", "fr")]
    ).encode()
    status, answer = call(address, "/translate", raw=form, content_type="application/x-www-form-urlencoded")
    alone = [t.text for t in translator.translate(SENTENCES[:2])]
    assert status == 200 and answer == {"translatedText": f"{alone[0]}\n{alone[1]}"}, answer


def test_html_is_translated_text_node_by_text_node_with_its_tags_kept(address, translator):
    markup = (
        '<p class="lead">Alpha bravo. <b>Charlie delta echo.</b></p><!-- Alpha. -->'
        '<script>var golf = "Alpha.";</script><span translate="no">Golf hotel.</span> Golf hotel alpha bravo.'
    )
    body = {"q": [markup, "Alpha &amp; <i>bravo</i>."], "source": "en", "target": "fr", "format": "html"}
    status, answer = call(address, "/translate", body)
    assert status == 200, answer
    alone = [t.text for t in translator.translate([*SENTENCES, "Alpha &", "bravo", "."])]
    assert answer["translatedText"] == [
        f'<p class="lead">{alone[0]} <b>{alone[1]}</b></p><!-- Alpha. -->'
        f'<script>var golf = "Alpha.";</script><span translate="no">Golf hotel.</span> {alone[2]}',
        f"{html.escape(alone[3], quote=False)} <i>{alone[4]}</i>{alone[5]}",
    ]


def test_html_without_its_parser_names_the_extra(translator, monkeypatch):
    monkeypatch.setitem(sys.modules, "lxml", None)  # as if the html extra were not installed
    request = LibreTranslateRequest(q="<p>Alpha.</p>", source="en", target="fr", format="html")
    with pytest.raises(LibreTranslateError, match=r"pip install 'attn-mt\[html\]'"):
        plan(request, translator.cfg, lambda line: split_line(line, "en"))


def test_cross_origin_pages_may_use_the_libretranslate_routes_and_nothing_else(address):
    page = "https://webapp.example"
    for path, method in (("/translate", "POST"), ("/languages", "GET")):
        status, headers = preflight(address, path, page, method)
        assert status == 204 and headers["Access-Control-Allow-Origin"] == "*", path
        assert "Content-Type" in headers["Access-Control-Allow-Headers"]
    for path in ("/score", "/info", "/health"):
        status, headers = preflight(address, path, page, "POST")
        assert status == 403 and "Access-Control-Allow-Origin" not in headers, path
    body = {"q": SENTENCES[0], "source": "en", "target": "fr"}
    for sent, allowed in ((body, "*"), ({"sentences": [SENTENCES[0]]}, None), ({"q": "", **body}, "*")):
        headers = answer_headers(address, "/translate", sent, page)
        assert headers.get("Access-Control-Allow-Origin") == allowed, sent
        assert "Origin" in headers.get("Vary", "")
    assert answer_headers(address, "/languages", None, page)["Access-Control-Allow-Origin"] == "*"


class BlankPage(http.server.BaseHTTPRequestHandler):
    """An empty page: the web app of another origin that calls serve from the browser."""

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        page = b"<!DOCTYPE html><html><head><title>another origin</title></head><body></body></html>"
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(page)))
        self.end_headers()
        self.wfile.write(page)

    def log_message(self, *args: object) -> None:
        """Quiet."""


# What a web app on another origin asks serve for; each answer, or "blocked" when the browser keeps it.
CROSS_ORIGIN_CALLS = """(async () => {
  const json = (body) => ({method: "POST", headers: {"Content-Type": "application/json"},
                           body: JSON.stringify(body)});
  const read = async (path, init) => {
    try { return await (await fetch("BASE" + path, init)).json(); } catch (e) { return "blocked"; }
  };
  return {
    translated: await read("/translate", json({q: TEXT, source: "en", target: "fr"})),
    languages: await read("/languages"),
    score: await read("/score", json({pairs: [{source: "Alpha.", target: "un ."}]})),
    own: await read("/translate", json({sentences: ["Alpha."]})),
    info: await read("/info"),
  };
})()"""


def test_a_web_page_of_another_origin_translates_through_the_libretranslate_route(
    address, chromium, tmp_path
):
    site = http.server.ThreadingHTTPServer(("127.0.0.1", 0), BlankPage)
    threading.Thread(target=site.serve_forever, daemon=True).start()
    browser = Browser(chromium, CHROMIUM_FLAGS, tmp_path / "profile")
    try:
        browser.open(f"http://localhost:{site.server_address[1]}/")
        found = browser.evaluate(
            CROSS_ORIGIN_CALLS.replace("BASE", f"http://{address}").replace("TEXT", json.dumps(PARAGRAPH))
        )
    finally:
        browser.close()
        site.shutdown()
    client = LibreTranslateAPI(f"http://{address}/")
    assert found["translated"]["translatedText"] == client.translate(PARAGRAPH, "en", "fr")
    assert found["languages"] == client.languages()
    assert found["score"] == found["own"] == found["info"] == "blocked"  # serve's own API stays its own


def test_host_names_and_origins_are_the_users_to_widen(run_dir):
    app = "https://app.example"
    with server(run_dir, "--allowed-hosts", "mt.example.org", "--cors-origins", app) as address:
        for host, status in (("mt.example.org", 200), ("mt.example.org:443", 200), ("rebound.example", 400)):
            assert call(address, "/languages", headers={"Host": host})[0] == status, host
        status, headers = preflight(address, "/score", app, "POST")
        assert status == 204 and headers["Access-Control-Allow-Origin"] == app
        assert preflight(address, "/translate", "https://elsewhere.example", "POST")[0] == 403  # no '*'
    with server(run_dir, "--cors-origins", "none") as address:
        assert preflight(address, "/translate", app, "POST")[0] == 403


def test_listening_on_every_address_answers_the_machines_addresses_but_no_other_name():
    every = host_policy("0.0.0.0", 8000, [])
    assert (
        every.allows("192.168.1.5:9000") and every.allows("[fe80::1]:8000") and every.allows("localhost:8000")
    )
    assert not every.allows("rebound.example:8000") and not every.allows("192.168.1.5.rebound.example")
    loopback = host_policy("127.0.0.1", 8000, ["mt.example.org"])
    assert (
        loopback.allows("127.0.0.1:8000")
        and loopback.allows("[::1]:8000")
        and loopback.allows("mt.example.org")
    )
    assert not loopback.allows("127.0.0.1:8001") and not loopback.allows("192.168.1.5:8000")
    assert not loopback.allows(None) and not loopback.allows("[::1") and not loopback.allows("localhost:port")
    assert not loopback.allows("rebound.example@127.0.0.1:8000")
    assert host_policy("127.0.0.1", 8000, ["*"]).allows("anything.example")
    assert cors_policy(None).allowed("https://a.example", libretranslate=True) == "*"
    assert cors_policy(None).allowed("https://a.example", libretranslate=False) is None


def preflight(address: str, path: str, origin: str, method: str) -> tuple[int, Message]:
    """A browser's CORS preflight for `method` on `path` from a page of `origin`: status and headers."""
    connection = http.client.HTTPConnection(address, timeout=60)
    try:
        asked = {
            "Origin": origin,
            "Access-Control-Request-Method": method,
            "Access-Control-Request-Headers": "content-type",
        }
        connection.request("OPTIONS", path, headers=asked)
        response = connection.getresponse()
        response.read()
        return response.status, response.headers
    finally:
        connection.close()


def answer_headers(address: str, path: str, body: dict | None, origin: str) -> Message:
    """The headers of the answer to a request from a page of `origin`."""
    connection = http.client.HTTPConnection(address, timeout=60)
    try:
        data = None if body is None else json.dumps(body)
        headers = {"Origin": origin, **({} if body is None else {"Content-Type": "application/json"})}
        connection.request("GET" if body is None else "POST", path, body=data, headers=headers)
        response = connection.getresponse()
        response.read()
        return response.headers
    finally:
        connection.close()


def test_the_published_schema_has_both_bodies_and_the_form(address):
    status, api = call(address, "/openapi.json")
    assert status == 200
    content = api["paths"]["/translate"]["post"]["requestBody"]["content"]
    assert set(content) == {"application/json", "application/x-www-form-urlencoded"}
    assert {"TranslateRequest", "LibreTranslateRequest"} <= set(api["components"]["schemas"])
    assert "/languages" in api["paths"]
