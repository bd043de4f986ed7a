"""`attn-mt lab`: one lab process and one headless Chromium for the module; every panel's numbers on the
page equal what attn-mt's functions give in this process for the same inputs, inputs live in the URL, and
bad inputs get a message and a 4xx. With ATTN_MT_SCREENSHOTS=1 each panel's screenshot, its whole height,
is written to docs/lab/ (for docs/lab.md); ATTN_MT_LAB_RUNS=GRU_RUN,TRANSFORMER_RUN then puts runs trained on
the real corpus (folders named gru_bahdanau and transformer, such as the book's d2l_bahdanau and
d2l_transformer runs) in place of the tiny reverse-task runs, and the tests feed them English."""

from __future__ import annotations

import base64
import io
import json
import os
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from PIL import Image
from support.devtools import Browser
from support.helpers import CHROMIUM_FLAGS, ROOT, call, chromium_binary, command_server, fetch

from attn_mt.decoding.attention import attention_entropy
from attn_mt.decoding.scoring import score_with
from attn_mt.decoding.settings import DecodeSettings
from attn_mt.decoding.translator import Translator
from attn_mt.demos.nadaraya_watson import (
    gaussian_attention_weights,
    kernel_spread,
    leave_one_out,
    make_data,
    predict_parametric,
    train_parametric,
)
from attn_mt.i18n import gettext, in_language
from attn_mt.lab.app import MAX_BODY_BYTES
from attn_mt.lab.exercises import measured
from attn_mt.lab.inputs import MAX_ELEMENTS, LabError
from attn_mt.lab.live import LiveTrainer, live_panel
from attn_mt.lab.own_translation import own_translation_panel
from attn_mt.lab.stepping import run_search
from attn_mt.models.attention import (
    AdditiveAttention,
    DotProductAttention,
    MultiHeadAttention,
    masked_softmax,
)
from attn_mt.models.positional import sinusoid_table
from attn_mt.run.open import open_model
from attn_mt.training.timeline import multiple_indices, point_label, read_timeline

SCREENSHOTS = ROOT / "docs" / "lab"
TOLERANCE = 1e-6


REAL_RUNS = os.environ.get("ATTN_MT_LAB_RUNS", "")  # "GRU_RUN,TRANSFORMER_RUN" for the docs' screenshots


def english(tiny: str, real: str = "i lost .") -> str:
    """The sentence a test feeds: its reverse-task words on the tiny runs, English on real-corpus runs."""
    return real if REAL_RUNS else tiny


@pytest.fixture(scope="module")
def run_dirs(request) -> dict[str, str]:
    """The GRU + Bahdanau and Transformer runs the lab opens: the session's tiny runs or ATTN_MT_LAB_RUNS."""
    if REAL_RUNS:
        gru, transformer = REAL_RUNS.split(",")
        return {"gru_bahdanau": gru, "transformer": transformer}
    tiny_runs = request.getfixturevalue("tiny_runs")
    return {"gru_bahdanau": str(tiny_runs.gru_bahdanau), "transformer": str(tiny_runs.transformer)}


@pytest.fixture(scope="module")
def lab(run_dirs) -> Iterator[str]:
    """`attn-mt lab GRU_RUN TRANSFORMER_RUN --port 0`: its address."""
    with command_server("lab", run_dirs["gru_bahdanau"], run_dirs["transformer"]) as address:
        yield address


@pytest.fixture(scope="module")
def engines(run_dirs) -> dict[str, Translator]:
    """The same runs' torch engines in this process, by model type."""
    opened = {name: open_model(path, "best", "cpu") for name, path in run_dirs.items()}
    return {
        name: Translator(r.model, r.src_vocab, r.tgt_vocab, r.config, "cpu") for name, r in opened.items()
    }


@pytest.fixture(scope="module")
def page(lab, tmp_path_factory) -> Iterator[Browser]:
    """Headless Chromium on the lab's page, shared by the module's browser tests."""
    browser = Browser(
        chromium_binary(), CHROMIUM_FLAGS + ["--window-size=1280,900"], tmp_path_factory.mktemp("profile")
    )
    try:
        browser.open(f"http://{lab}/")
        yield browser
        assert browser.errors() == []
        origin = f"http://{lab}/"
        assert all(url.startswith(origin) for url in browser.requested_urls()), browser.requested_urls()
    finally:
        browser.close()


def show(page: Browser, lab: str, panel: str, **inputs: str) -> None:
    """Open `panel` with `inputs` through the URL, as a shared link would, and wait for its answer."""
    query = "&".join(f"{k}={_quote(v)}" for k, v in inputs.items())
    page.evaluate(
        "document.querySelectorAll('.status').forEach((s) => { s.textContent = ''; s.className = 'status'; })"
    )
    page.evaluate(f"location.hash = {json.dumps(f'{panel}?{query}')}")
    wait_for_answer(page, panel)


def _quote(value: str) -> str:
    from urllib.parse import quote

    return quote(value, safe="")


def wait_for_answer(page: Browser, panel: str) -> str:
    """Wait until the panel's status says it computed (or refused); the status class."""
    return page.wait_for(
        f"(() => {{ const s = document.querySelector('#panel-{panel} .status'); "
        "return (s.classList.contains('done') || s.classList.contains('error')) && s.className; })()"
    )


def type_into(page: Browser, panel: str, selector: str, text: str) -> str:
    """Type `text` into an input of the panel as a user would; the status class once it has answered."""
    page.evaluate(f"document.querySelector('#panel-{panel} .status').className = 'status'")
    page.type_text(selector, text)
    return wait_for_answer(page, panel)


def slide(page: Browser, panel: str, selector: str, value: str | bool) -> str:
    """Move a slider (or tick a checkbox) of the panel as a user would; the status class once answered."""
    page.evaluate(f"document.querySelector('#panel-{panel} .status').className = 'status'")
    page.evaluate(
        f"(() => {{ const e = document.querySelector({json.dumps(selector)}); "
        + (
            f"e.checked = {json.dumps(value)}; e.dispatchEvent(new Event('change')); }})()"
            if isinstance(value, bool)
            else f"e.value = {json.dumps(value)}; e.dispatchEvent(new Event('input')); }})()"
        )
    )
    return wait_for_answer(page, panel)


def values(page: Browser, panel: str, name: str) -> np.ndarray:
    """The numbers of the tensor `name` on the page, in row-major order, as floats."""
    found = page.evaluate(
        f"[...document.querySelectorAll('#panel-{panel} figure.tensor')]"
        f".filter((f) => f.dataset.name === {json.dumps(name)})"
        ".map((f) => [...f.querySelectorAll('td.cell')].map((c) => Number(c.dataset.value)))"
    )
    assert len(found) == 1, f"{name}: {len(found)} tensors of that name on the page"
    return np.asarray(found[0], dtype=float)  # NaN comes back as None


def series(page: Browser, panel: str, label: str) -> np.ndarray:
    """The y values of the plotted series `label`."""
    found = page.evaluate(
        f"[...document.querySelectorAll('#panel-{panel} g.series')]"
        f".filter((g) => g.dataset.label === {json.dumps(label)}).map((g) => JSON.parse(g.dataset.y))"
    )
    assert len(found) == 1, f"{label}: {len(found)} series of that name"
    return np.asarray(found[0], dtype=float)  # NaN comes back as None


def shape_label(page: Browser, panel: str, name: str) -> str:
    """The caption of tensor `name`: its name, axes and shape."""
    return page.evaluate(
        f"[...document.querySelectorAll('#panel-{panel} figure.tensor')]"
        f".find((f) => f.dataset.name === {json.dumps(name)}).querySelector('figcaption').textContent"
    )


def masked_count(page: Browser, panel: str, name: str) -> int:
    """How many entries of tensor `name` the page shows as masked."""
    return page.evaluate(
        f"[...document.querySelectorAll('#panel-{panel} figure.tensor')]"
        f".find((f) => f.dataset.name === {json.dumps(name)}).querySelectorAll('td.masked').length"
    )


def code_links(page: Browser, panel: str) -> list[str]:
    """The `file:line` texts of the panel's code links."""
    return page.evaluate(
        f"[...document.querySelectorAll('#panel-{panel} ul.code a')].map((a) => a.textContent)"
    )


def status(page: Browser, panel: str) -> tuple[str, str]:
    """The panel's status text and the HTTP status of its last answer."""
    return page.evaluate(
        f"(() => {{ const s = document.querySelector('#panel-{panel} .status'); "
        "return [s.textContent, s.dataset.code]; })()"
    )


def screenshot(page: Browser, panel: str, name: str = "") -> None:
    """With ATTN_MT_SCREENSHOTS=1, the panel as shown now, its whole height, written to docs/lab/NAME.png
    (NAME: the panel's name unless given)."""
    if os.environ.get("ATTN_MT_SCREENSHOTS") != "1":
        return
    page.evaluate("window.scrollTo(0, 0)")
    height = page.evaluate(
        f"Math.ceil(document.querySelector('#panel-{panel}').getBoundingClientRect().bottom + 10)"
    )
    clip = {"x": 0, "y": 0, "width": 1280, "height": min(height, 12000), "scale": 1}
    shot = page.send("Page.captureScreenshot", format="png", clip=clip, captureBeyondViewport=True)
    SCREENSHOTS.mkdir(exist_ok=True)
    image = Image.open(io.BytesIO(base64.b64decode(shot["data"]))).quantize(colors=64)  # fewer bytes
    image.save(SCREENSHOTS / f"{name or panel}.png", optimize=True)


def assert_close(shown: np.ndarray, expected: torch.Tensor) -> None:
    """The page's numbers equal the tensor's to TOLERANCE."""
    np.testing.assert_allclose(shown, expected.double().reshape(-1).numpy(), atol=TOLERANCE, rtol=0)


def test_masked_softmax_panel(lab, page):
    scores = [[[0.5, -1.0, 2.0, 0.25], [1.5, 0.5, -0.5, 3.0]], [[0.0, 1.0, 2.0, 3.0], [3.0, 2.0, 1.0, 0.0]]]
    show(page, lab, "softmax", scores=json.dumps(scores), valid_lens="[2, 3]")
    X = torch.tensor(scores)
    assert_close(
        values(page, "softmax", "masked_softmax(X, valid_lens)"), masked_softmax(X, torch.tensor([2, 3]))
    )
    assert masked_count(page, "softmax", "masked_softmax(X, valid_lens)") == 2 * 2 + 1 * 2
    assert shape_label(page, "softmax", "masked_softmax(X, valid_lens)").endswith("(B, Q, K) = (2, 2, 4)")
    named = page.evaluate(  # pointing at a shape names its axes in the book's words
        "[...document.querySelectorAll('#panel-softmax figure.tensor')]"
        ".find((f) => f.dataset.name === 'masked_softmax(X, valid_lens)').querySelector('figcaption').title"
    )
    assert named == (
        "B = 2: batch size; Q = 2: number of queries (the book's n); "
        "K = 4: number of key-value pairs (the book's m)"
    )
    assert "attn_mt/models/attention.py:" in " ".join(code_links(page, "softmax"))

    assert type_into(page, "softmax", "#softmax-valid-lens", "[[1, 3], [0, 4]]") == "status done"
    two_d = masked_softmax(X, torch.tensor([[1, 3], [0, 4]]))
    assert_close(values(page, "softmax", "masked_softmax(X, valid_lens)"), two_d)
    assert "valid_lens=" in page.evaluate("decodeURIComponent(location.hash)")
    assert values(page, "softmax", "masked_softmax(X, valid_lens)")[8:12].tolist() == [0, 0, 0, 0]
    screenshot(page, "softmax")

    link = page.evaluate("location.href")  # the state in the URL reproduces the numbers in a new page
    page.evaluate("location.hash = ''")
    page.open(link)
    wait_for_answer(page, "softmax")
    assert_close(values(page, "softmax", "masked_softmax(X, valid_lens)"), two_d)

    for fill, value in (("-1e6", -1e6), ("-inf", float("-inf")), ("0", 0.0), ("1e-6", 1e-6)):
        page.choose("#softmax-fill", fill)  # the book's masking with another fill value, and the leak
        page.wait_for(
            "[...document.querySelectorAll('#panel-softmax figure.tensor')]"
            f".some((f) => f.dataset.name === 'softmax, masked scores = {fill}')"
        )
        lens = torch.tensor([[1, 3], [0, 4]])
        blocked = torch.arange(4) >= lens.unsqueeze(-1)  # (B, Q, K)
        expected = torch.softmax(X.masked_fill(blocked, value), dim=-1)
        shown = values(page, "softmax", f"softmax, masked scores = {fill}")
        np.testing.assert_allclose(shown, expected.double().reshape(-1).numpy(), atol=TOLERANCE, rtol=0)
        leaked = values(page, "softmax", "weight leaked onto masked keys")
        np.testing.assert_allclose(leaked, (expected * blocked).sum(-1).reshape(-1).numpy(), atol=TOLERANCE)
        if fill == "-1e6":  # the query with no valid key spreads its weight evenly over the masked keys
            assert leaked.tolist() == [0.0, 0.0, 1.0, 0.0] and shown[8:12].tolist() == [0.25] * 4
        if fill == "-inf":  # 0/0 on the row with no valid key
            assert np.isnan(shown[8:12]).all() and "NaN" in page.evaluate(
                "document.querySelector('#panel-softmax figure.tensor td.cell[data-value=null]').textContent"
            )
        if fill in ("0", "1e-6"):
            assert leaked[0] > 0.3  # masked keys take weight as if they were valid
    page.choose("#softmax-fill", "attn-mt")
    wait_for_answer(page, "softmax")
    assert type_into(page, "softmax", "#softmax-valid-lens", "[5, 1]") == "status error"
    message, code = status(page, "softmax")
    assert code == "422" and "past the number of keys" in message
    assert type_into(page, "softmax", "#softmax-scores", "[[[1, two]]]") == "status error"
    assert status(page, "softmax")[1] == "422"


def cell_colours(page: Browser, panel: str, name: str) -> list[str]:
    """The background colours of tensor `name`'s cells."""
    return page.evaluate(
        f"[...document.querySelectorAll('#panel-{panel} figure.tensor')]"
        f".find((f) => f.dataset.name === {json.dumps(name)})"
        ".querySelectorAll('td.cell').values().map((c) => c.style.background).toArray()"
    )


def test_the_masked_softmax_sentences_say_what_the_fills_compute(lab):
    scores = [[[1, 2, 3]], [[1, 2, 3]]]
    code, body = call(
        lab, "/api/softmax", {"scores": json.dumps(scores), "valid_lens": "[0, 2]", "fill": "1e-6"}
    )
    leaked = next(t for t in body["tensors"] if t["name"] == "weight leaked onto masked keys")["values"]
    valid = torch.softmax(torch.tensor([1.0, 2.0, 3.0]), dim=0)  # what key 3 would get were it valid
    masked = torch.softmax(torch.tensor([1.0, 2.0, 1e-6]), dim=0)  # what it gets filled with 1e-6
    assert abs(leaked[1][0] - float(masked[2])) < 1e-6 and abs(float(masked[2]) - float(valid[2])) > 0.5
    note = body["notes"][0]
    assert "mask nothing" not in note and "as if they were valid" not in note
    assert f"Here the most any query leaks is {max(row[0] for row in leaked):.4g}." in note
    code, body = call(lab, "/api/softmax", {"scores": "[[[10, 12, 5]]]", "valid_lens": "[2]", "fill": "0"})
    per_key = float(torch.softmax(torch.tensor([10.0, 12.0, 0.0]), dim=0)[2])
    assert f"{per_key:.0e}" == "5e-06" and "about 5e-6 on each masked key" in body["notes"][0]


