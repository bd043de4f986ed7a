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
import urllib.request
from collections.abc import Iterator
from email.message import Message
from pathlib import Path

import pytest
from libretranslatepy import LibreTranslateAPI
from support.devtools import Browser
from support.helpers import CHROMIUM_FLAGS, call, multipart, server, worker_counts

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
    [  # LibreTranslate's own wording (its app.py), each answered with 400
        ({"q": "Alpha.", "source": "de", "target": "fr"}, "de is not supported"),
        ({"q": "Alpha.", "source": "en", "target": "zz"}, "zz is not supported"),
        ({"q": "Alpha.", "source": "en"}, "Invalid request: missing target parameter"),
        ({"q": "Alpha."}, "Invalid request: missing source parameter"),  # only the first one missing
        ({"q": "Alpha.", "source": "", "target": "fr"}, "Invalid request: missing source parameter"),
        ({"q": "", "source": "en", "target": "fr"}, "Invalid request: missing q parameter"),
        ({"source": "en", "target": "fr"}, "Invalid request: missing q parameter"),
        ({"q": [], "source": "en", "target": "fr"}, "Invalid request: missing q parameter"),
        ({"q": "Alpha.", "source": "en", "target": "fr", "format": "xml"}, "xml format is not supported"),
        (
            {"q": "Alpha.", "source": "en", "target": "fr", "alternatives": "abc"},
            "Invalid request: alternatives parameter is not a number",
        ),
        (
            {"q": "Alpha.", "source": "en", "target": "fr", "alternatives": 99},
            "Invalid request: alternatives parameter must be <= 15",
        ),
        (
            {"q": "a" * 100_000, "source": "en", "target": "fr"},
            "Invalid request: request (100000) exceeds text limit (64000)",
        ),
        (
            {"q": ["Alpha."] * 65, "source": "en", "target": "fr"},
            "Invalid request: request (65) exceeds text limit (64)",
        ),
        ([{"q": "Alpha.", "source": "en", "target": "fr"}], "Invalid JSON format"),
    ],
)
def test_libretranslate_errors_are_its_own_400s(address, body, error):
    status, answer = call(address, "/translate", body)
    assert (status, answer["error"]) == (400, error) and answer["problems"], answer


@pytest.mark.parametrize(
    ("body", "error"),
    [  # attn-mt's own limits and checks, in LibreTranslate's shape
        ({"q": ["Hi! " * 1601] * 2, "source": "en", "target": "fr"}, "more than 3200 sentences"),
        (
            {"q": "Alpha.", "source": "en", "target": "fr", "alternatives": "15"},
            "beam size 16 needs at least 32 target vocabulary",
        ),
        ({"q": 7, "source": "en", "target": "fr"}, "q parameter must be a text or a list of texts"),
        (  # JSON's escapes can name half a surrogate pair, which no UTF-8 text holds
            {"q": "Golf \ud800 alpha.", "source": "en", "target": "fr"},
            "Invalid request: q holds a lone surrogate (U+D800), which is not text",
        ),
        (
            {"q": ["Alpha.", "Golf \udc00."], "source": "en", "target": "fr"},
            "q holds a lone surrogate (U+DC00)",
        ),
        ({"q": "Alpha.", "source": "e\ud800", "target": "fr"}, "source holds a lone surrogate (U+D800)"),
        (
            {"q": "Alpha.", "source": "en", "target": "fr", "format": "\udfff"},
            "format holds a lone surrogate",
        ),
    ],
)
def test_attn_mts_own_refusals_are_400_with_an_error_line(address, body, error):
    status, answer = call(address, "/translate", body)
    assert status == 400 and error in answer["error"], answer


def test_forms_queries_and_codes_are_read_as_libretranslate_reads_them(address, translator):
    alone = translator.translate([SENTENCES[0]])[0].text
    form = "application/x-www-form-urlencoded"
    for raw, content_type in (
        (b"source=en&target=fr", form),  # a form without q
        (json.dumps({"q": "Alpha.", "source": "en", "target": "fr"}).encode(), form),  # curl -d's default
    ):
        status, answer = call(address, "/translate", raw=raw, content_type=content_type)
        assert (status, answer["error"]) == (400, "Invalid request: missing q parameter"), answer
    query = urllib.parse.urlencode({"q": SENTENCES[0], "source": "EN", "target": "Fr"})
    for raw, content_type in ((b"", None), (b"format=", form)):  # fields in the URL query alone
        status, answer = call(address, f"/translate?{query}", raw=raw, content_type=content_type)
        assert (status, answer) == (200, {"translatedText": alone}), answer
    for text_format in (None, ""):  # null or empty: text
        body = {"q": SENTENCES[0], "source": "EN", "target": "FR", "format": text_format, "alternatives": -1}
        status, answer = call(address, "/translate", body)
        assert (status, answer) == (200, {"translatedText": alone}), answer  # -1 alternatives: none
    status, answer = call(
        address, "/translate", {"q": SENTENCES[0], "source": "en", "target": "fr", "alternatives": 1.5}
    )
    assert status == 200 and "alternatives" in answer  # 1.5 is read as 1, as int() reads it there


