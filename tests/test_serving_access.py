"""`attn-mt serve` exposed: API keys, per-client limits, the request log, /metrics, start-up checks."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
import urllib.error
import urllib.parse
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from libretranslatepy import LibreTranslateAPI
from support.helpers import ROOT, call, fetch, multipart, server, wait_for_health

from attn_mt.errors import UserError
from attn_mt.serving.access import WINDOW_S, Limits, MovingWindow, read_api_keys
from attn_mt.serving.exposure import access_policy, exposure_warnings

ALPHA = "alpha-key-0123456789"  # 2 requests a minute of its own
BRAVO = "bravo-key-0123456789"  # 20 characters a minute of its own
CHARLIE = "charlie-key-0123456789"  # the server's limits
KEYS = f"# keys of the test server\n{ALPHA} requests=2\n\n{BRAVO} chars=20  # a comment\n{CHARLIE}\n"
SECRET_TEXT = "Golf hotel alpha bravo."
SERVING_DOC = ROOT / "docs" / "serving.md"


@pytest.fixture(scope="module")
def run_dir(tiny_runs, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tiny_runs.copy_to(tmp_path_factory.mktemp("access"))["transformer"]


def lt_body(text: str, **more: str) -> dict:
    return {"q": text, "source": "en", "target": "fr", **more}


def test_keys_are_needed_checked_and_limited_per_key(run_dir, tmp_path):
    keys = tmp_path / "keys.txt"
    keys.write_text(KEYS)
    log_path = tmp_path / "serve.log"
    with (
        log_path.open("w") as log,
        server(run_dir, "--api-keys", str(keys), "--req-limit", "50", log=log) as address,
    ):
        status, answer = call(address, "/translate", lt_body(SECRET_TEXT))
        assert (status, answer["error"]) == (401, "Please contact the server operator to get an API key")
        status, answer = call(address, "/translate", lt_body("Alpha.", api_key="WRONG"))
        assert (status, answer["error"]) == (403, "Invalid API key")
        for path in ("/languages", "/health", "/frontend/settings", "/"):  # pages stay open
            assert fetch(address, path)[0] == 200, path
        assert call(address, "/frontend/settings")[1]["keyRequired"] is True
        assert call(address, "/info")[0] == 401 and call(address, "/metrics")[0] == 401

        client = LibreTranslateAPI(f"http://{address}/", api_key=BRAVO)  # posts api_key in its form
        assert isinstance(client.translate("Alpha bravo.", "en", "fr"), str)  # 12 characters
        with pytest.raises(urllib.error.HTTPError) as slowed:
            client.translate("Charlie delta.", "en", "fr")  # 14 more: over 20 a minute
        assert slowed.value.code == 429 and int(slowed.value.headers["Retry-After"]) >= 1
        assert json.loads(slowed.value.read())["error"] == "Slowdown: 20 characters per minute per key"

        bearer = {"Authorization": f"Bearer {ALPHA}"}
        query = "?" + urllib.parse.urlencode({"api_key": ALPHA})
        assert call(address, "/translate", {"sentences": ["Alpha."]}, headers=bearer)[0] == 200
        assert call(address, f"/detect{query}", {"q": "Alpha."})[0] == 200  # the key in the URL query
        status, answer = call(address, "/translate", {"sentences": ["Alpha."]}, headers=bearer)
        assert (status, answer["error"]) == (429, "Slowdown: 2 requests per minute per key")
        for key, expected in ((CHARLIE, 200), ("WRONG", 403)):  # the key in a multipart form
            fields = {"source": "en", "target": "fr", "api_key": key}
            body, kind = multipart(fields, "notes.txt", b"Alpha.")
            assert call(address, "/translate_file", raw=body, content_type=kind)[0] == expected
        status, _, text = fetch_with(address, "/metrics", {"Authorization": f"Bearer {BRAVO}"})
        metrics = text.decode()
    assert status == 200
    for sample in (
        'attn_mt_rejections_total{status="401"} 3.0',
        'attn_mt_rejections_total{status="403"} 2.0',
        'attn_mt_rejections_total{status="429"} 2.0',
        'attn_mt_requests_total{route="/translate",status="200"} 2.0',
        'attn_mt_request_seconds_bucket{le="+Inf",route="/translate"}',
        "attn_mt_queue_depth 0.0",
    ):
        assert sample in metrics, sample
    sentences = [line for line in metrics.splitlines() if line.startswith("attn_mt_sentences_total ")]
    assert sentences == ["attn_mt_sentences_total 3.0"]  # one per translation and file; /detect decodes none
    lines = [line for line in log_path.read_text().splitlines() if " /translate " in line]
    assert any("POST /translate 401 0 sentences" in line for line in lines), lines
    assert any("POST /translate 200 1 sentences" in line and line.endswith(" ms") for line in lines), lines
    assert not any(SECRET_TEXT in line or "Alpha" in line for line in lines)  # no text in the log


def fetch_with(address: str, path: str, headers: dict[str, str]) -> tuple[int, str, bytes]:
    """GET with headers: its status, content type and bytes."""
    request = urllib.request.Request(f"http://{address}{path}", headers=headers)
    with urllib.request.urlopen(request, timeout=60) as response:
        return response.status, response.headers.get("Content-Type", ""), response.read()


def test_each_address_has_its_own_request_limit_even_from_another_origin(run_dir):
    with server(run_dir, "--req-limit", "2") as address:
        page = {"Origin": "https://evil.example"}  # a page's LibreTranslate requests count the same
        assert call(address, "/translate", lt_body("Alpha."), headers=page)[0] == 200
        assert call(address, "/translate", lt_body("Alpha."))[0] == 200
        status, answer = call(address, "/translate", lt_body("Alpha."), headers=page)
        assert (status, answer["error"]) == (429, "Slowdown: 2 requests per minute per address")
        assert call(address, "/languages")[0] == 200  # reading pages costs nothing


def test_refused_requests_cost_their_client_nothing(run_dir):
    with server(run_dir, "--req-limit", "3", "--char-limit", "40") as address:
        for _ in range(3):  # 400s: 3 requests and 36 characters, if they were charged
            status, answer = call(address, "/translate", lt_body("Alpha bravo.", source="de"))
            assert (status, answer["error"]) == (400, "de is not supported")
        assert call(address, "/translate", {"sentences": ["Alpha bravo."], "beam": 99})[0] == 422
        for _ in range(3):  # 36 characters of the 40
            assert call(address, "/translate", lt_body("Alpha bravo."))[0] == 200
        status, answer = call(address, "/translate", lt_body("Alpha bravo."))
        assert (status, answer["error"]) == (429, "Slowdown: 40 characters per minute per address")


def test_requests_refused_with_503_cost_their_client_nothing(run_dir):
    # a queue of 1 unit whose first batch waits 6 s for company: the requests behind it get 503
    options = ("--req-limit", "3", "--max-queued-work", "1", "--max-wait-ms", "6000")
    with server(run_dir, *options) as address, ThreadPoolExecutor(1) as pool:
        first = pool.submit(call, address, "/translate", lt_body("Alpha bravo."))
        wait_for_health(address, lambda health: health["queued_work"] > 0)
        for _ in range(3):
            status, answer = call(address, "/translate", lt_body("Charlie delta."))
            assert status == 503 and "busy" in answer["error"], answer
        assert first.result(60)[0] == 200
        assert call(address, "/translate", lt_body("Echo."))[0] == 200  # the 2nd charged of 3
        assert call(address, "/translate", lt_body("Golf."))[0] == 200
        status, answer = call(address, "/translate", lt_body("Hotel."))
        assert (status, answer["error"]) == (429, "Slowdown: 3 requests per minute per address")


def test_a_charge_given_back_frees_its_room_once():
    now = [0.0]
    window = MovingWindow(clock=lambda: now[0])
    wait, charge = window.charge("a", 6, 10)
    assert wait is None and charge is not None
    assert window.wait("a", 6, 10) == pytest.approx(WINDOW_S)  # 12 would pass 10
    charge.give_back()
    charge.give_back()  # a second time takes nothing more
    now[0] = 1.0
    assert window.wait("a", 6, 10) is None and window.wait("a", 4, 10) is None
    assert window.charge("a", 1, 10) == (WINDOW_S, None)  # refused: nothing charged, nothing to give back
    assert window.charge("a", 5, None) == (None, None)  # no limit: nothing charged


def test_the_moving_window_frees_what_a_minute_ago_spent():
    now = [0.0]
    window = MovingWindow(clock=lambda: now[0])
    assert window.wait("a", 6, 10) is None and window.wait("a", 4, 10) is None
    now[0] = 20.0
    assert window.wait("a", 1, 10) == pytest.approx(WINDOW_S - 20.0)  # the first 6 leave at 60 s
    assert window.wait("b", 1, 10) is None  # another client has its own minute
    now[0] = WINDOW_S + 0.5
    assert window.wait("a", 5, 10) is None  # the 6 have aged out; the 4 remain
    assert window.wait("a", 11, 10) == WINDOW_S  # more than the limit never fits
    now[0] = 10 * WINDOW_S
    window.forget_idle()
    assert window.spent == {}


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("", "lists no key"),
        ("short-key\n", "line 1: a key is 16 or more"),
        (f"{ALPHA} requests=two\n", "'requests=two' is not requests=N or chars=N"),
        (f"{ALPHA}\n{ALPHA}\n", "line 2: the key is listed twice"),
    ],
)
def test_a_keys_file_is_checked_line_by_line(tmp_path, text, error):
    keys = tmp_path / "keys.txt"
    keys.write_text(text)
    with pytest.raises(UserError, match=error):
        read_api_keys(keys)


def test_the_key_rule_is_said_in_serve_help_and_the_docs_example_writes_a_key_it_takes(
    tmp_path, run_dir, run_cli
):
    shown = run_cli("serve", "--help")
    words = " ".join(re.sub("[\u2500-\u257f]", " ", shown.stdout).split())  # without rich's box lines
    assert (
        "each 16 or more letters, digits, '-', '_' or '.' (a shorter key stops the server at start)" in words
    )
    (tmp_path / "short.txt").write_text("short-key-0123\n")
    refused = run_cli("serve", str(run_dir), "--api-keys", str(tmp_path / "short.txt"))
    assert refused.returncode == 2 and "line 1: a key is 16 or more letters" in refused.stderr

    example = next(line for line in SERVING_DOC.read_text().splitlines() if ">> keys.txt" in line)
    command, _, said = example.strip().partition(" >> keys.txt")
    assert command.startswith("python -c ") and "16+ letters, digits, -, _, ." in said
    for _ in range(2):  # two keys, one a line
        written = subprocess.run(
            [sys.executable, "-c", shlex.split(command)[2]], capture_output=True, text=True, check=True
        )
        with (tmp_path / "keys.txt").open("a") as keys:
            keys.write(written.stdout)
    assert len(read_api_keys(tmp_path / "keys.txt")) == 2


def test_a_reachable_address_needs_keys_or_an_explicit_no_auth(tmp_path, run_dir, run_cli):
    keys = tmp_path / "keys.txt"
    keys.write_text(KEYS)
    with pytest.raises(UserError, match="--host 0.0.0.0 lets other machines reach the server"):
        access_policy("0.0.0.0", None, no_auth=False, req_limit=None, char_limit=None)
    with pytest.raises(UserError, match="contradict"):
        access_policy("127.0.0.1", keys, no_auth=True, req_limit=None, char_limit=None)
    with pytest.raises(UserError, match="--req-limit must be at least 1"):
        access_policy("127.0.0.1", None, no_auth=False, req_limit=0, char_limit=None)
    assert access_policy("::1", None, no_auth=False, req_limit=None, char_limit=None).open
    keyed = access_policy("192.168.1.5", keys, no_auth=False, req_limit=5, char_limit=None)
    assert keyed.limits_of(None) == Limits(5, None) and len(keyed.keys) == 3
    assert exposure_warnings("127.0.0.1", keyed) == []
    assert len(exposure_warnings("0.0.0.0", keyed)) == 1  # TLS advice
    unguarded = access_policy("0.0.0.0", None, no_auth=True, req_limit=None, char_limit=None)
    assert "ANYONE WHO REACHES THIS PORT" in exposure_warnings("0.0.0.0", unguarded)[1]
    refused = run_cli("serve", str(run_dir), "--host", "0.0.0.0")  # before the run is even loaded
    assert refused.returncode == 2 and "--api-keys FILE" in refused.stderr