@pytest.mark.parametrize(("d", "saturated"), [(2, False), (1024, True)])
def test_the_key_size_panel_says_one_key_takes_all_only_when_it_does(lab, d, saturated):
    code, body = call(lab, "/api/keysize", {"d": d, "scaled": "false"})
    weights = next(t for t in body["tensors"] if t["name"] == "attention_weights")["values"][0][0]
    assert (max(weights) > 0.9) == saturated
    assert ("nearly all weight on one key" in body["notes"][0]) == saturated
    assert f"the largest of the 8 weights is {max(weights):.3f}" in body["notes"][0]


def test_weights_are_drawn_on_a_fixed_scale_and_other_tensors_centred_at_zero(lab, page):
    show(page, lab, "softmax", scores="[[[0.1, -0.02, 0.01], [5, 0, 0]]]", valid_lens="", fill="attn-mt")
    weights = values(page, "softmax", "masked_softmax(X, valid_lens)")
    blue = np.array([8, 81, 156])
    white = np.array([247, 251, 255])

    def rgb(t: float, to: np.ndarray = blue) -> str:
        r, g, b = np.round(white + (to - white) * t).astype(int)
        return f"rgb({r}, {g}, {b})"

    assert cell_colours(page, "softmax", "masked_softmax(X, valid_lens)") == [rgb(w) for w in weights]
    classes = page.evaluate(  # the weights of the first query, near 1/3 each
        "[...document.querySelectorAll('#panel-softmax figure.tensor td.cell')]"
        ".slice(6, 9).map((c) => c.className)"
    )
    assert classes == ["cell"] * 3  # light cells with dark text, never dark against white
    scores = values(page, "softmax", "X (scores)")
    red = np.array([165, 15, 21])
    expected = [rgb(abs(x) / 5, blue if x < 0 else red) for x in scores]
    assert cell_colours(page, "softmax", "X (scores)") == expected
    legends = page.evaluate(
        "[...document.querySelectorAll('#panel-softmax figure.tensor')].map((f) => "
        "[f.querySelector('.legend').dataset.scale, "
        "[...f.querySelectorAll('.legend-label')].map((l) => l.textContent)])"
    )
    assert legends == [["centred", ["-5", "0", "5"]], ["weights", ["0", "0.5", "1"]]]


def legend_scale(page: Browser, panel: str, name: str) -> str:
    """The colour scale the legend of tensor `name` names."""
    return page.evaluate(
        f"[...document.querySelectorAll('#panel-{panel} figure.tensor')]"
        f".find((f) => f.dataset.name === {json.dumps(name)}).querySelector('.legend').dataset.scale"
    )


def test_scales_say_what_a_tensor_holds_and_no_value_needs_a_mouse(lab, page):
    show(page, lab, "softmax", scores="[[[1, 2, 3]], [[1, 2, 3]]]", valid_lens="[0, 2]", fill="attn-mt")
    assert legend_scale(page, "softmax", "valid_lens") == "sequential"  # lengths, not signed values
    sentence = english("Alpha bravo charlie delta.")
    show(page, lab, "decoding", run="transformer", sentence=sentence, beam="1", step="0", row="0", layer="")
    assert legend_scale(page, "decoding", "mask (1: key may be attended)") == "binary"
    show(page, lab, "own_translation", run="transformer", sentence=sentence, target=english("un deux ."))
    assert legend_scale(page, "own_translation", "yours: p(token)") == "probability"  # 0 to 1, not -1 to 1
    show(page, lab, "scoring")
    cells = "#panel-scoring figure.tensor[data-name='Q Kᵀ'] td.cell"
    page.evaluate(f"document.querySelectorAll({json.dumps(cells)})[1].focus()")  # by keyboard, no mouse
    title = page.evaluate(f"document.querySelectorAll({json.dumps(cells)})[1].title")
    assert "×" in title
    focused = "#panel-scoring figure.tensor[data-name='Q Kᵀ'] .focused-entry"
    assert page.evaluate(f"document.querySelector({json.dumps(focused)}).textContent") == title
    listed = page.evaluate(
        "document.querySelectorAll(\"#panel-scoring figure.tensor[data-name='Q Kᵀ'] details li\").length"
    )
    assert listed == page.evaluate(f"document.querySelectorAll({json.dumps(cells)}).length")
    show(page, lab, "nadaraya_watson")
    dashes = page.evaluate(
        "[...document.querySelectorAll('#panel-nadaraya_watson figure.plot')[0].querySelectorAll('polyline')]"
        ".map((l) => l.getAttribute('stroke-dasharray'))"
    )
    assert len(set(dashes)) == len(dashes) >= 3  # the lines differ by more than their colour


def test_queries_keys_and_values_panel(lab, page):
    show(page, lab, "cues", stand_out="0", read="2")
    keys = torch.tensor([[0.2, 0.7], [0.1, 1.0], [1.0, -0.5], [0.1, 0.4], [0.2, 0.9]])
    query = torch.tensor([0.0, 2.0])
    assert_close(
        values(page, "cues", "volitional weights: softmax of the scores"),
        torch.softmax(keys @ query / 2**0.5, 0),
    )
    assert_close(values(page, "cues", "non-volitional weights: no query"), torch.softmax(4 * keys[:, 0], 0))
    picked = page.evaluate("document.querySelector('#panel-cues p.text').textContent")
    assert picked == "no query: red coffee cup; your query: research paper"
    assert slide(page, "cues", "#cues-read", "-2") == "status done"  # wanting nothing to read
    assert_close(values(page, "cues", "non-volitional weights: no query"), torch.softmax(4 * keys[:, 0], 0))
    picked = page.evaluate("document.querySelector('#panel-cues p.text').textContent")
    assert picked == "no query: red coffee cup; your query: red coffee cup"
    screenshot(page, "cues")


def test_self_attention_sees_a_set_of_words_until_positions_are_added(lab, page):
    show(page, lab, "self_attention", sentence="the dog bit the man", reordered="the man bit the dog", d="8")
    gaps = values(page, "self_attention", "largest difference of a word's output between the two orders")
    assert gaps[0] < 1e-5 < 0.1 < gaps[1]  # order decides who bit whom only once positions are added
    weights = values(page, "self_attention", "self-attention weights, first order").reshape(5, 5)
    np.testing.assert_allclose(weights.sum(1), np.ones(5), atol=1e-6)
    assert weights[0, 0] == weights[3, 3]  # "the" twice: the same query and key without positions
    assert slide(page, "self_attention", "#self-attention-positions", True) == "status done"
    weights = values(page, "self_attention", "self-attention weights, first order").reshape(5, 5)
    assert abs(weights[0, 0] - weights[3, 3]) > 1e-4
    screenshot(page, "self_attention")
    assert (
        type_into(page, "self_attention", "#self-attention-reordered", "the cat bit the dog")
        == "status error"
    )


def test_scoring_functions_panel(lab, page):
    queries, keys = [[[1.0, 0.5], [0.0, 2.0]]], [[[1.0, 0.0], [0.5, 1.0], [1.0, 1.0]]]
    values_in = [[[1.0, 0.0], [0.0, 1.0], [2.0, 2.0]]]
    show(
        page,
        lab,
        "scoring",
        queries=json.dumps(queries),
        keys=json.dumps(keys),
        values=json.dumps(values_in),
        num_hiddens="6",
        seed="3",
        valid_lens="",
    )
    Q, K, V = torch.tensor(queries), torch.tensor(keys), torch.tensor(values_in)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(3)
        additive = AdditiveAttention(key_size=2, query_size=2, num_hiddens=6, dropout=0.0)
    dot = DotProductAttention(dropout=0.0)
    with torch.no_grad():
        additive(Q, K, V)
        dot_output = dot(Q, K, V)
    assert_close(values(page, "scoring", "additive: attention_weights"), additive.attention_weights)
    assert_close(values(page, "scoring", "scaled dot-product: attention_weights"), dot.attention_weights)
    assert_close(values(page, "scoring", "scaled dot-product: output"), dot_output)
    assert_close(values(page, "scoring", "Q Kᵀ"), Q @ K.transpose(1, 2))
    hover = page.evaluate(
        "[...document.querySelectorAll('#panel-scoring figure.tensor')]"
        ".find((f) => f.dataset.name === 'Q Kᵀ').querySelector('td.cell[data-index=\"0,0,1\"]').title"
    )
    assert hover == "1×0.5 + 0.5×1 = 1"
    projected_q, projected_k = additive.W_q(Q).unsqueeze(2), additive.W_k(K).unsqueeze(1)
    assert shape_label(page, "scoring", "W_q q, unsqueezed").endswith("(B, Q, 1, H) = (1, 2, 1, 6)")
    assert shape_label(page, "scoring", "W_k k, unsqueezed").endswith("(B, 1, K, H) = (1, 1, 3, 6)")
    assert shape_label(page, "scoring", "tanh(W_q q + W_k k): the features").endswith(
        "(B, Q, K, H) = (1, 2, 3, 6)"
    )
    with torch.no_grad():
        assert_close(values(page, "scoring", "W_q q + W_k k (broadcast)"), projected_q + projected_k)
        features = torch.tanh(projected_q + projected_k)
        assert_close(values(page, "scoring", "tanh(W_q q + W_k k): the features"), features)
        assert_close(
            values(page, "scoring", "scores w_vᵀ tanh(…), before masking"), additive.w_v(features)[..., 0]
        )
    scales = page.evaluate(
        "Object.fromEntries([...document.querySelectorAll('#panel-scoring figure.tensor')]"
        ".map((f) => [f.dataset.name, f.querySelector('.legend').dataset.scale]))"
    )
    assert scales["additive: attention_weights"] == "weights" and scales["Q Kᵀ"] == "centred"
    screenshot(page, "scoring")

    assert type_into(page, "scoring", "#scoring-keys", "[[[0, 1], [0.5, 1], [1, 1]]]") == "status done"
    K2 = torch.tensor([[[0.0, 1.0], [0.5, 1.0], [1.0, 1.0]]])
    with torch.no_grad():
        additive(Q, K2, V)
        dot(Q, K2, V)
    assert_close(values(page, "scoring", "additive: attention_weights"), additive.attention_weights)
    assert_close(values(page, "scoring", "scaled dot-product: attention_weights"), dot.attention_weights)
    page.evaluate("document.querySelector('#panel-scoring .status').className = 'status'")
    page.click("#panel-scoring button[data-set]")  # the chapter's example: 10 equal keys, valid_lens [2, 6]
    wait_for_answer(page, "scoring")
    book_output = torch.tensor([[[2.0, 3.0, 4.0, 5.0]], [[10.0, 11.0, 12.0, 13.0]]])  # the book prints these
    assert_close(values(page, "scoring", "additive: output"), book_output)
    assert_close(values(page, "scoring", "scaled dot-product: output"), book_output)
    show(
        page,
        lab,
        "scoring",
        queries="[[[1, 0, 2]]]",
        keys=json.dumps(keys),
        values=json.dumps(values_in),
        seed="3",
        valid_lens="",
    )
    M = torch.randn(3, 2, generator=torch.Generator().manual_seed(3)) / 3**0.5  # q = 3 against k = 2: q^T M k
    bilinear = torch.softmax(torch.tensor([[[1.0, 0.0, 2.0]]]) @ M @ K.transpose(1, 2) / 2**0.5, dim=-1)
    assert_close(values(page, "scoring", "bilinear qᵀ M k / √k: attention_weights"), bilinear)
    assert type_into(page, "scoring", "#scoring-values", "[[[1, 0], [0, 1]]]") == "status error"
    assert status(page, "scoring")[1] == "422"


def test_key_size_panel(lab, page):
    show(page, lab, "keysize", d="16", seed="5", scaled="true")
    assert slide(page, "keysize", "#keysize-d", "256") == "status done"
    generator = torch.Generator().manual_seed(5)
    q, k = torch.randn(1, 1, 256, generator=generator), torch.randn(1, 8, 256, generator=generator)
    v = torch.arange(8.0).reshape(1, 8, 1)
    attention = DotProductAttention(dropout=0.0)
    attention(q, k, v)
    assert_close(values(page, "keysize", "attention_weights"), attention.attention_weights)
    scaled_top = values(page, "keysize", "attention_weights").max()
    assert slide(page, "keysize", "#keysize-scaled", False) == "status done"
    attention(q * 16.0, k, v)
    assert_close(values(page, "keysize", "attention_weights"), attention.attention_weights)
    assert values(page, "keysize", "attention_weights").max() > scaled_top
    assert "scaled=false" in page.evaluate("location.hash") and "d=256" in page.evaluate("location.hash")
    curves = page.evaluate(
        "Object.fromEntries([...document.querySelectorAll('#panel-keysize g.series')]"
        ".map((g) => [g.dataset.label, JSON.parse(g.dataset.y)]))"
    )
    with_scale, without = curves["std of scores with √d"], curves["std of scores without √d"]
    assert max(with_scale) < 2 and without[-1] > 16  # unit spread against sqrt(1024) = 32
    screenshot(page, "keysize")