def test_emoji_alone_come_back_unchanged_and_html_gets_no_alternatives(address):
    body = {"q": ["🙂👍", "!! 🎉"], "source": "auto", "target": "fr", "alternatives": 2}
    status, answer = call(address, "/translate", body)
    assert status == 200 and answer["translatedText"] == ["🙂👍", "!! 🎉"], answer
    assert answer["alternatives"] == [[], []]
    assert answer["detectedLanguage"] == [{"language": "en", "confidence": 0.0}] * 2
    body = {"q": "<p>Alpha bravo.</p>", "source": "en", "target": "fr", "format": "html", "alternatives": 3}
    status, answer = call(address, "/translate", body)
    assert status == 200 and answer["alternatives"] == [], answer


def test_health_is_libretranslates_and_errors_name_their_problem(address):
    assert call(address, "/health") == (200, {"status": "ok"})
    status, answer = call(address, "/nowhere")
    assert status == 404 and answer["problems"] == [answer["error"]]
    connection = http.client.HTTPConnection(address, timeout=60)
    try:  # a body declared over the limit is refused before it is sent
        connection.putrequest("POST", "/translate")
        connection.putheader("Content-Type", "application/json")
        connection.putheader("Content-Length", str(2 << 20))
        connection.endheaders()
        response = connection.getresponse()
        answer = json.loads(response.read())
    finally:
        connection.close()
    assert response.status == 413 and answer["problems"] == [answer["error"]]


def test_detect_names_the_models_language_with_how_much_its_vocabulary_knows(address):
    client = LibreTranslateAPI(f"http://{address}/")
    found = client.detect(SENTENCES[0])
    assert len(found) == 1 and found[0]["language"] == "en" and 0 < found[0]["confidence"] <= 100
    assert client.detect("🙂👍") == [{"confidence": 0.0, "language": "en"}]
    status, answer = call(address, "/detect", {"source": "en"})
    assert (status, answer["error"]) == (400, "Invalid request: missing q parameter")
    assert call(address, "/detect")[0] == 405  # a GET, as LibreTranslate answers it
    status, answer = call(address, "/detect", {"q": ["Alpha.", "B\udc00"]})  # JSON can escape half a pair
    assert (status, answer["error"]) == (
        400,
        "Invalid request: q holds a lone surrogate (U+DC00), which is not text",
    )
    status, answer = call(address, "/detect", {"q": "a" * 64_001})
    assert (status, answer["error"]) == (400, "Invalid request: request (64001) exceeds text limit (64000)")


def test_libretranslates_page_routes_answer_as_it_does(address, translator):
    status, settings = call(address, "/frontend/settings")
    assert status == 200 and settings["language"] == {
        "source": {"code": "en", "name": "English"},
        "target": {"code": "fr", "name": "French"},
    }
    assert settings["charLimit"] == 64_000 and settings["supportedFilesFormat"] == [".txt", ".html"]
    assert not settings["suggestions"] and not settings["keyRequired"]
    status, answer = call(address, "/suggest", {"q": "a", "s": "b", "source": "en", "target": "fr"})
    assert (status, answer["error"]) == (403, "Suggestions are disabled on this server.")
    status, spec = call(address, "/spec")
    assert status == 200 and "/translate" in spec["paths"] and "/detect" in spec["paths"]
    assert call(address, "/spec", {})[0] == 405 and call(address, "/health", {})[0] == 405


