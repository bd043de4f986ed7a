"""LibreTranslate's API on `attn-mt serve`: its own Python client, unchanged, translates through it."""

from __future__ import annotations

import urllib.error
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers import call, server
from libretranslatepy import LibreTranslateAPI

from attn_mt.decoding.translator import Translator
from attn_mt.run.run_dir import load_run

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
        ({"q": "Alpha.", "source": "en"}, "Invalid request: target: Field required"),
        (
            {"q": "Alpha.", "target": "fr", "format": "html"},
            "Invalid request: format: Input should be 'text'",
        ),
        ({"q": "Alpha.", "target": "fr", "alternatives": 1.5}, "Invalid request: alternatives"),
        ({"q": ["Alpha. " * 40] * 2, "target": "fr"}, "more than 64 sentences"),
        ({"q": [], "target": "fr"}, "Invalid request: q"),
        (
            {"q": "Alpha.", "target": "fr", "alternatives": 15},
            "beam size 16 needs at least 32 target vocabulary",
        ),
    ],
)
def test_libretranslate_errors_are_400_with_an_error_line(address, body, error):
    status, answer = call(address, "/translate", body)
    assert status == 400 and error in answer["error"], answer


def test_the_published_schema_has_both_bodies_and_the_form(address):
    status, api = call(address, "/openapi.json")
    assert status == 200
    content = api["paths"]["/translate"]["post"]["requestBody"]["content"]
    assert set(content) == {"application/json", "application/x-www-form-urlencoded"}
    assert {"TranslateRequest", "LibreTranslateRequest"} <= set(api["components"]["schemas"])
    assert "/languages" in api["paths"]