def rotation(k: int, hiddens: int) -> torch.Tensor:
    """The shift by k written out pair by pair: [[cos, sin], [-sin, cos]] of k / 10000^(2j / H)."""
    M = torch.zeros(hiddens, hiddens, dtype=torch.float64)
    for j in range(hiddens // 2):
        angle = torch.tensor(k / 10000 ** (2 * j / hiddens), dtype=torch.float64)
        M[2 * j : 2 * j + 2, 2 * j : 2 * j + 2] = torch.stack(
            [torch.stack([angle.cos(), angle.sin()]), torch.stack([-angle.sin(), angle.cos()])]
        )
    return M


def test_positional_encoding_panel(lab, page):
    show(page, lab, "positions", num_steps="40", num_hiddens="16", position="5", dimension="4", shift="7")
    table = sinusoid_table(40, 16)
    assert_close(values(page, "positions", "P (positional encoding)"), table)
    assert_close(values(page, "positions", "P[5] (row i = 5)"), table[5])
    assert_close(values(page, "positions", "M_7 (shift by k = 7)"), rotation(7, 16))
    np.testing.assert_allclose(values(page, "positions", "M_7 · P[5]"), table[12].double().numpy(), atol=1e-5)
    assert shape_label(page, "positions", "M_7 (shift by k = 7)").endswith("(H, H) = (16, 16)")
    assert slide(page, "positions", "#positions-shift", "20") == "status done"
    assert_close(values(page, "positions", "M_20 (shift by k = 20)"), rotation(20, 16))
    assert_close(values(page, "positions", "P[25] (row i + k)"), sinusoid_table(26, 16)[25])
    column = page.evaluate(
        "JSON.parse([...document.querySelectorAll('#panel-positions g.series')]"
        ".find((g) => g.dataset.label === 'column 4').dataset.y)"
    )
    assert_close(np.asarray(column), table[:, 4])
    assert_close(series(page, "positions", "column 6"), table[:, 6])  # the chapter's columns 6 to 9
    marked = page.evaluate(  # the chosen row i = 5 and column c = 4 are outlined in the table
        "(() => { const f = [...document.querySelectorAll('#panel-positions figure.tensor')]"
        ".find((f) => f.dataset.name === 'P (positional encoding)');"
        " const at = (kind, axis) => [...new Set([...f.querySelectorAll(`td.marked-${kind}`)]"
        ".map((c) => c.dataset.index.split(',')[axis]))];"
        " return [at('row', 0), at('column', 1)]; })()"
    )
    assert marked == [["5"], ["4"]]
    assert slide(page, "positions", "#positions-steps", "3") == "status done"  # i = 5 follows S down to 2
    assert page.evaluate("document.querySelector('#positions-position').value") == "2"
    assert slide(page, "positions", "#positions-steps", "40") == "status done"
    screenshot(page, "positions")


def test_sliders_offer_only_settings_the_server_takes(lab, page):
    show(page, lab, "positions", num_steps="60", num_hiddens="32", position="5", dimension="4", shift="3")
    assert slide(page, "positions", "#positions-hiddens", "64") == "status done"  # S = 60 x H = 64 > 4,096
    assert page.evaluate("document.querySelector('#positions-steps').max") == "64"
    assert page.evaluate("document.querySelector('#positions-steps').value") == "60"
    assert slide(page, "positions", "#positions-steps", "128") == "status done"  # held at 4,096 / 64
    assert page.evaluate("document.querySelector('#positions-steps').value") == "64"
    show(page, lab, "complexity", n="128", d="32", k="3")
    assert page.evaluate("document.querySelector('#complexity-d').max") == "32"  # n x d <= 4,096
    assert slide(page, "complexity", "#complexity-d", "256") == "status done"


def test_unknown_words_are_named_not_silently_read_as_unk(lab):
    sentence = english("Alpha zulu bravo.", "i lost zorblax .")
    unknown = "zulu" if not REAL_RUNS else "zorblax"
    code, body = call(lab, "/api/decoding", {"run": "transformer", "sentence": sentence, "beam": 1})
    assert f"so the model reads each as <unk>: {unknown!r}" in body["notes"][0]
    code, body = call(
        lab, "/api/own_translation", {"run": "gru_bahdanau", "sentence": sentence, "target": "un zzz ."}
    )
    notes = " ".join(body["notes"])
    assert f"English vocabulary, so the model reads each as <unk>: {unknown!r}" in notes
    assert "French vocabulary, so the model reads each as <unk>: 'zzz'" in notes
    code, body = call(
        lab, "/api/decoding", {"run": "transformer", "sentence": english("Alpha bravo."), "beam": 1}
    )
    assert not any("<unk>" in note for note in body["notes"])


def test_multi_head_attention_panel_splits_w_q_x_and_switches_heads_off(lab, page):
    show(page, lab, "heads", batch="2", steps="3", num_hiddens="8", num_heads="2", seed="0", off="")
    torch.manual_seed(0)
    attention = MultiHeadAttention(8, 8, 8, 8, 2, dropout=0.0).eval()
    X = torch.randn(2, 3, 8, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        projected = attention.W_q(X)
        attention(X, X, X)
    split = projected.reshape(2, 3, 2, 4).permute(0, 2, 1, 3)  # (B, h, N, d) written out: W_q X, not X
    assert_close(values(page, "heads", "split_heads(W_q X)"), split)
    assert shape_label(page, "heads", "split_heads(W_q X)").endswith("(B, h, N, d) = (2, 2, 3, 4)")
    assert_close(values(page, "heads", "each head's attention weights"), attention.attention_weights)
    with torch.no_grad():
        full = attention(X, X, X)
    assert_close(values(page, "heads", "W_o: the output"), full)
    notes = page.evaluate("[...document.querySelectorAll('#panel-heads p.note')].map((p) => p.textContent)")
    assert "does not split X" in notes[0] and "columns 1–4, 5–8 (counted from 1) of W_q X" in notes[0]
    slices = page.evaluate(
        "[...document.querySelectorAll('#panel-heads figure.tensor .slice-label')].map((l) => l.textContent)"
    )
    parts = {part for label in slices for part in label.split(", ")}
    assert "head 1" in parts and "h=0" not in parts  # heads counted from 1, as in every other label
    assert type_into(page, "heads", "#heads-off", "2") == "status done"
    d = 4

    def second_head_off(_module, inputs):
        return (torch.cat([inputs[0][..., :d], inputs[0][..., d:] * 0], dim=-1),)

    hook = attention.W_o.register_forward_pre_hook(second_head_off)
    try:
        with torch.no_grad():
            without = attention(X, X, X)
    finally:
        hook.remove()
    assert_close(values(page, "heads", "W_o: the output"), without)
    screenshot(page, "heads")
    assert type_into(page, "heads", "#heads-off", "3") == "status error"  # there are 2 heads
    assert slide(page, "heads", "#heads-heads", "3") == "status error"  # 8 is not divisible by 3
    assert "not divisible" in status(page, "heads")[0] and status(page, "heads")[1] == "422"


def test_cnn_rnn_and_self_attention_compared_for_the_learners_n_d_and_k(lab, page):
    show(page, lab, "complexity", n="20", d="8", k="5")
    n, d, k = 20, 8, 5
    table = values(page, "complexity", f"per layer, n = {n}, d = {d}, k = {k}").reshape(3, 3)
    hops_cnn = -(-(n - 1) // (k // 2))  # the centred window reaches k // 2 tokens further per layer
    expected = [[k * n * d * d, 1, hops_cnn], [n * d * d, n, n - 1], [2 * n * n * d, 1, 1]]
    np.testing.assert_array_equal(table, expected)
    drawn = page.evaluate(
        "[...document.querySelectorAll('#panel-complexity figure.path')]"
        ".map((f) => [f.dataset.label, f.querySelectorAll('path.hop').length])"
    )
    assert drawn == [["CNN", hops_cnn], ["RNN", n - 1], ["self-attention", 1]]
    assert slide(page, "complexity", "#complexity-k", "9") == "status done"
    table = values(page, "complexity", f"per layer, n = {n}, d = {d}, k = 9").reshape(3, 3)
    assert table[0, 2] == -(-(n - 1) // 4) < hops_cnn  # a wider kernel, a shorter path
    screenshot(page, "complexity")


def test_the_transformer_panel_diagram_masks_cache_add_norm_and_ffn(lab, page, engines):
    engine = engines["transformer"]
    model = engine.model
    sentence = english("Alpha bravo charlie.")
    show(page, lab, "transformer", run="transformer", sentence=sentence, target="")
    translation = engine.translate([sentence], beam_size=1)[0]
    out = translation.hypotheses[0].tokens
    T = len(out) + 1  # <bos> and the greedy output
    fed, src_len = engine.source_ids(translation.source_tokens)
    src, src_lens = torch.tensor([fed]), torch.tensor([src_len])
    assert_close(
        values(page, "transformer", "causal mask of the decoder's self-attention (1: may attend)"),
        torch.ones(T, T).tril(),
    )
    assert_close(
        values(page, "transformer", "source mask from valid_lens (1: may attend)"),
        (torch.arange(len(fed)) < src_len).float(),
    )
    heads, d = model.num_heads, model.encoder.num_hiddens // model.num_heads
    cache = values(page, "transformer", "cached keys per layer after each step: shape (B, h, t, d)")
    assert cache.reshape(T, 4).tolist() == [[1, heads, t, d] for t in range(1, T + 1)]
    tgt_in = torch.tensor([[engine.tgt_vocab.bos_id, *out]])
    kept = {}
    hook = model.encoder.blks.block0.addnorm1.register_forward_hook(
        lambda _m, inputs, output: kept.update(summed=inputs[0] + inputs[1], normed=output)
    )
    with torch.no_grad():
        log_probs = torch.log_softmax(model(src, src_lens, tgt_in), dim=-1)[0]  # (T, V)
    hook.remove()
    both = values(
        page, "transformer", "log p(next token): training (all at once) | prediction (step by step)"
    )
    np.testing.assert_allclose(both.reshape(T, 2)[:, 0], log_probs.max(-1).values.numpy(), atol=1e-5)
    np.testing.assert_allclose(both.reshape(T, 2)[:, 1], log_probs.max(-1).values.numpy(), atol=1e-4)
    summed, normed = kept["summed"][0], kept["normed"][0]
    stats = torch.stack(
        [summed.mean(-1), summed.std(-1, unbiased=False), normed.mean(-1), normed.std(-1, unbiased=False)],
        dim=1,
    )
    add_norm = "add & norm: mean and std over H of X + Y | of LayerNorm(X + Y)"
    np.testing.assert_allclose(values(page, "transformer", add_norm), stats.reshape(-1).numpy(), atol=1e-5)
    labels = page.evaluate(  # the rows are the source's tokens, the columns the statistics' names
        f"(() => {{ const f = [...document.querySelectorAll('#panel-transformer figure.tensor')]"
        f".find((f) => f.dataset.name === {json.dumps(add_norm)}); "
        "const of = (s) => [...f.querySelectorAll(s)].map((th) => th.classList.contains('token-label')); "
        "return [of('th.row-label'), of('th.column-label')]; })()"
    )
    assert labels == [[True] * len(fed), [False] * 4]
    blocks = page.evaluate(
        "[...document.querySelectorAll('#panel-transformer svg.architecture a.block')]"
        ".map((a) => [a.dataset.side, a.dataset.name, a.dataset.shape])"
    )
    ids = page.evaluate(
        "[...document.querySelectorAll('#panel-transformer svg.architecture a.block')]"
        ".map((a) => a.dataset.id)"
    )
    assert ids[6:] == [
        "target_tokens",
        "embedding",
        "masked_self_attention",
        "add_norm",
        "cross_attention",
        "add_norm",
        "ffn",
        "add_norm",
        "output",
    ]
    S, H = len(fed), model.encoder.num_hiddens
    assert ["encoder", "embedding · √H + positional encoding", f"(1, S, H) = (1, {S}, {H})"] in blocks
    assert [
        "decoder",
        "masked multi-head self-attention (causal)",
        f"(1, h, T, T) = (1, {heads}, {T}, {T})",
    ] in blocks
    screenshot(page, "transformer")
    page.click(
        "#panel-transformer svg.architecture a.block[data-name='embedding · √H + positional encoding']"
    )
    page.wait_for("!document.querySelector('#panel-positions').hidden")
    wait_for_answer(page, "positions")


def test_a_block_of_the_transformer_diagram_opens_its_panel_on_the_learners_sentence(lab, page):
    sentence = english("Charlie delta echo.", "he is calm .")
    show(page, lab, "transformer", run="transformer", sentence=sentence, target="")
    page.click("#panel-transformer a.block[data-id='cross_attention']")
    page.wait_for("!document.querySelector('#panel-trained_heads').hidden")
    wait_for_answer(page, "trained_heads")
    assert page.evaluate("document.querySelector('#trained-heads-sentence').value") == sentence
    assert page.evaluate("document.querySelector('#trained-heads-map').value") == "cross"


def test_every_head_of_a_trained_transformer(lab, page, engines):
    sentence = english("Alpha bravo charlie.")
    show(page, lab, "trained_heads", run="transformer", map="cross", sentence=sentence)
    engine = engines["transformer"]
    translation = engine.translate([sentence], beam_size=1)[0]
    expected = engine.attention(translation)
    assert (
        page.evaluate("document.querySelector('#panel-trained_heads .text').textContent") == translation.text
    )
    assert_close(
        values(page, "trained_heads", "encoder-decoder attention of transformer"),
        torch.from_numpy(expected.maps["cross"]),
    )
    layers, heads, rows, cols = expected.maps["cross"].shape
    assert shape_label(page, "trained_heads", "encoder-decoder attention of transformer").endswith(
        f"(L, h, T, S) = ({layers}, {heads}, {rows}, {cols})"
    )
    labels = page.evaluate(
        "[...document.querySelectorAll('#panel-trained_heads .slice')][0]"
        ".querySelectorAll('th.column-label').length"
    )
    assert labels == len(expected.source_tokens) == cols
    drawn = page.evaluate(  # the lines view: every head's line of every pair with weight >= 0.02
        "[...document.querySelectorAll('#panel-trained_heads line.token-line')].map((l) => "
        "[Number(l.closest('svg').dataset.layer), Number(l.dataset.head), Number(l.dataset.query), "
        "Number(l.dataset.key), Number(l.getAttribute('stroke-opacity'))])"
    )
    maps = expected.maps["cross"]
    wanted = [(a, b, i, j) for a, b, i, j in np.argwhere(maps >= 0.02)]
    assert sorted((a, b, i, j) for a, b, i, j, _ in drawn) == sorted(tuple(map(int, w)) for w in wanted)
    for a, b, i, j, opacity in drawn:
        assert abs(opacity - maps[a, b, i, j]) < 1e-4
    assert page.evaluate("document.querySelector('#panel-trained_heads .legend').dataset.scale") == "weights"
    thumbs = page.evaluate("document.querySelectorAll('#panel-trained_heads svg.thumb').length")
    assert thumbs == layers * heads
    page.choose("#trained-heads-map", "encoder_self")
    wait_for_answer(page, "trained_heads")
    page.wait_for(
        "document.querySelector('#panel-trained_heads figure.tensor').dataset.name.startsWith('encoder self')"
    )
    assert_close(
        values(page, "trained_heads", "encoder self-attention of transformer"),
        torch.from_numpy(expected.maps["encoder_self"]),
    )
    screenshot(page, "trained_heads")


def test_the_gru_runs_whole_sentence_attention_map(lab, page, engines):
    engine = engines["gru_bahdanau"]
    sentence = english("Alpha bravo charlie delta.", "he is calm .")
    show(page, lab, "trained_heads", run="gru_bahdanau", map="cross", sentence=sentence)
    translation = engine.translate([sentence], beam_size=1)[0]
    expected = torch.from_numpy(engine.attention(translation).maps["cross"])  # (T, S)
    name = "encoder-decoder attention of gru_bahdanau"
    assert_close(values(page, "trained_heads", name), expected)
    assert shape_label(page, "trained_heads", name).endswith(f"(T, S) = {tuple(expected.shape)}")
    assert legend_scale(page, "trained_heads", name) == "weights"


def test_nadaraya_watson_panel(lab, page):
    show(page, lab, "nadaraya_watson", seed="3", w="2.5", epochs="20", lr="0.5", point="7")
    generator = torch.Generator().manual_seed(3)
    data = make_data(generator)
    weights = gaussian_attention_weights(data.x_test, data.x_train, 2.5)
    model, losses = train_parametric(data, generator, 0.5, 20)
    parametric = predict_parametric(model, data.x_test, data)
    assert_close(values(page, "nadaraya_watson", "nonparametric attention weights"), weights)
    assert_close(series(page, "nadaraya_watson", "nonparametric"), weights @ data.y_train)
    assert_close(series(page, "nadaraya_watson", "parametric"), parametric)
    assert_close(values(page, "nadaraya_watson", "parametric attention weights"), model.attention_weights)
    assert_close(series(page, "nadaraya_watson", "loss"), torch.tensor(losses))
    assert_close(series(page, "nadaraya_watson", "average"), data.y_train.mean().expand(50))
    kept = values(page, "nadaraya_watson", "leave_one_out(x_train)[i]: the keys training point i sees")
    assert_close(kept, leave_one_out(data.x_train)[7])
    assert data.x_train[7].item() not in kept.tolist() and len(kept) == 49
    text = page.evaluate("document.querySelector('#panel-nadaraya_watson p.text').textContent")
    assert text == f"learned w = {model.w.item():.6f}"
    centre = torch.tensor([2.5])
    for w in (2.5, 5.0):  # the kernel drawn for w and 2w, and 2w is the narrower one
        assert_close(
            series(page, "nadaraya_watson", f"w = {w:g}"),
            gaussian_attention_weights(centre, data.x_train, w)[0],
        )
    spreads = page.evaluate(
        "[...document.querySelectorAll('#panel-nadaraya_watson p.note')].map((p) => p.textContent).join(' ')"
    )
    expected = [float(kernel_spread(centre, data.x_train, w)[0]) for w in (2.5, 5.0)]
    assert (
        expected[1] < expected[0]
        and f"{expected[0]:.3f} for w = 2.5 and {expected[1]:.3f} for 2w = 5" in spreads
    )
    screenshot(page, "nadaraya_watson")
    assert slide(page, "nadaraya_watson", "#nw-w", "0.5") == "status done"
    narrow = gaussian_attention_weights(data.x_test, data.x_train, 0.5)
    assert_close(values(page, "nadaraya_watson", "nonparametric attention weights"), narrow)
    assert type_into(page, "nadaraya_watson", "#nw-lr", "fast") == "status error"
    assert status(page, "nadaraya_watson")[1] == "422"
    assert result_count(page, "nadaraya_watson") == 0  # no figure of the inputs before under the error


def result_count(page: Browser, panel: str) -> int:
    """How many elements the panel's result area holds."""
    return page.evaluate(f"document.querySelectorAll('#panel-{panel} .result *').length")


@pytest.mark.parametrize("kernel", ["boxcar", "epanechnikov"])
def test_the_nadaraya_watson_panel_pools_with_the_books_other_kernels(lab, kernel):
    code, body = call(lab, "/api/nadaraya_watson", {"kernel": kernel, "w": 20, "epochs": 1})
    assert code == 200, body
    data = make_data(torch.Generator().manual_seed(0))
    u = (data.x_test.unsqueeze(-1) - data.x_train) * 20  # (Q, N)
    raw = (u.abs() <= 1).double() if kernel == "boxcar" else (1 - u.double() ** 2).clamp(min=0)
    total = raw.sum(-1, keepdim=True)
    expected = torch.where(total > 0, raw / total.clamp(min=1e-300), torch.zeros_like(raw))
    shown_weights = next(t for t in body["tensors"] if t["name"] == "nonparametric attention weights")
    np.testing.assert_allclose(np.asarray(shown_weights["values"]), expected.numpy(), atol=1e-6)
    empty = int((total == 0).sum())
    assert empty > 0  # at w = 20 the window is 0.1 wide: some test inputs see no training input
    assert f"{empty} of the 50 test inputs have no training input within 1/w" in " ".join(body["notes"])
    zoomed = next(t for t in body["tensors"] if t["name"].startswith("the same weights, zoomed"))
    assert zoomed["scale"] == "sequential"


def test_the_nadaraya_watson_panel_shows_w_being_learned_by_default(lab):
    code, body = call(lab, "/api/nadaraya_watson", {})
    (losses,) = [p["series"][0]["y"] for p in body["plots"] if p["title"].startswith("parametric training")]
    assert len(losses) == 50
    # not one jump then a flat line (the book's lr 0.5): after its first epoch the loss still has more
    # than half of its way down to go
    assert losses[1] - losses[-1] > 0.5 * (losses[0] - losses[-1]) > 0
    notes = " ".join(body["notes"])
    assert "weights reach" not in notes and "root mean square distance" in notes


def hypothesis_rows(page: Browser) -> list[str]:
    """The row labels of the live hypotheses on the decoding panel."""
    return page.evaluate(
        "[...[...document.querySelectorAll('#panel-decoding figure.tensor')]"
        ".find((f) => f.dataset.name === 'live hypotheses: score so far')"
        ".querySelectorAll('th.row-label')].map((t) => t.textContent)"
    )


@pytest.mark.parametrize("model", ["gru_bahdanau", "transformer"])
def test_step_through_decoding_follows_translate_and_the_attention_dump(lab, page, engines, model):
    engine = engines[model]
    sentence = english("Alpha bravo charlie delta.")
    translation = engine.translate([sentence], beam_size=1)[0]
    dump = engine.attention(translation).maps["cross"]  # (T, S) or (L, h, T, S)
    out = translation.hypotheses[0].tokens
    name = "attention weights" if model == "gru_bahdanau" else "attention weights (layer 2)"  # from 1
    for t in range(len(out) + 1):
        show(page, lab, "decoding", run=model, sentence=sentence, beam="1", step=str(t), row="0", layer="2")
        assert (
            page.evaluate("document.querySelector('#panel-decoding p.text').textContent") == translation.text
        )
        assert hypothesis_rows(page) == [" ".join(engine.tgt_vocab.labels(out[:t])) or "<bos>"]
        expected = dump[t] if model == "gru_bahdanau" else dump[1, :, t]
        shown = values(page, "decoding", name).reshape(*expected.shape[:-1], -1)  # book mode pads the source
        valid = expected.shape[-1]  # the dump keeps the source's valid positions only
        np.testing.assert_allclose(shown[..., :valid], expected, atol=TOLERANCE, rtol=0)
        assert not shown[..., valid:].any()  # padding gets no weight, and is shown masked
        assert masked_count(page, "decoding", name) == shown[..., valid:].size
    assert page.evaluate("document.querySelector('#decoding-step').max") == str(len(out))
    texts = page.evaluate(
        "[...document.querySelectorAll('#panel-decoding p.text')].map((p) => p.textContent)"
    )
    assert texts[1].endswith("finished: " + " ".join(engine.tgt_vocab.labels(out)) + " <eos>")
    if model == "transformer":
        scores = torch.tensor(values(page, "decoding", "scores q·k/√d (layer 2)"))
        scores = scores.reshape(engine.model.num_heads, -1)  # (h, S)
        scores[:, dump.shape[-1] :] = float("-inf")  # the padded source positions are masked
        assert_close(values(page, "decoding", name), torch.softmax(scores, dim=-1))

    beam = engine.translate([sentence], beam_size=3)[0]
    show(page, lab, "decoding", run=model, sentence=sentence, beam="3", step="2", row="1", layer="1")
    assert page.evaluate("document.querySelector('#panel-decoding p.text').textContent") == beam.text
    assert len(hypothesis_rows(page)) == 3

    reference = english("un deux trois .", "je suis perdu .")
    show(
        page,
        lab,
        "decoding",
        run=model,
        sentence=sentence,
        beam="1",
        step="1",
        reference=reference,
        layer="1",
    )
    forced = values(page, "decoding", "teacher forcing: log p(reference token) | log p(model's pick)")
    scored = score_with(engine, [sentence], [reference])[0]
    np.testing.assert_allclose(forced[0::2], scored.token_log_probs, atol=1e-5, rtol=0)
    assert all(forced[1::2] >= forced[0::2] - 1e-5)  # the model's own pick is at least as probable
    screenshot(page, "decoding", f"decoding_{model}")


@pytest.mark.parametrize("model", ["gru_bahdanau", "transformer"])
def test_replacing_a_token_re_decodes_from_it_as_translate_with_a_prefix(lab, page, engines, model):
    engine = engines[model]
    sentence = english("Alpha bravo charlie delta.")
    out = engine.translate([sentence], beam_size=1)[0].hypotheses[0].tokens
    vocab = engine.tgt_vocab
    chosen = vocab.labels(out[:2])
    other = next(t for t in vocab.idx_to_token[4:] if t not in chosen)  # a word the model did not pick
    show(
        page,
        lab,
        "decoding",
        run=model,
        sentence=sentence,
        beam="1",
        step="1",
        row="0",
        replace=other,
        layer="1",
        reference="",
    )
    prefix = " ".join([chosen[0], other])
    expected = engine.translate([sentence], beam_size=1, prefix=[prefix])[0]
    assert page.evaluate("document.querySelector('#panel-decoding p.text').textContent") == expected.text
    tree = page.evaluate(
        "[...document.querySelectorAll('#panel-decoding figure.tree g.node.best')]"
        ".map((g) => [Number(g.dataset.step), Number(g.dataset.score)])"
    )
    best = expected.hypotheses[0]
    assert [step for step, _ in tree] == list(range(len(best.tokens) + 1))
    tokens_on_path = page.evaluate(
        "[...document.querySelectorAll('#panel-decoding figure.tree g.node.best .node-token')]"
        ".map((t) => t.textContent)"
    )
    assert tokens_on_path == ["<bos>", *vocab.labels(best.tokens)]
    path_scores = np.cumsum(score_with(engine, [sentence], [expected.text])[0].token_log_probs)  # with <eos>
    np.testing.assert_allclose([score for _, score in tree[1:]], path_scores[:-1], atol=1e-4)
    assert (
        abs(path_scores[-1] - best.score) < 1e-4
    )  # forced decoding scores the tree's best path as the search

    show(
        page,
        lab,
        "decoding",
        run=model,
        sentence=sentence,
        beam="3",
        step="0",
        row="0",
        replace="",
        layer="1",
    )
    beam = engine.translate([sentence], beam_size=3, nbest=3)[0]
    finished = page.evaluate(
        "[...document.querySelectorAll('#panel-decoding figure.tree .node-score')]"
        ".filter((t) => t.textContent.endsWith('<eos>')).length"
    )
    assert finished == len(beam.hypotheses)  # every finished hypothesis is a marked leaf of the tree
    if model == "transformer":
        screenshot(page, "decoding", "decoding_beam_tree")


@pytest.mark.parametrize("model", ["gru_bahdanau", "transformer"])
def test_a_forced_token_shows_only_the_searchs_live_rows(lab, engines, model):
    engine = engines[model]
    vocab = engine.tgt_vocab
    sentence = english("Alpha bravo charlie delta.")
    first = engine.translate([sentence], beam_size=4)[0].hypotheses[0].tokens[0]
    other = next(t for t in vocab.idx_to_token[4:] if vocab[t] != first)
    request = {"run": model, "sentence": sentence, "beam": 4, "step": 0, "row": 0, "replace": other}
    code, body = call(lab, "/api/decoding", request)
    assert code == 200, body
    # beam search scores every row but the forced one -inf: one row is live after step 0
    assert body["text"]["steps"].endswith(f"1 live hypothesis; kept for the next step: {other}")
    nodes = body["tree"]["nodes"]
    assert [n["prefix"] for n in nodes if n["step"] == 1] == [[vocab[other]]]
    assert all(n["prefix"][0] == vocab[other] for n in nodes if n["step"] >= 1)
    assert "<pad>" not in {n["token"] for n in nodes}
    finished = [f["prefix"] for f in body["tree"]["finished"]]
    tree_prefixes = {tuple(n["prefix"]) for n in nodes}
    for output in finished:  # every finished output grows from nodes the tree shows
        assert all(tuple(output[:k]) in tree_prefixes for k in range(len(output) + 1))
    expected = engine.translate([sentence], beam_size=4, prefix=[other])[0]
    assert body["text"]["translation"] == expected.text
    assert "ranks the finished outputs by their normalised score; the tree shows the sums" in " ".join(
        body["notes"]
    )


def test_a_new_sentence_resets_the_step_and_an_error_clears_the_figures(lab, page):
    sentence = english("Alpha bravo charlie delta.")
    # the last step of the tiny model's greedy search, at most 3: how long its output runs depends on the
    # CPU the model was trained on
    code, first = call(
        lab, "/api/decoding", {"run": "transformer", "sentence": sentence, "beam": 1, "step": 0}
    )
    assert code == 200 and first["steps"] >= 2, first
    step = str(min(3, first["steps"] - 1))
    show(page, lab, "decoding", run="transformer", sentence=sentence, beam="1", step=step, row="0", layer="")
    assert result_count(page, "decoding") > 0
    assert type_into(page, "decoding", "#decoding-sentence", english("Alpha.", "go .")) == "status done"
    assert page.evaluate("document.querySelector('#decoding-step').value") == "0"  # pulled back
    assert type_into(page, "decoding", "#decoding-replace", "zzzz") == "status error"  # not in the vocabulary
    assert result_count(page, "decoding") == 0


def test_concurrent_step_through_requests_equal_the_same_requests_one_at_a_time(lab):
    sentences = ["Alpha bravo charlie delta.", "Echo foxtrot golf.", "Hotel alpha bravo."]
    requests = [
        {"run": run, "sentence": sentence, "beam": beam, "step": step, "layer": 1}
        for run in ("gru_bahdanau", "transformer")
        for sentence in sentences
        for beam, step in ((1, 0), (1, 2), (3, 1), (4, 2), (2, 2))
    ]  # 30 requests
    requests[0]["reference"] = requests[-1]["reference"] = "un deux trois ."
    alone = [call(lab, "/api/decoding", request) for request in requests]
    assert [code for code, _ in alone] == [200] * len(requests), [a.get("error") for _, a in alone]
    with ThreadPoolExecutor(max_workers=6) as clients:  # six clients, five requests each
        together = list(clients.map(lambda request: call(lab, "/api/decoding", request), requests))
    for request, got, expected in zip(requests, together, alone, strict=True):
        assert got == expected, request


def test_your_own_translation_panel(lab, page, engines):
    engine = engines["transformer"]
    sentence = english("Bravo charlie.")
    first, second = english("un deux .", "je suis perdu ."), english("trois quatre .", "j'ai perdu .")
    show(page, lab, "own_translation", run="transformer", sentence=sentence, target=first)
    yours = score_with(engine, [sentence], [first])[0]
    np.testing.assert_allclose(  # one forward pass in another process: float32 rounding apart
        values(page, "own_translation", "yours: log p(token)"), yours.token_log_probs, atol=1e-5, rtol=0
    )
    assert_close(
        values(page, "own_translation", "yours: p(token)"), torch.tensor(yours.token_log_probs).exp()
    )
    own = engine.translate([sentence])[0]
    model = values(page, "own_translation", "the model's: log p(token)")
    assert abs(model.sum() - own.hypotheses[0].score) < 1e-5  # forced decoding gives the search's score
    texts = page.evaluate(
        "[...document.querySelectorAll('#panel-own_translation p.text')].map((p) => p.textContent)"
    )
    assert texts[0].startswith(f"yours: {first} — log p = ") and own.text in texts[1]
    assert type_into(page, "own_translation", "#own-target", second) == "status done"
    other = score_with(engine, [sentence], [second])[0]
    np.testing.assert_allclose(
        values(page, "own_translation", "yours: log p(token)"), other.token_log_probs, atol=1e-5, rtol=0
    )
    screenshot(page, "own_translation")
    assert type_into(page, "own_translation", "#own-target", " ") == "status error"
    assert status(page, "own_translation")[1] == "422"


def test_your_own_translation_says_in_the_learners_language_that_a_long_source_is_cut(lab, engines):
    """What scoring warns in English (a source cut to the model's length) the panel says in zh and vi, with
    the numbers; the learner's target stays as typed."""
    engine = engines["transformer"]
    word = english("Alpha.", "i")
    sentence = " ".join([word] * (300 // (len(word) + 1)))  # as long as the panel takes
    tokens = engine.translate([sentence])[0].source_tokens
    limit, dropped = engine.max_src, len(tokens) + 1 - engine.max_src
    assert dropped > 0
    expected = {
        "zh": f"源句被截断为 {limit} 个词元（含 <eos>，丢掉了 {dropped} 个）",
        "vi": f"Câu nguồn bị cắt còn {limit} token, tính cả <eos> (bỏ đi {dropped} token)",
    }
    target = english("un deux .", "j'ai perdu .")
    for lang, start in expected.items():
        code, body = call(
            lab,
            f"/api/own_translation?lang={lang}",
            {"run": "transformer", "sentence": sentence, "target": target},
        )
        assert code == 200, body
        assert [note for note in body["notes"] if note.startswith(start)], body["notes"]
        assert not [note for note in body["notes"] if "source cut to" in note]
        assert target in body["text"]["yours"]


def test_your_own_translation_refuses_a_runs_length_penalty_in_the_learners_language():
    """A run whose config holds a length penalty scoring refuses (its English error) is refused in zh and vi,
    before any model runs."""
    run = SimpleNamespace(config=SimpleNamespace(decode=SimpleNamespace(length_penalty=12.5)))
    state = {"run": "odd", "sentence": "go .", "target": "va !"}
    expected = {
        "zh": "运行 odd：它的长度惩罚（config.yaml 中的 decode.length_penalty）"
        "必须在 0 和 10 之间，得到的是 12.5",
        "vi": "lượt chạy odd: hình phạt độ dài của nó (decode.length_penalty trong config.yaml) "
        "phải nằm trong khoảng 0 đến 10, nhận được 12,5",
    }
    for lang, message in expected.items():
        with in_language(lang), pytest.raises(LabError) as refused:
            own_translation_panel({"odd": run}, state)
        assert str(refused.value) == message


def tensor_names(page: Browser, panel: str) -> list[str]:
    """The names of the panel's tensors, in page order."""
    return page.evaluate(
        f"[...document.querySelectorAll('#panel-{panel} figure.tensor')].map((f) => f.dataset.name)"
    )


def test_watch_it_learn_scrubs_the_timeline_to_the_final_attention(lab, page, run_dirs):
    path = Path(run_dirs["gru_bahdanau"])
    timeline = read_timeline(path / "timeline.jsonl")
    assert timeline is not None
    last = len(timeline.points) - 1
    show(page, lab, "timeline", run="gru_bahdanau", probe="1", point=str(last))
    assert page.evaluate("document.querySelector('#timeline-point').max") == str(last)
    final = timeline.points[-1]
    # the last point is the trained model's attention for its greedy output (last.pt, the final weights)
    run = open_model(path, "last", "cpu")
    engine = Translator(run.model, run.src_vocab, run.tgt_vocab, run.config, "cpu")
    translation = engine.translate([timeline.probes[1]], beam_size=1)[0]
    expected = engine.attention(translation).maps["cross"]
    shown_last = values(page, "timeline", f"attention at {point_label(final)}")
    np.testing.assert_allclose(shown_last, expected.reshape(-1), atol=0.0005 + 1e-6, rtol=0)
    assert final.outputs[1] == translation.text
    note = page.evaluate("document.querySelector('#panel-timeline p.note').textContent")
    entropy = float(np.mean(attention_entropy(final.maps[1]["cross"])))
    assert note.startswith(f"Mean entropy of the attention rows here: {entropy:.3f} nats")
    assert series(page, "timeline", "this point").tolist() == pytest.approx(
        [final.scores["train_loss"], final.scores["valid_loss"]]
    )
    multiples = [f"small multiple: {point_label(timeline.points[k])}" for k in multiple_indices(last + 1)]
    assert tensor_names(page, "timeline")[1:] == multiples
    screenshot(page, "timeline")
    # scrubbing back to the start shows the untrained model's map
    assert slide(page, "timeline", "#timeline-point", "0") == "status done"
    first = values(page, "timeline", "attention at before training")
    np.testing.assert_allclose(first, timeline.points[0].maps[1]["cross"].reshape(-1), atol=1e-9, rtol=0)
    # play steps through every point to the last, then stops
    page.evaluate("document.querySelector('#timeline-play').click()")
    page.wait_for(
        f"document.querySelector('#timeline-point').value === '{last}' && "
        "document.querySelector('#timeline-play').textContent === 'play' && "
        "document.querySelector('#panel-timeline .status').classList.contains('done')"
    )
    np.testing.assert_allclose(values(page, "timeline", f"attention at {point_label(final)}"), shown_last)


def exercise_values(page: Browser, section: str, name: str) -> np.ndarray:
    """The numbers of tensor `name` in the exercise whose heading starts with `section`."""
    return np.asarray(
        page.evaluate(
            "[...document.querySelectorAll('#panel-exercises .exercise')]"
            f".find((e) => e.querySelector('h3').textContent.startsWith({json.dumps(section)}))"
            f".querySelector('figure.tensor[data-name={json.dumps(name)}]')"
            ".querySelectorAll('td.cell').values().map((c) => Number(c.dataset.value)).toArray()"
        )
    )


def exercise_requests(page: Browser) -> int:
    """How many requests the page has sent to /api/exercises so far."""
    return sum(url.split("?")[0].endswith("/api/exercises") for url in page.requested_urls())


def test_exercises_list_questions_only_and_compute_one_on_request(lab):
    code, listing = call(lab, "/api/exercises", {})
    assert code == 200 and len(listing["exercises"]) == 16
    for exercise in listing["exercises"]:  # nothing of an answer travels before a prediction
        assert set(exercise) == {"name", "section", "question", "choices"}
    code, refused = call(lab, "/api/exercises", {"exercise": "empty_rows"})
    assert code == 422 and "prediction" in refused["error"]  # no experiment without a prediction
    code, body = call(lab, "/api/exercises", {"exercise": "empty_rows", "prediction": "zeros"})
    (answered,) = body["exercises"]
    assert answered["outcome"].startswith("all zeros in attn-mt's") and answered["right"] is True
    assert "the book's (fill -1e6) gives it [0.3333, 0.3333, 0.3333]" in answered["found"]
    assert "not the book's" in answered["reading"]  # says whose behaviour the answer is
    code, body = call(lab, "/api/exercises", {"exercise": "empty_rows", "prediction": "first_key"})
    assert body["exercises"][0]["right"] is False


def test_exercises_are_answered_on_commit_and_kept_across_tabs(lab, page, engines):
    show(page, lab, "exercises")
    before = exercise_requests(page)
    headings = page.evaluate(
        "[...document.querySelectorAll('#panel-exercises .exercise h3')].map((h) => h.textContent)"
    )
    sections = {h.split(":")[0] for h in headings}
    assert {"Masked softmax", "Scoring functions", "Nadaraya–Watson", "Multi-head attention"} <= sections
    assert {"Positional encoding", "Decoding", "Bahdanau attention"} <= sections and len(headings) == 16
    assert page.evaluate("document.querySelectorAll('#panel-exercises div.answer *').length") == 0
    page.click("#panel-exercises .exercise button.commit")  # no prediction: nothing is computed
    assert page.evaluate("document.querySelector('#panel-exercises p.mine').textContent").startswith("choose")
    assert exercise_requests(page) == before
    page.click("#panel-exercises .exercise input.guess[value='zeros']")  # the first exercise, by Enter
    page.press_enter()
    page.wait_for("document.querySelector('#panel-exercises p.mine').textContent.includes('holds')")
    assert exercise_requests(page) == before + 1  # one experiment, computed when committed
    assert page.evaluate("document.querySelector('#panel-exercises p.mine').textContent") == (
        "you predicted: all zeros. The experiment: all zeros in attn-mt's masked_softmax; the same weight "
        "on every key in the book's. Your prediction holds."
    )
    page.evaluate(  # every other exercise: its first offered prediction, committed
        "document.querySelectorAll('#panel-exercises .exercise').forEach((e, k) => { if (k === 0) return;"
        " e.querySelector('input.guess').checked = true; e.querySelector('button.commit').click(); })"
    )
    page.wait_for(
        "[...document.querySelectorAll('#panel-exercises p.mine')]"
        ".every((p) => p.textContent.includes('hold'))"
    )
    assert exercise_requests(page) == before + 16
    verdicts = page.evaluate(
        "[...document.querySelectorAll('#panel-exercises p.mine')].map((p) => p.className)"
    )
    assert set(verdicts) == {"mine right", "mine wrong"}  # the first choice is not always the answer
    page.click("nav a[data-panel='softmax']")
    wait_for_answer(page, "softmax")
    page.click("nav a[data-panel='exercises']")
    wait_for_answer(page, "exercises")
    page.wait_for("document.querySelectorAll('#panel-exercises .exercise').length === 16")
    assert exercise_requests(page) == before + 17  # the list again, and no experiment run again
    assert page.evaluate(  # every prediction and answer still there
        "[...document.querySelectorAll('#panel-exercises .exercise')].every((e) =>"
        " e.querySelector('input.guess:checked') && e.querySelector('p.found'))"
    )
    summed = exercise_values(page, "Scoring functions: When queries", "weights, summed scores").reshape(2, 4)
    np.testing.assert_allclose(summed[0], summed[1], atol=1e-7)  # summing ignores the query
    keys_sum = torch.tensor([1.0, 1.0, 4.0, -0.5])
    assert_close(summed[0], torch.softmax(keys_sum, dim=0))
    M = torch.randn(3, 2, generator=torch.Generator().manual_seed(0)) / 3**0.5
    Q = torch.tensor([[1.0, 0.0, 2.0], [0.0, 1.0, -1.0]])
    Kb = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
    assert_close(
        exercise_values(page, "Scoring functions: Using matrix", "attention weights of qᵀ M k / √k"),
        torch.softmax(Q @ M @ Kb.T / 2**0.5, dim=-1),
    )
    pruned = exercise_values(
        page, "Multi-head attention: Can some heads", "log-probability lost with the head off"
    )
    engine = engines["transformer"]
    sentences = ["i lost .", "go home .", "he is calm ."]
    outputs = [t.text for t in engine.translate(sentences, beam_size=1)]
    full = sum(sum(s.token_log_probs) for s in score_with(engine, sentences, outputs))
    block = engine.model.decoder.blks.block0
    d = engine.model.decoder.num_hiddens // engine.model.num_heads

    def head_one_off(_module, inputs):
        return (torch.cat([inputs[0][..., :d] * 0, inputs[0][..., d:]], dim=-1),)

    hook = block.attention2.W_o.register_forward_pre_hook(head_one_off)
    try:
        silenced = sum(sum(s.token_log_probs) for s in score_with(engine, sentences, outputs))
    finally:
        hook.remove()
    assert len(pruned) == engine.model.num_heads * len(engine.model.decoder.blks)
    assert abs(pruned[0] - (full - silenced)) < 1e-4
    order = exercise_values(page, "Positional encoding: Without", "largest difference between the two orders")
    assert order[1] < 1e-5 < order[0]  # without positions the encoder sees a set: reordered, the same vectors
    norms = exercise_values(
        page, "The Transformer: The Transformer normalises", "largest change in sentence 1"
    )
    assert norms[0] == 0 and norms[1] > 0.1  # LayerNorm keeps sentences apart; BatchNorm mixes them
    scoring = exercise_values(page, "Bahdanau attention: Replace", "attention parameters")
    assert list(scoring) == [2 * 32 * 32 + 32, 0]  # W_q, W_k and w_v at H = 32; dot-product scoring has none
    decoding = exercise_values(page, "Decoding", "log-probability").reshape(-1, 2)
    np.testing.assert_allclose(decoding[:, 0], decoding[:, 1], atol=1e-5)  # greedy and beam 1 agree
    screenshot(page, "exercises")
    page.click("#panel-exercises .exercise a[href^='#softmax']")  # the link opens the panel, set up
    page.wait_for("!document.querySelector('#panel-softmax').hidden")
    wait_for_answer(page, "softmax")
    page.wait_for("document.querySelector('#softmax-valid-lens').value === '[0, 2]'")
    expected = masked_softmax(torch.tensor([[[1.0, 2.0, 3.0]], [[1.0, 2.0, 3.0]]]), torch.tensor([0, 2]))
    page.wait_for("document.querySelectorAll('#panel-softmax figure.tensor td.cell').length === 6 + 2 + 6")
    assert_close(values(page, "softmax", "masked_softmax(X, valid_lens)"), expected)


def test_the_leave_one_out_exercise_agrees_with_the_panel_its_link_opens(lab):
    code, body = call(
        lab,
        "/api/exercises",
        {"exercise": "without_leave_one_out", "prediction": "same"},
    )
    (answered,) = body["exercises"]
    link = answered["link"]
    assert link.startswith("#nadaraya_watson?")
    inputs = dict(part.split("=") for part in link.split("?", 1)[1].split("&"))
    code, panel = call(lab, "/api/nadaraya_watson", inputs)
    learned = float(panel["text"]["learned_w"].split("=")[1])
    exercise_w = answered["tensors"][0]["values"][0]
    assert abs(learned - exercise_w) < 1e-4, (learned, exercise_w)
    assert answered["outcome"].startswith("w grows much larger") and answered["right"] is False


# Issue 71: each sentence a panel states is recomputed here from the computation it describes.


def test_the_cues_sentence_names_the_softmax_the_panel_takes(lab):
    code, body = call(lab, "/api/cues", {"stand_out": 0, "read": 2})
    assert code == 200, body
    stands_out = torch.tensor([0.2, 0.1, 1.0, 0.1, 0.2])  # the desk's keys' first feature
    plain, computed = torch.softmax(stands_out, 0), torch.softmax(4 * stands_out, 0)
    shown_weights = next(t for t in body["tensors"] if t["name"] == "non-volitional weights: no query")
    np.testing.assert_allclose(shown_weights["values"][0], computed.numpy(), atol=1e-6)
    note = body["notes"][0]
    assert "softmax(4 × stands out)" in note and "feature alone" not in note
    assert f"The most weight, {float(computed.max()):.3f}, goes to the red coffee cup." in note
    assert f"{float(computed.max()):.3f}" == "0.880" and f"{float(plain.max()):.3f}" == "0.369"


@pytest.mark.parametrize("model", ["gru_bahdanau", "transformer"])
def test_step_through_states_the_normalised_score_own_translation_gives(lab, engines, model):
    engine = engines[model]
    sentence = english("Alpha bravo charlie delta.")
    alpha = engine.cfg.decode.length_penalty
    code, body = call(lab, "/api/decoding", {"run": model, "sentence": sentence, "beam": 1})
    assert code == 200, body
    greedy = engine.translate([sentence], beam_size=1)[0]
    best = greedy.hypotheses[0]
    n = len(best.tokens) + 1  # the <eos> counts
    normalised = best.score / ((5 + n) / 6) ** alpha
    note = body["notes"][-1]
    assert "ranks no outputs" in note and "ranks them by" not in note
    assert f"{greedy.text!r}: sum {best.score:.4f}, normalised {normalised:.4f} ({n} tokens)" in note
    code, own = call(lab, "/api/own_translation", {"run": model, "sentence": sentence, "target": greedy.text})
    assert own["text"]["yours"].endswith(f"log p = {best.score:.4f}, normalised {normalised:.4f}")
    code, body = call(lab, "/api/decoding", {"run": model, "sentence": sentence, "beam": 3})
    beam = engine.translate([sentence], beam_size=3, nbest=3)[0]
    note = body["notes"][-1]
    assert "ranks the finished outputs by their normalised score" in note
    for output in beam.hypotheses:  # the search's own norm_score, as it ranked them
        words = engine.tgt_vocab.detokenize(output.tokens)
        assert f"{words!r}: sum {output.score:.4f}, normalised {output.norm_score:.4f}" in note


def test_step_through_says_its_counts_and_scores_in_chinese_and_vietnamese(lab, engines):
    """The steps line, a finished output's sum and a row past the live ones in zh and vi: the counts in each
    language's words (no English plural), decimals as the language writes them, the output as the model
    wrote it."""
    engine = engines["transformer"]
    sentence = english("Alpha bravo charlie delta.")
    greedy = engine.translate([sentence], beam_size=1)[0]
    total = f"{greedy.hypotheses[0].score:.4f}"
    expected = {
        "zh": (
            "第 0 步，共",
            "；1 个仍存活的假设；",
            f"：总和 {total}，",
            "row：第 0 步有 1 个仍存活的假设（0 到 0）",
        ),
        "vi": (
            "bước 0 trong",
            "; 1 giả thuyết còn sống; ",
            f": tổng {total.replace('.', ',')}, ",
            "row: bước 0 có 1 giả thuyết còn sống (từ 0 đến 0)",
        ),
    }
    request = {"run": "transformer", "sentence": sentence, "beam": 1}
    for lang, (step, alive, summed, refused) in expected.items():
        code, body = call(lab, f"/api/decoding?lang={lang}", request)
        assert code == 200, body
        assert body["text"]["steps"].startswith(step) and alive in body["text"]["steps"], body["text"]
        assert f"{greedy.text!r}{summed}" in body["notes"][-1], body["notes"]
        code, body = call(lab, f"/api/decoding?lang={lang}", {**request, "row": 1})
        assert code == 422 and body["error"] == refused, body


def largest_weights(seed: int) -> dict[str, list[float]]:
    """The key-size plot's curves worked out here: the mean largest of 8 weights over 64 random queries
    at each d, with and without the 1/sqrt(d) scale (the panel's sweep, from its seed)."""
    generator = torch.Generator().manual_seed(seed)
    curves: dict[str, list[float]] = {"with": [], "without": []}
    for size in (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024):
        q, k = torch.randn(64, 1, size, generator=generator), torch.randn(64, 8, size, generator=generator)
        products = q @ k.transpose(1, 2)  # (64, 1, 8)
        curves["with"].append(float(torch.softmax(products / size**0.5, -1).amax(-1).mean()))
        curves["without"].append(float(torch.softmax(products, -1).amax(-1).mean()))
    return curves


@pytest.mark.parametrize("scaled", ["true", "false"])
def test_the_key_size_sentences_say_which_curve_saturates(lab, scaled):
    code, body = call(lab, "/api/keysize", {"d": 64, "seed": 2, "scaled": scaled})
    assert code == 200, body
    curves = largest_weights(2)
    sizes = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)
    first = next(d for d, w in zip(sizes, curves["without"], strict=True) if w > 0.9)
    note = " ".join(body["notes"])
    assert "the plot shows where it saturates" not in note
    assert max(curves["with"]) < 0.9  # scaled, it never saturates, as the note says
    assert (
        f"with the scale the largest weight stays between {min(curves['with']):.2f} and "
        f"{max(curves['with']):.2f}, never over 0.9"
    ) in note
    assert (
        f"without it the largest weight passes 0.9 from d = {first} on (up to {max(curves['without']):.2f})"
        in note
    )
    code, body = call(lab, "/api/keysize", {"d": 1, "scaled": scaled})
    assert "d = 1 entry drawn" in body["notes"][0]


@pytest.mark.parametrize("fill", ["0", "1e-6"])
def test_a_masked_keys_leak_is_stated_as_the_softmax_computes_it(lab, fill):
    code, body = call(lab, "/api/softmax", {"scores": "[[[1, 2, 3]]]", "valid_lens": "[2]", "fill": fill})
    assert code == 200, body
    per_key = float(torch.softmax(torch.tensor([1.0, 2.0, float(fill)]), 0)[2])  # exp(fill) / the row's sum
    numerator_only = float(torch.exp(torch.tensor(float(fill) - 2.0)))  # exp(fill - max): not a weight
    assert f"{per_key:.3f}" == "0.090" and f"{numerator_only:.3f}" == "0.135"
    note = body["notes"][0]
    assert "- max) of the softmax" not in note
    assert f"valid scores [1, 2] and 1 masked key: each masked key gets {per_key:.3f}." in note


def measured_seeds(key: str) -> dict[str, list[float]]:
    """The measured table's final losses of each choice's two seeds (lab/measured.yaml)."""
    return {label: values[:2] for label, values in measured()["tables"][key]}


def test_learned_or_no_positions_accepts_either_answer_within_seed_noise(lab):
    seeds = measured_seeds("positional_encoding")
    means = {label: sum(v) / 2 for label, v in seeds.items()}
    noise = max(max(v) - min(v) for v in seeds.values())  # how far two seeds of one choice end apart
    lowest = min(means.values())
    within = [label for label, m in means.items() if m - lowest <= noise]
    assert within == ["learned", "none"] and abs(means["learned"] - means["none"]) / lowest < 0.004
    for prediction, right in (("none", True), ("learned", True), ("sinusoidal", False)):
        code, body = call(
            lab, "/api/exercises", {"exercise": "learned_or_no_positions", "prediction": prediction}
        )
        (answered,) = body["exercises"]
        assert answered["right"] is right and answered["accepted"] == within, answered
        assert answered["outcome"] == (
            "learned (a table trained with the model) or none (no positions at all): within seed noise of "
            "each other"
        )
        gap = means["none"] - means["learned"]
        assert f"The two lowest means differ by {gap:.5f}; two seeds of one choice" in answered["found"]
        assert f"ended {noise:.5f} apart, so the gap is within seed noise." in answered["found"]
        spread = next(t for t in answered["tensors"] if t["name"].startswith("final loss: mean and spread"))
        expected = [[means[label], max(v) - min(v)] for label, v in seeds.items()]
        np.testing.assert_allclose(spread["values"], expected, atol=1e-12)
    assert "within seed noise" in answered["reading"] or "counts as a tie" in answered["reading"]


def test_the_books_answer_to_valid_length_0_is_accepted_and_the_difference_explained(lab):
    book = torch.softmax(torch.tensor([1.0, 2.0, 3.0]).masked_fill(torch.ones(3, dtype=torch.bool), -1e6), 0)
    assert torch.allclose(book, torch.full((3,), 1 / 3))  # the book's: the same weight on every key
    code, body = call(lab, "/api/exercises", {"exercise": "empty_rows", "prediction": "uniform"})
    (answered,) = body["exercises"]
    assert answered["right"] is True and answered["accepted"] == ["zeros", "uniform"]
    assert answered["why"].startswith("That is the book's masked_softmax")
    assert f"({float(book[0]):.4f} each)" in answered["why"] and "by design" in answered["why"]
    assert answered["outcome"] == (
        "all zeros in attn-mt's masked_softmax; the same weight on every key in the book's"
    )
    code, body = call(lab, "/api/exercises", {"exercise": "empty_rows", "prediction": "first_key"})
    assert body["exercises"][0]["right"] is False and body["exercises"][0]["why"] == ""


def test_every_panel_over_a_run_names_the_checkpoint_the_lab_opened(lab, page, run_dirs):
    opened = {name: open_model(path, "best", "cpu") for name, path in run_dirs.items()}
    sentence = english("Alpha bravo charlie.")
    asked = {
        "decoding": {"sentence": sentence},
        "own_translation": {"sentence": sentence, "target": english("un deux .")},
        "trained_heads": {"sentence": sentence},
        "timeline": {},
    }
    for name, run in opened.items():
        expected = f"run {name}: {run.checkpoint.name}, step {run.step} (the checkpoint the lab opened)"
        for panel, inputs in asked.items():
            code, body = call(lab, f"/api/{panel}", {"run": name, **inputs})
            assert code == 200 and body["text"]["checkpoint"] == expected, (panel, body)
        timeline = read_timeline(Path(run_dirs[name]) / "timeline.jsonl")
        code, body = call(lab, "/api/timeline", {"run": name})
        note = body["notes"][1]
        assert "the trained model" not in note
        assert f"the weights last.pt holds (step {timeline.points[-1].step})" in note
        assert f"The lab opened {run.checkpoint.name} (step {run.step}), which every other panel runs" in note
    code, body = call(lab, "/api/transformer", {"run": "transformer", "sentence": sentence})
    assert body["text"]["checkpoint"].startswith(f"run transformer: {opened['transformer'].checkpoint.name}")
    for exercise, name in (
        ("pruned_heads", "transformer"),
        ("order_without_positions", "transformer"),
        ("beam_one_is_greedy", "gru_bahdanau"),
    ):
        listed = call(lab, "/api/exercises", {})[1]["exercises"]
        prediction = next(e["choices"][0]["id"] for e in listed if e["name"] == exercise)
        code, body = call(lab, "/api/exercises", {"exercise": exercise, "prediction": prediction})
        run = opened[name]
        ran = f"Ran on run {name}: {run.checkpoint.name}, step {run.step} (the checkpoint the lab opened)."
        assert body["exercises"][0]["found"].endswith(ran), exercise
    show(page, lab, "decoding", run="transformer", sentence=sentence, beam="1", step="0", row="0")
    options = page.evaluate(
        "[...document.querySelectorAll('#decoding-run option')].map((o) => o.textContent)"
    )
    for name, run in opened.items():
        assert f"{name} ({run.config.model.type}, {run.checkpoint.name}, step {run.step})" in options


def test_the_first_nadaraya_watson_request_is_computed_before_the_lab_serves(monkeypatch):
    from attn_mt.lab import kernel_regression, server

    calls: list[str] = []
    monkeypatch.setattr(server, "warm_up", lambda lang="en": calls.append("warm_up"))
    monkeypatch.setattr("uvicorn.Server.run", lambda self, sockets: calls.append("serve"))
    server.run_lab_server({}, "127.0.0.1", 0, [])
    assert calls == ["warm_up", "serve"]
    kernel_regression.pooled.cache_clear()
    kernel_regression.warm_up()
    computed = kernel_regression.pooled.cache_info()
    first = kernel_regression.nadaraya_watson_panel({})  # the first request, with the page's defaults
    assert kernel_regression.pooled.cache_info().hits == computed.hits + 1  # given, not computed again
    assert first is kernel_regression.nadaraya_watson_panel({"w": "1", "epochs": "50", "lr": "0.01"})


def test_play_shows_the_point_the_clock_has_reached_at_the_speed_asked(lab, page, run_dirs):
    timeline = read_timeline(Path(run_dirs["gru_bahdanau"]) / "timeline.jsonl")
    last = len(timeline.points) - 1
    assert last >= 3
    show(page, lab, "timeline", run="gru_bahdanau", probe="0", point="0")
    page.evaluate(
        "(() => { window.labClock = 0; Object.defineProperty(performance, 'now', "
        "{ value: () => window.labClock, configurable: true }); })()"
    )
    try:
        page.evaluate("document.querySelector('#timeline-speed').value = '10'")  # points per second
        before = sum(url.split("?")[0].endswith("/api/timeline") for url in page.requested_urls())
        page.evaluate("document.querySelector('#timeline-play').click()")
        page.evaluate("window.labClock = 250")  # 0.25 s at 10 points a second: point 2 is due
        page.wait_for(
            "document.querySelector('#timeline-point').value === '2' && "
            "document.querySelector('#panel-timeline .status').classList.contains('done')"
        )
        page.evaluate("window.labClock = 1e9")  # far past the end: the last point, then it stops
        page.wait_for(
            f"document.querySelector('#timeline-point').value === '{last}' && "
            "document.querySelector('#timeline-play').textContent === 'play' && "
            "document.querySelector('#panel-timeline .status').classList.contains('done')"
        )
        requests = sum(url.split("?")[0].endswith("/api/timeline") for url in page.requested_urls()) - before
        assert requests == 2  # points 1 and 3 .. last - 1 were due while others showed: skipped
    finally:
        page.evaluate("delete performance.now")
    final = timeline.points[-1]
    assert page.evaluate("document.querySelector('#panel-timeline p.text').textContent").startswith(
        f"point {last} of {last}: {point_label(final)}"
    )


def test_a_commit_that_fails_leaves_the_prediction_open_to_commit_again(lab, page):
    page.open(f"http://{lab}/#exercises")  # a fresh page: no exercise answered yet
    wait_for_answer(page, "exercises")
    page.wait_for("document.querySelectorAll('#panel-exercises .exercise').length === 16")
    first = '#panel-exercises .exercise[data-name="empty_rows"]'
    page.click(f"{first} input.guess[value='zeros']")
    failures = {
        "HTTP 500": 'Promise.resolve(new Response(\'{"error": "the lab could not compute this"}\', '
        "{ status: 500, headers: { 'Content-Type': 'application/json' } }))",
        "the lab did not answer": "Promise.reject(new TypeError('Failed to fetch'))",
    }
    for said, failure in failures.items():
        page.evaluate(  # the next commit's request fails once
            "(() => { const real = window.fetch; window.fetch = (url, options) => { window.fetch = real; "
            f"return url.startsWith('/api/exercises?') ? {failure} : real(url, options); }}; }})()"
        )
        page.click(f"{first} button.commit")
        page.wait_for(f"document.querySelector('{first} p.mine').textContent.includes('commit again')")
        assert said in page.evaluate(f"document.querySelector('{first} p.mine').textContent")
        disabled = page.evaluate(
            f"[...document.querySelectorAll('{first} input, {first} button')].map((e) => e.disabled)"
        )
        assert disabled and not any(disabled)  # the choices and the button work again, no reload
    page.click(f"{first} button.commit")
    page.wait_for(f"document.querySelector('{first} p.mine').textContent.includes('holds')")
    assert page.evaluate(f"document.querySelector('{first} button.commit').disabled")


def test_the_live_estimate_waits_for_a_measured_pace(monkeypatch):
    from attn_mt.lab import live as live_module

    assert live_module.seconds_left((10.0, 1), 10.0, 1, 250) is None  # one epoch seen: no pace yet
    # 2 s for 20 epochs since the first was seen: 0.1 s an epoch, 229 epochs to go; the start-up that
    # came before the first epoch (Python, torch, the corpus) counts in no estimate
    assert live_module.seconds_left((10.0, 1), 12.0, 21, 250) == pytest.approx(22.9)
    words = live_module.describe(
        {"state": "running", "name": "live", "epochs_done": 1, "epochs": 250, "elapsed_s": 6.0}
    )
    assert words["live"].endswith("time left: measuring the pace")


def test_the_live_panel_says_what_only_a_training_shows_in_chinese_and_vietnamese(tmp_path, monkeypatch):
    """Running, failed and killed trainings and the refusals, which the browser test cannot show without
    training: the lab's sentences translated, the trainer's own log line as it wrote it."""
    from attn_mt.lab import live as live_module

    running = {"state": "running", "name": "live", "epochs_done": 3, "epochs": 250, "elapsed_s": 6.0}
    failed = {**running, "state": "failed", "reason": "corpus file not found: x.zip"}
    trainer = LiveTrainer({}, {"runs": []}, tmp_path)
    said = {
        "zh": (
            "live：训练中，迭代周期 3/250，用时 6 秒，大约还剩 1234 秒",
            "live：训练中，迭代周期 3/250，用时 6 秒，剩余时间：正在测算速度",
            "live：失败，迭代周期 3/250，用时 6 秒：corpus file not found: x.zip",
            "训练进程被 SIGKILL 终止",
            "没有正在进行的训练",
            "live-gru_bahdanau-seed0 仍在训练：请先停止它（一次只能训练一个）",
        ),
        "vi": (
            "live: đang huấn luyện, epoch 3/250, 6 giây, còn khoảng 1234 giây",
            "live: đang huấn luyện, epoch 3/250, 6 giây, thời gian còn lại: đang đo tốc độ",
            "live: thất bại, epoch 3/250, 6 giây: corpus file not found: x.zip",
            "tiến trình huấn luyện bị buộc dừng bởi SIGKILL",
            "không có lượt huấn luyện nào đang chạy",
            "live-gru_bahdanau-seed0 vẫn đang huấn luyện: hãy dừng nó trước "
            "(mỗi lần chỉ huấn luyện một lượt chạy)",
        ),
    }
    for lang, (left, pace, why, killed, idle, busy) in said.items():
        with in_language(lang):
            assert live_module.describe({**running, "left_s": 1234.4})["live"] == left
            assert live_module.describe(running)["live"] == pace
            assert live_module.describe(failed)["live"] == why
            assert live_module.failure_reason(tmp_path / "no.log", -9) == killed
            with pytest.raises(LabError) as stopped:
                live_panel(trainer, {"action": "stop"})
            assert str(stopped.value) == idle
            monkeypatch.setattr(trainer, "running", lambda: True)
            monkeypatch.setattr(trainer, "current", SimpleNamespace(name="live-gru_bahdanau-seed0"))
            with pytest.raises(LabError) as refused:
                trainer.start("transformer", 0, 1)
            assert str(refused.value) == busy
            monkeypatch.undo()
    with in_language("vi"):
        assert live_panel(trainer, {})["text"]["live"] == "chưa bắt đầu huấn luyện"


def test_watch_it_learn_says_its_point_in_the_language_asked(lab, run_dirs):
    timeline = read_timeline(Path(run_dirs["gru_bahdanau"]) / "timeline.jsonl")
    assert timeline is not None
    last = len(timeline.points) - 1
    final = timeline.points[-1]
    for lang, start, seconds in (
        ("zh", "记录点 {last}/{last}：{label}，已训练 {seconds} 秒；", f"{final.elapsed_s:.1f}"),
        (
            "vi",
            "điểm {last}/{last}: {label}, đã huấn luyện {seconds} giây; ",
            f"{final.elapsed_s:.1f}".replace(".", ","),
        ),
    ):
        code, body = call(lab, f"/api/timeline?lang={lang}", {"run": "gru_bahdanau", "point": last})
        assert code == 200, body
        with in_language(lang):
            label = point_label(final)
            names = [
                gettext("attention at {point}").format(point=label),
                gettext("loss at the recorded points"),
            ]
        assert body["text"]["where"].startswith(start.format(last=last, label=label, seconds=seconds))
        assert [body["tensors"][0]["name"], body["plots"][0]["title"]] == names
        # its labels are the output and source tokens, kept as the model reads them
        assert body["tensors"][0]["tokens"] is True


def test_long_vectors_wrap_on_the_page_and_singleton_axes_name_no_slice(lab, page):
    show(page, lab, "nadaraya_watson", seed="0", w="1", epochs="5", lr="0.01", point="10")
    name = "leave_one_out(x_train)[i]: the keys training point i sees"
    fits = page.evaluate(
        "(() => { const f = [...document.querySelectorAll('#panel-nadaraya_watson figure.tensor')]"
        f".find((f) => f.dataset.name === {json.dumps(name)}); const r = f.getBoundingClientRect();"
        " return [f.scrollWidth <= f.clientWidth, r.right <= document.documentElement.clientWidth,"
        " f.querySelectorAll('tr').length,"
        " [...f.querySelectorAll('td.cell')].map((c) => Number(c.dataset.index))]; })()"
    )
    assert fits[:3] == [True, True, 4]  # 49 keys in rows of 16: on the page, no scrolling
    assert fits[3] == list(range(49))
    data = make_data(torch.Generator().manual_seed(0))
    assert_close(values(page, "nadaraya_watson", name), leave_one_out(data.x_train)[10])
    show(page, lab, "scoring")
    labels = page.evaluate(
        "[...document.querySelectorAll('#panel-scoring figure.tensor')]"
        ".find((f) => f.dataset.name === 'W_k k, unsqueezed')"
        ".querySelectorAll('.slice-label').values().map((l) => l.textContent).toArray()"
    )
    assert labels == ["B=0"]  # not "B=0, 1=0": the unsqueezed axis has one place only


def test_the_head_lines_are_readable_and_each_head_can_be_hidden(lab, page):
    show(page, lab, "trained_heads", run="transformer", map="cross", sentence=english("Alpha bravo charlie."))
    sizes = page.evaluate(
        "(() => { const svg = document.querySelector('#panel-trained_heads svg.token-lines');"
        " const label = svg.querySelector('.token-label');"
        " return [svg.getBoundingClientRect().width, getComputedStyle(label).fontSize,"
        " svg.querySelector('line.token-line').getAttribute('stroke-width')]; })()"
    )
    assert sizes == [620, "14px", "3"]
    hidden = "#panel-trained_heads input.head-shown[data-head='0']"
    page.click(hidden)
    shown_heads = page.evaluate(
        "[...document.querySelectorAll('#panel-trained_heads line.token-line')]"
        ".filter((l) => getComputedStyle(l).display !== 'none').map((l) => l.dataset.head)"
    )
    assert shown_heads and "0" not in shown_heads


# The panels whose every text is translated, server's sentences included (docs/lab.md names the others).
TRANSLATED_PANELS = (
    "cues",
    "nadaraya_watson",
    "softmax",
    "scoring",
    "keysize",
    "positions",
    "self_attention",
    "heads",
    "complexity",
    "transformer",
    "trained_heads",
    "decoding",
    "own_translation",
    "exercises",
    "timeline",
    "live",
)
# Text nodes that hold an English sentence (one of its small words, which neither Chinese nor Vietnamese
# uses), outside code, identifiers, numbers, tokens and model outputs.
UNTRANSLATED = """(() => {
  const small = "the|of|and|is|are|with|for|from|its|this|that|each|every|when|your|not|by|which";
  const english = new RegExp(`(^|[^\\\\w'])(${small})(?![\\\\w'])`, "i");
  const skipped = "code, .code, td.cell, .token-label, select.runs, textarea, script, style, #language";
  const open = [...document.querySelectorAll("section.panel")].find((s) => !s.hidden);
  const found = [];
  for (const root of [document.querySelector("header h1"), document.querySelector("nav"), open]) {
    const walker = document.createTreeWalker(root, NodeFilter.SHOW_TEXT);
    while (walker.nextNode()) {
      const node = walker.currentNode;
      const shown = !node.parentElement.closest(skipped);
      if (shown && english.test(node.textContent)) found.push(node.textContent.trim());
    }
  }
  return found;
})()"""


EMPTY_ROWS = '#panel-exercises .exercise[data-name="empty_rows"]'


def test_the_lab_switches_to_chinese_and_vietnamese_and_translates_every_panel(lab, page):
    """The visible switch retranslates the page and the open panel; each translated panel, opened in zh and
    vi, holds no English sentence; the exercises still hide their answers (switching reveals none that
    a commit, here or in another test, had not) and keep the committed ones, then shown in the new
    language; the choice is remembered."""
    answers = "document.querySelectorAll('#panel-exercises .answer:not(:empty)').length"
    drawn = (
        "[...document.querySelectorAll('#panel-exercises .answer:not(:empty)')]"
        ".every((a) => a.querySelector('p.found'))"
    )
    committed = (
        "[...document.querySelectorAll('#panel-exercises input.guess:checked:disabled')].map((r) => r.value)"
    )
    show(page, lab, "exercises")
    if not page.evaluate(f"document.querySelector('{EMPTY_ROWS} p.found')"):
        page.click(f"{EMPTY_ROWS} input.guess[value='zeros']")
        page.click(f"{EMPTY_ROWS} button.commit")
        page.wait_for(f"document.querySelector('{EMPTY_ROWS} p.mine').textContent.includes('holds')")
    answered, kept = page.evaluate(answers), page.evaluate(committed)
    try:
        for lang, heading in (("zh", "掩蔽softmax"), ("vi", "Softmax có mặt nạ")):
            show(page, lab, "softmax")
            page.evaluate(
                "(() => { const s = document.getElementById('language'); "
                f"s.value = {json.dumps(lang)}; s.dispatchEvent(new Event('change')); }})()"
            )
            page.wait_for(f"document.documentElement.lang.startsWith({json.dumps(lang)})")
            assert page.evaluate("localStorage.getItem('attn-mt-lang')") == lang
            assert page.evaluate("document.querySelector('#panel-softmax h2').textContent") == heading
            for panel in TRANSLATED_PANELS:
                show(page, lab, panel)
                assert page.evaluate(UNTRANSLATED) == [], (lang, panel)
                if panel == "cues":
                    screenshot(page, panel, f"{panel}_{lang}")
            show(page, lab, "exercises")
            assert page.evaluate(answers) == answered
            page.wait_for(drawn)  # each committed answer asked for again, in this language
            assert page.evaluate(answers) == answered and page.evaluate(committed) == kept
            assert page.evaluate(UNTRANSLATED) == [], (lang, "exercises answered")
            verdict = page.evaluate(f"document.querySelector('{EMPTY_ROWS} p.mine').textContent")
            assert {"zh": "。实验结果：", "vi": ". Thí nghiệm: "}[lang] in verdict, verdict
            commit = page.evaluate("document.querySelector('#panel-exercises button.commit').textContent")
            assert (
                commit
                == {"zh": "提交我的预测并运行实验", "vi": "xác nhận dự đoán của tôi và chạy thí nghiệm"}[lang]
            )
    finally:
        page.evaluate("attnMtI18n.choose('en')")
        page.wait_for("document.documentElement.lang === 'en'")


def test_lab_lang_sets_the_language_a_request_naming_none_gets(tmp_path):
    """`attn-mt lab --lang zh`: the catalogue and the panels answer in Chinese until a request asks for
    another language (?lang=), whatever the browser's Accept-Language."""
    with command_server("lab", "--lang", "zh") as address:
        code, catalogue = call(address, "/i18n/catalogue.json", headers={"Accept-Language": "en-US,en"})
        assert code == 200 and catalogue["lang"] == "zh"
        code, body = call(
            address, "/api/cues", {"stand_out": 0, "read": 2}, headers={"Accept-Language": "en"}
        )
        assert code == 200 and body["text"]["picked"] == "没有查询：红色咖啡杯；你的查询：论文"
        code, body = call(address, "/api/cues?lang=vi", {"read": 9})
        assert code == 422 and body["error"] == "read: phải nằm trong khoảng -3.0 đến 3.0, nhận được 9.0"
        _, english = call(address, "/api/nadaraya_watson?lang=en", {})
        _, chinese = call(address, "/api/nadaraya_watson", {})
        assert english["tensors"][0]["values"] == chinese["tensors"][0]["values"]
        assert chinese["notes"][0].startswith("相对无噪声曲线的测试均方误差")


def test_plurals_and_the_favicon(lab):
    code, body = call(lab, "/api/complexity", {"n": 4, "d": 4, "k": 3})
    note = body["notes"][2]
    assert "reaches 1 position further" in note and "so 3 stacked layers" in note
    code, body = call(lab, "/api/complexity", {"n": 2, "d": 4, "k": 3})
    assert "so 1 stacked layer (" in body["notes"][2] and "1 step (O(n))" in body["notes"][2]
    status_code, _, content = fetch(lab, "/favicon.ico")
    assert status_code == 204 and content == b""


BAD_INPUTS = {
    "live-no-such-action": ("live", {"action": "fly"}, "action: expected one of status, start, stop"),
    "live-stop-when-idle": ("live", {"action": "stop"}, "no training is running"),
    "live-unknown-model": (
        "live",
        {"action": "start", "model": "lstm"},
        "model: expected one of gru_bahdanau",
    ),
    "text-for-numbers": ("softmax", {"scores": '[[[1, "a"]]]'}, "expected a number"),
    "not-json": ("softmax", {"scores": "[[[1, 2]"}, "not a list of numbers"),
    "ragged": ("softmax", {"scores": "[[[1, 2], [3]]]"}, "same length"),
    "wrong-rank": ("softmax", {"scores": "[1, 2]"}, "3-D"),
    "valid-lens-shape": ("softmax", {"valid_lens": "[1, 2, 3]"}, "expected shape (2,)"),
    "valid-lens-past-keys": ("softmax", {"valid_lens": "[2, 5]"}, "past the number of keys"),
    "valid-lens-fraction": ("softmax", {"valid_lens": "[1.5, 2]"}, "whole numbers"),
    "huge-tensor": ("softmax", {"scores": json.dumps([[[0.0] * 100] * 50])}, "limit of"),
    "huge-tensor-as-lists": ("softmax", {"scores": [[[0.5] * 100] * 50]}, "limit of"),
    "scoring-mismatched-keys": ("scoring", {"values": "[[[1, 0]]]"}, "must share"),
    "scoring-hidden-size": ("scoring", {"num_hiddens": "1000"}, "between 1 and 64"),
    "key-size-as-text": ("keysize", {"d": "large"}, "whole number"),
    "key-size-too-large": ("keysize", {"d": 5000}, "between 1 and 1024"),
    "odd-encoding-size": ("positions", {"num_hiddens": 15}, "must be even"),
    "position-past-steps": ("positions", {"num_steps": 10, "position": 10}, "between 0 and 9"),
    "table-too-large": ("positions", {"num_steps": 512, "num_hiddens": 64}, "limit of"),
    "heads-not-dividing": ("heads", {"num_hiddens": 10, "num_heads": 4}, "not divisible"),
    "complexity-even-kernel": ("complexity", {"k": 4}, "must be odd"),
    "complexity-too-many-tokens": ("complexity", {"n": 500}, "between 2 and 128"),
    "complexity-too-large": ("complexity", {"n": 128, "d": 256}, "limit of"),
    "softmax-unknown-fill": ("softmax", {"fill": "-1e9"}, "expected one of"),
    "trained-heads-unknown-run": ("trained_heads", {"run": "mine", "sentence": "alpha ."}, "expected one of"),
    "trained-heads-gru-self-attention": (
        "trained_heads",
        {"run": "gru_bahdanau", "map": "encoder_self", "sentence": "alpha ."},
        "one attention is cross",
    ),
    "trained-heads-no-sentence": ("trained_heads", {"sentence": "  "}, "type an English sentence"),
    "transformer-unknown-run": (
        "transformer",
        {"run": "gru_bahdanau", "sentence": "alpha ."},
        "expected one of",
    ),
    "transformer-no-sentence": ("transformer", {"sentence": " "}, "type an English sentence"),
    "transformer-long-target": ("transformer", {"sentence": "alpha .", "target": "a " * 200}, "at most 300"),
    "nw-too-many-epochs": ("nadaraya_watson", {"epochs": 10_000}, "between 1 and 200"),
    "nw-w-zero": ("nadaraya_watson", {"w": 0}, "between 0.05 and 20"),
    "decoding-step-past-the-end": ("decoding", {"sentence": "alpha .", "step": 500}, "the search took"),
    "decoding-unknown-run": ("decoding", {"run": "mine", "sentence": "alpha ."}, "expected one of"),
    "decoding-beam-too-large": ("decoding", {"sentence": "alpha .", "beam": 9}, "between 1 and 8"),
    "decoding-no-sentence": ("decoding", {"sentence": ""}, "type an English sentence"),
    "decoding-replace-unknown": ("decoding", {"sentence": "alpha .", "replace": "zzzz"}, "not in the run's"),
    "decoding-replace-eos": ("decoding", {"sentence": "alpha .", "replace": "<eos>"}, "cannot be forced"),
    "own-translation-blank": ("own_translation", {"sentence": "alpha .", "target": ""}, "type an English"),
    "own-translation-too-long": (
        "own_translation",
        {"sentence": "alpha .", "target": "a" * 301},
        "at most 300",
    ),
    "nested-too-deep-text": ("softmax", {"scores": "[" * 5000 + "]" * 5000}, "nested too deep"),
    "nested-too-deep-lists": ("scoring", {"queries": [[[[[1.0]]]]]}, "nested more than 4 deep"),
    "huge-value": ("softmax", {"scores": "[[[1e30]]]"}, "limit of"),
    "long-integer-in-text": ("softmax", {"scores": f"[[[{'9' * 400}]]]"}, "expected a number"),
    "long-integer-in-lists": ("softmax", {"scores": [[[10**400]]]}, "expected a number"),
    "long-integer-as-text": ("keysize", {"d": "9" * 5000}, "expected a whole number"),
}


@pytest.mark.parametrize("case", BAD_INPUTS)
def test_bad_inputs_get_a_message_and_422(lab, case):
    panel, inputs, message = BAD_INPUTS[case]
    code, body = call(lab, f"/api/{panel}", inputs)
    assert code == 422 and message in body["error"], body
    assert set(body) == {"error", "problems"}


def test_integers_of_any_length_are_refused_as_bad_inputs(lab):
    digits = "9" * 5000  # past Python's 4,300-digit limit on reading an int
    for panel, raw in (
        ("nadaraya_watson", f'{{"seed": {digits}}}'),
        ("softmax", f'{{"scores": [[[-{digits}, 1]]]}}'),
        ("positions", f'{{"num_steps": 4, "position": 1, "shift": {digits}}}'),
    ):
        code, body = call(lab, f"/api/{panel}", raw=raw.encode())
        assert code == 422 and "expected a" in body["error"], (panel, body)


def grid(*shape: int, value: float = 0.5) -> list:
    """Nested lists of `shape` filled with `value`."""
    return [grid(*shape[1:], value=value) for _ in range(shape[0])] if shape else value


WORDS = "Alpha bravo charlie delta echo foxtrot golf hotel. "
LONGEST = (WORDS * 10)[:300]
# The largest inputs each panel takes (every tensor at the 4,096-number limit, every slider at its end),
# and some just past them: each is answered 200 or 422.
LARGEST: list[tuple[str, dict, int]] = [
    ("softmax", {"scores": grid(1, 1, MAX_ELEMENTS), "valid_lens": [[MAX_ELEMENTS]]}, 200),
    ("softmax", {"scores": grid(64, 64, 1), "valid_lens": grid(64, 64, value=1)}, 200),
    ("scoring", {"queries": grid(1, 64, 64), "keys": grid(1, 64, 64), "values": grid(1, 64, 64)}, 200),
    (
        "scoring",
        {"queries": grid(64, 1, 64), "keys": grid(64, 1, 64), "values": grid(64, 1, 64), "num_hiddens": 64},
        200,
    ),
    ("scoring", {"queries": grid(1, 1, 4096), "keys": grid(1, 1, 4096), "values": grid(1, 1, 4096)}, 200),
    ("scoring", {"queries": grid(1, 128, 1), "keys": grid(1, 128, 1), "values": grid(1, 128, 1)}, 422),
    ("scoring", {"queries": grid(1, 1024, 1), "keys": grid(1, 1024, 1), "values": grid(1, 1024, 1)}, 422),
    ("scoring", {"queries": grid(1, 4096, 1), "keys": grid(1, 1, 1), "values": grid(1, 1, 4096)}, 422),
    ("scoring", {"queries": grid(64, 64, 1), "keys": grid(64, 1, 64), "values": grid(64, 1, 64)}, 422),
    ("keysize", {"d": 1024, "scaled": "false"}, 200),
    ("positions", {"num_steps": 64, "num_hiddens": 64, "shift": 512, "position": 63, "dimension": 63}, 200),
    ("positions", {"num_steps": 512, "num_hiddens": 8, "shift": 512, "position": 511}, 200),
    ("heads", {"batch": 8, "steps": 32, "num_hiddens": 16, "num_heads": 16}, 422),  # weights 8·16·32·32
    ("heads", {"batch": 4, "steps": 8, "num_hiddens": 32, "num_heads": 8, "off": "1 2 3 4 5 6 7"}, 200),
    ("heads", {"batch": 1, "steps": 16, "num_hiddens": 256, "num_heads": 16}, 200),
    ("heads", {"batch": 8, "steps": 32, "num_hiddens": 256, "num_heads": 16}, 422),
    *[
        ("trained_heads", {"sentence": LONGEST, "map": m}, 200)
        for m in ("cross", "encoder_self", "decoder_self")
    ],
    ("trained_heads", {"sentence": " ".join(["alpha"] * 150), "map": "decoder_self"}, 422),
    ("nadaraya_watson", {"epochs": 200, "width": 20, "lr": 5, "point": 49}, 200),
    *[
        ("decoding", {"run": run, "sentence": LONGEST, "beam": 6, "step": 1, "reference": LONGEST}, 200)
        for run in ("gru_bahdanau", "transformer")
    ],
    *[
        ("own_translation", {"run": run, "sentence": LONGEST, "target": LONGEST}, 200)
        for run in ("gru_bahdanau", "transformer")
    ],
    ("exercises", {}, 200),
    ("cues", {"stand_out": 3, "read": -3}, 200),
    ("self_attention", {"sentence": "a " * 16, "reordered": "a " * 16, "d": 64, "positions": "true"}, 200),
    ("self_attention", {"sentence": "a " * 17, "reordered": "a " * 17}, 422),
    *[("timeline", {"run": run, "probe": 3, "point": 10**9}, 200) for run in ("gru_bahdanau", "transformer")],
    ("timeline", {"probe": 4}, 422),
]
MAX_ANSWER_BYTES = 2_000_000  # docs/lab.md


def test_every_panel_at_its_largest_inputs_answers_200_or_422_within_a_bounded_size(lab):
    for panel, inputs, expected in LARGEST:
        data = json.dumps(inputs).encode("utf-8")
        assert len(data) <= MAX_BODY_BYTES, panel
        request = urllib.request.Request(
            f"http://{lab}/api/{panel}", data=data, headers={"Content-Type": "application/json"}
        )
        try:
            with urllib.request.urlopen(request, timeout=120) as response:
                status, answer = response.status, response.read()
        except urllib.error.HTTPError as error:
            with error:
                status, answer = error.code, error.read()
        assert status == expected, (panel, answer[:300])
        assert len(answer) <= MAX_ANSWER_BYTES, (panel, len(answer))


def test_http_errors_of_the_lab(lab):
    assert call(lab, "/api/softmax", raw=b'{"scores": ')[0] == 400
    assert call(lab, "/api/softmax", raw=b"[" * 100_000)[0] == 400
    assert call(lab, "/api/softmax", [1, 2])[0] == 422
    assert call(lab, "/api/nothing", {})[0] == 404
    code, body = call(lab, "/api/softmax", raw=b" " * (MAX_BODY_BYTES + 1))
    assert code == 413 and str(MAX_BODY_BYTES) in body["error"]
    assert MAX_ELEMENTS * 8 < MAX_BODY_BYTES  # a tensor at the limit fits in a body
    status, kind, text = fetch(lab, "/source/attn_mt/models/attention.py")
    assert status == 200 and kind.startswith("text/html") and b'id="L1"' in text
    for outside in (
        "/source/../pyproject.toml",
        "/source/attn_mt/../pyproject.toml",
        "/source/tests/support/helpers.py",
    ):
        assert fetch(lab, outside)[0] == 404, outside
    page = fetch(lab, "/")[2].decode("utf-8")
    assert "://" not in page.replace('"http://www.w3.org', "")  # nothing from another host


def test_no_other_web_page_can_drive_the_lab(lab):
    """A page elsewhere can post text/plain or a form without the browser asking first; the lab refuses
    them, answers no CORS preflight, and refuses a Host header not its own (DNS rebinding)."""
    inputs = json.dumps({"d": 1024}).encode()
    for kind in ("text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x", None):
        code, body = call(lab, "/api/keysize", raw=inputs, content_type=kind)
        assert code == 415 and "application/json" in body["error"], (kind, body)
    port = lab.rsplit(":", 1)[1]
    for host in (f"rebound.example:{port}", "rebound.example", f"127.0.0.1:{int(port) + 1}", "127.0.0.1:x"):
        code, body = call(lab, "/api/keysize", {"d": 4}, headers={"Host": host})
        assert code == 400 and "does not name this server" in body["error"], (host, body)
        assert call(lab, "/api/panels", headers={"Host": host})[0] == 400
    for host in (f"localhost:{port}", f"127.0.0.1:{port}", f"[::1]:{port}", f"LOCALHOST:{port}"):
        assert call(lab, "/api/keysize", {"d": 4}, headers={"Host": host})[0] == 200, host
    preflight = urllib.request.Request(
        f"http://{lab}/api/keysize",
        method="OPTIONS",
        headers={"Origin": "https://elsewhere.example", "Access-Control-Request-Method": "POST"},
    )
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(preflight, timeout=60)
    assert refused.value.code == 403 and "Access-Control-Allow-Origin" not in refused.value.headers


def test_lab_command_refuses_bad_runs_and_options(run_cli, tmp_path):
    missing = run_cli("lab", str(tmp_path / "no-such-run"), "--port", "0")
    assert missing.returncode == 2 and "no-such-run" in missing.stderr and "Traceback" not in missing.stderr
    port = run_cli("lab", "--port", "70000")
    assert port.returncode == 2 and "--port must be between 0 and 65535" in port.stderr


DEFAULT_INPUTS = {
    "trained_heads": {"sentence": "alpha bravo ."},
    "transformer": {"sentence": "alpha bravo ."},
    "decoding": {"sentence": "alpha bravo ."},
    "own_translation": {"sentence": "alpha bravo .", "target": "un deux ."},
    "exercises": {"exercise": "empty_rows", "prediction": "zeros"},
}


def test_every_panel_links_the_lines_of_attn_mt_code_it_ran(lab):
    code, listing = call(lab, "/api/panels")
    assert code == 200 and {r["name"] for r in listing["runs"]} == {"gru_bahdanau", "transformer"}
    for panel in listing["panels"]:
        code, answer = call(lab, f"/api/{panel}", DEFAULT_INPUTS.get(panel, {}))
        assert code == 200, (panel, answer)
        lines = answer["code"] + [line for e in answer.get("exercises", []) for line in e["code"]]
        assert lines, panel
        for line in lines:
            status, _, page = fetch(lab, line["url"].split("#")[0])
            assert status == 200 and line["url"] == f"/source/{line['file']}#L{line['line']}", line
            assert f'id="L{line["line"]}"'.encode() in page, line
            source = (ROOT / line["file"]).read_text(encoding="utf-8").splitlines()[: line["line"]]
            name = line["label"].split(" ")[0].split(".")[-1]  # the function or class, at or above the line
            assert source[-1].strip() and any(name in text for text in source[-60:]), line


@pytest.mark.parametrize("model", ["gru_bahdanau", "transformer"])
def test_the_best_beams_path_has_the_dumps_weights_at_every_step(engines, model):
    engine = engines[model]
    sentence = "Echo foxtrot golf hotel."
    translation = engine.translate([sentence], beam_size=3)[0]
    best = translation.hypotheses[0]
    dump = engine.attention(translation).maps["cross"]  # (T, S) or (L, h, T, S)
    every_beam = DecodeSettings.resolve(engine.cfg.decode, beam_size=3, nbest=3)
    recorder, hypotheses, _ = run_search(engine, sentence, every_beam, layer=1)
    assert hypotheses[0].tokens == best.tokens and abs(hypotheses[0].score - best.score) < 1e-6
    for t in range(len(best.tokens) + 1):
        step = recorder.steps[t]
        row = step.prefixes.index(best.tokens[:t])  # the row holding the best output's first t tokens
        weights = step.weights[row] if model == "gru_bahdanau" else step.weights[row, 1]
        expected = dump[t] if model == "gru_bahdanau" else dump[1, :, t]
        valid = expected.shape[-1]  # book mode pads the source; the dump keeps its valid positions
        np.testing.assert_allclose(weights[..., :valid].numpy(), expected, atol=TOLERANCE, rtol=0)
        assert not weights[..., valid:].any()
    final = recorder.steps[len(best.tokens)]
    row = final.prefixes.index(best.tokens)
    eos = float(final.log_probs[row, engine.tgt_vocab.eos_id])
    assert abs(final.scores[row] + eos - best.score) < 1e-5  # the recorded path adds up to the search's score


def live(lab: str, **inputs: str) -> dict:
    """The live panel's answer to `inputs` (200 expected)."""
    code, answer = call(lab, "/api/live", inputs)
    assert code == 200, answer
    return answer


def test_live_training_runs_one_at_a_time_is_followed_opens_and_stops(lab):
    """Last in the module: the run it trains joins the lab's runs."""
    started = live(lab, action="start", model="gru_bahdanau", seed="3", epochs="2")
    assert started["state"] == "running" and started["name"] == "live-gru_bahdanau-seed3"
    code, refused = call(lab, "/api/live", {"action": "start", "model": "transformer"})
    assert code == 422 and refused["error"] == (
        "live-gru_bahdanau-seed3 is still training: stop it first (one training at a time)"
    )
    deadline = time.monotonic() + 240
    while (status := live(lab))["state"] == "running":
        assert time.monotonic() < deadline, status
        time.sleep(0.5)
    assert status["state"] == "finished" and status["epochs_done"] == 2, status
    assert status["opened"] == "live-gru_bahdanau-seed3"
    timeline = read_timeline(Path(status["run_dir"]) / "timeline.jsonl")
    assert timeline is not None and len(timeline.points) == 3
    assert status["text"]["translation"] == f"{timeline.probes[0]} → {timeline.points[-1].outputs[0]}"
    listing = call(lab, "/api/panels")[1]
    assert {
        "name": "live-gru_bahdanau-seed3",
        "model": "gru_bahdanau",
        "checkpoint": "last.pt",
        "step": 20,
    } in (listing["runs"])
    code, played = call(lab, "/api/timeline", {"run": "live-gru_bahdanau-seed3"})
    assert code == 200 and played["points"] == 3
    assert call(lab, "/api/decoding", {"run": "live-gru_bahdanau-seed3", "sentence": "i lost ."})[0] == 200
    # a long run is stopped: the trainer saves and exits, and the run opens too
    live(lab, action="start", model="transformer", seed="0", epochs="1000")
    deadline = time.monotonic() + 240
    while (status := live(lab))["epochs_done"] < 1:
        assert time.monotonic() < deadline and status["state"] == "running", status
        time.sleep(0.5)
    # the first epoch seen carries the start-up: no estimate until the pace is measured past it
    assert "left_s" not in status and status["text"]["live"].endswith("time left: measuring the pace")
    first = status["epochs_done"]
    while "left_s" not in (status := live(lab)):
        assert time.monotonic() < deadline and status["state"] == "running", status
        time.sleep(0.5)
    assert status["epochs_done"] > first and "s left" in status["text"]["live"]
    stopped = live(lab, action="stop")
    assert stopped["state"] == "stopped" and stopped["opened"] == "live-transformer-seed0"


def test_a_live_training_that_fails_says_why(tmp_path, monkeypatch):
    """A training that cannot start (no corpus) is 'failed' with the reason from its log beside it."""
    missing = tmp_path / "missing.zip"
    monkeypatch.setenv("ATTN_MT_DATA", str(missing))
    trainer = LiveTrainer({}, {"runs": []}, tmp_path)
    trainer.start("gru_bahdanau", 0, 1)
    assert trainer.current is not None
    assert trainer.current.process.wait() == 2
    status = live_panel(trainer, {})
    reason = f"corpus file not found: {missing} (from $ATTN_MT_DATA)"
    assert status["state"] == "failed" and status["reason"] == reason
    assert status["text"]["live"].endswith(f"s: {reason}")


def test_the_live_panel_starts_follows_and_lists_a_run_in_chromium(lab, page):
    show(page, lab, "live", model="gru_bahdanau", seed="5", epochs="2")
    page.evaluate("document.querySelector('#live-start').click()")
    page.wait_for(
        "(document.querySelector('#panel-live p.text') || {}).textContent"
        "?.startsWith('live-gru_bahdanau-seed5: finished')"
    )
    assert page.evaluate("document.querySelector('#live-action').value") == "status"
    assert "action=status" in page.evaluate("location.hash")  # a reload never starts a training again
    options = page.evaluate("[...document.querySelectorAll('#decoding-run option')].map((o) => o.value)")
    assert "live-gru_bahdanau-seed5" in options
    assert "live-gru_bahdanau-seed5" in page.evaluate(
        "[...document.querySelectorAll('#trained-heads-run option')].map((o) => o.value)"
    )  # the trained run's attention panel draws a GRU run's whole-sentence map too
    screenshot(page, "live")