def test_translate_file_translates_text_and_html_files_for_download(address, translator):
    alone = [t.text for t in translator.translate(SENTENCES[:2])]
    for filename, content, expected in (
        ("notes.txt", f"{SENTENCES[0]}\n{SENTENCES[1]}\n", f"{alone[0]}\n{alone[1]}\n"),
        ("page.html", f"<p>{SENTENCES[0]}</p>", f"<p>{alone[0]}</p>"),
    ):
        body, kind = multipart({"source": "en", "target": "fr"}, filename, content.encode())
        status, answer = call(address, "/translate_file", raw=body, content_type=kind)
        assert status == 200, answer
        link = answer["translatedFileUrl"]
        assert link.startswith(f"http://{address}/download_file/") and link.endswith(filename)
        with urllib.request.urlopen(link, timeout=60) as response:
            assert response.read().decode() == expected
            assert filename in response.headers["Content-Disposition"]
    for fields, filename, error in (
        ({"source": "en", "target": "fr"}, "slides.pdf", "Invalid request: file format not supported"),
        ({"target": "fr"}, "notes.txt", "Invalid request: missing source parameter"),
        ({"source": "en", "target": "zz"}, "notes.txt", "zz is not supported"),
    ):
        body, kind = multipart(fields, filename, b"Alpha.")
        status, answer = call(address, "/translate_file", raw=body, content_type=kind)
        assert (status, answer["error"]) == (400, error), answer
    long_text = "".join(f"Alpha bravo charlie delta echo golf {i:05d}.\n" for i in range(1700))
    assert len(long_text) == 73_100  # over q's 64,000 characters, under the 1 MiB body limit
    body, kind = multipart({"source": "en", "target": "fr"}, "long.txt", long_text.encode())
    status, answer = call(address, "/translate_file", raw=body, content_type=kind)
    assert (status, answer["error"]) == (400, "Invalid request: request (73100) exceeds text limit (64000)")
    assert call(address, "/download_file/nothing.txt")[0] == 404


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
    digit = urllib.parse.urlencode({"q": "Alpha.", "source": "en", "target": "fr", "alternatives": "²"})
    status, answer = call(
        address, "/translate", raw=digit.encode(), content_type="application/x-www-form-urlencoded"
    )
    assert status == 400 and "alternatives" in answer["error"]  # a digit that is no number: not a 500


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


def test_html_keeps_its_text_at_any_depth_or_refuses_what_it_cannot_read_whole(address, translator):
    alone = [t.text for t in translator.translate(SENTENCES[:2])]
    deep = "<b>" * 300 + SENTENCES[0] + "</b>" * 300  # libxml2 drops text below 255 levels by default
    unclosed = "<span>" * 200 + SENTENCES[1] + f"<p>{SENTENCES[0]}</p>"
    body = {"q": [deep, unclosed], "source": "en", "target": "fr", "format": "html"}
    status, answer = call(address, "/translate", body)
    assert status == 200, answer
    assert answer["translatedText"][0] == "<b>" * 300 + alone[0] + "</b>" * 300
    assert answer["translatedText"][1].startswith("<span>" * 200 + alone[1] + f"<p>{alone[0]}</p>")
    too_deep = {**body, "q": "<i>" * 1001 + "Alpha." + "</i>" * 1001}
    status, answer = call(address, "/translate", too_deep)
    assert (status, answer["error"]) == (
        400,
        "Invalid request: the HTML nests elements more than 1000 levels deep",
    )


def test_html_without_its_parser_names_the_extra(translator, monkeypatch):
    monkeypatch.setitem(sys.modules, "lxml", None)  # as if the html extra were not installed
    request = LibreTranslateRequest(q="<p>Alpha.</p>", source="en", target="fr", format="html")
    with pytest.raises(LibreTranslateError, match=r"pip install 'attn-mt\[html\]'"):
        plan(request, translator.cfg, lambda line: split_line(line, "en"))


def test_cross_origin_pages_may_use_the_libretranslate_routes_and_nothing_else(address, translator):
    page = "https://evil.example"
    for path, method in (("/languages", "GET"), ("/detect", "POST"), ("/spec", "GET")):
        status, headers = preflight(address, path, page, method)
        assert status == 204 and headers["Access-Control-Allow-Origin"] == "*", path
        assert headers["Access-Control-Allow-Methods"] == method
        assert headers["Access-Control-Allow-Headers"] == "Content-Type"
    for path, method in (("/score", "POST"), ("/info", "GET"), ("/metrics", "GET"), ("/detect", "PUT")):
        status, headers = preflight(address, path, page, method)
        assert status == 403 and "Access-Control-Allow-Origin" not in headers, path
    status, headers = preflight(address, "/translate", page, "POST")  # it cannot see whose JSON follows
    assert status == 403 and "Access-Control-Allow-Origin" not in headers
    status, headers = preflight(address, "/detect", page, "POST", asked="content-type, x-api-key")
    assert status == 403 and "Access-Control-Allow-Origin" not in headers  # a header LibreTranslate needs not
    body = {"q": SENTENCES[0], "source": "en", "target": "fr"}
    for sent, allowed in ((body, "*"), ({"source": "en"}, "*"), ([body], "*")):  # its answers, errors too
        status, headers = answer_headers(address, "/translate", sent, page)
        assert headers.get("Access-Control-Allow-Origin") == allowed, sent
        assert "Origin" in headers.get("Vary", "")
    assert answer_headers(address, "/languages", None, page)[1]["Access-Control-Allow-Origin"] == "*"
    own = {"sentences": [SENTENCES[0]], "beam": 4, "attention": True}
    before = worker_counts(address)["sentences"]
    status, headers = answer_headers(address, "/translate", own, page)
    assert status == 403 and "Access-Control-Allow-Origin" not in headers  # refused before decoding
    form = urllib.parse.urlencode({"sentences": SENTENCES[0]}).encode()
    status, _ = answer_headers(address, "/score", None, page, raw=form)
    assert status == 415  # a page's form, which needs no preflight, to serve's own API
    assert worker_counts(address)["sentences"] == before
    status, headers = answer_headers(address, "/translate", own, f"http://{address}")
    assert status == 200  # serve's own pages: same origin


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
  const page = new FormData();  // what LibreTranslate's own web page posts
  for (const [k, v] of [["q", TEXT], ["source", "en"], ["target", "fr"], ["format", "text"],
                        ["alternatives", "3"], ["api_key", ""]]) page.append(k, v);
  return {
    translated: await read("/translate", {method: "POST",
                                          body: new URLSearchParams({q: TEXT, source: "en", target: "fr"})}),
    formdata: await read("/translate", {method: "POST", body: page}),
    json_translate: await read("/translate", json({q: TEXT, source: "en", target: "fr"})),
    detected: await read("/detect", json({q: TEXT})),
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
    assert found["formdata"]["translatedText"] == found["translated"]["translatedText"]
    assert found["languages"] == client.languages() and found["detected"][0]["language"] == "en"
    assert found["score"] == found["own"] == found["info"] == "blocked"  # serve's own API stays its own
    assert (
        found["json_translate"] == "blocked"
    )  # its preflight cannot tell LibreTranslate's JSON from serve's


def test_host_names_and_origins_are_the_users_to_widen(run_dir):
    app = "https://app.example"
    with server(run_dir, "--allowed-hosts", "mt.example.org", "--cors-origins", app) as address:
        for host, status in (("mt.example.org", 200), ("mt.example.org:443", 200), ("rebound.example", 400)):
            assert call(address, "/languages", headers={"Host": host})[0] == status, host
        status, headers = preflight(address, "/score", app, "POST")
        assert status == 204 and headers["Access-Control-Allow-Origin"] == app
        assert preflight(address, "/translate", "https://elsewhere.example", "POST")[0] == 403  # no '*'
        # Behind a reverse proxy (docs/serving.md's nginx), a translated file's link names the host
        # and scheme the proxy forwards, so that the user's browser, LibreTranslate's page, can reach it.
        body, kind = multipart({"source": "en", "target": "fr"}, "notes.txt", b"Alpha bravo.")
        forwarded = {"Host": "mt.example.org", "X-Forwarded-Proto": "https"}
        status, answer = call(address, "/translate_file", raw=body, content_type=kind, headers=forwarded)
        assert status == 200 and answer["translatedFileUrl"].startswith(
            "https://mt.example.org/download_file/"
        )
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


def preflight(
    address: str, path: str, origin: str, method: str, asked: str = "content-type"
) -> tuple[int, Message]:
    """A browser's CORS preflight for `method` on `path` from a page of `origin`: status and headers."""
    connection = http.client.HTTPConnection(address, timeout=60)
    try:
        headers = {
            "Origin": origin,
            "Access-Control-Request-Method": method,
            "Access-Control-Request-Headers": asked,
        }
        connection.request("OPTIONS", path, headers=headers)
        response = connection.getresponse()
        response.read()
        return response.status, response.headers
    finally:
        connection.close()


def answer_headers(
    address: str, path: str, body: object, origin: str, raw: bytes | None = None
) -> tuple[int, Message]:
    """The status and headers of the answer to a request from a page of `origin` (a JSON body, a
    form's `raw` bytes, or a GET)."""
    connection = http.client.HTTPConnection(address, timeout=60)
    try:
        headers = {"Origin": origin}
        data = raw
        if raw is not None:
            headers["Content-Type"] = "application/x-www-form-urlencoded"
        elif body is not None:
            data, headers["Content-Type"] = json.dumps(body).encode(), "application/json"
        connection.request("GET" if data is None else "POST", path, body=data, headers=headers)
        response = connection.getresponse()
        response.read()
        return response.status, response.headers
    finally:
        connection.close()


def test_the_published_schema_has_both_bodies_and_the_form(address):
    status, api = call(address, "/openapi.json")
    assert status == 200
    content = api["paths"]["/translate"]["post"]["requestBody"]["content"]
    assert set(content) == {"application/json", "application/x-www-form-urlencoded"}
    assert {"TranslateRequest", "LibreTranslateRequest"} <= set(api["components"]["schemas"])
    assert "/languages" in api["paths"]
