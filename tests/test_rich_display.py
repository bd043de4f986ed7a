"""Rich display in Jupyter: translations, their attention and the chapter demos as HTML and PNG."""

from __future__ import annotations

import base64
import io
import re
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from matplotlib import image as mpl_image

import attn_mt
from attn_mt.decoding.attention import SentenceAttention
from attn_mt.decoding.display import Heatmap
from attn_mt.decoding.outputs import Hypothesis, Translation
from attn_mt.demos import DEMOS, show
from attn_mt.errors import UserError

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
IMAGE = re.compile(r'<img src="data:image/png;base64,([A-Za-z0-9+/=]+)" alt="[^"<>]*"/>')


def png_size(png: bytes) -> tuple[int, int]:
    """(height, width) in pixels of PNG bytes, read back by matplotlib."""
    assert png.startswith(PNG_SIGNATURE)
    return mpl_image.imread(io.BytesIO(png), format="png").shape[:2]


def embedded_images(page: str) -> list[bytes]:
    """The PNGs an HTML fragment embeds as data URIs."""
    return [base64.b64decode(data) for data in IMAGE.findall(page)]


def tricky_attention() -> SentenceAttention:
    """A Bahdanau-like map of 3 source tokens, two of them HTML, and 2 outputs."""
    cross = np.array([[0.7, 0.2, 0.1], [0.1, 0.1, 0.8]], dtype=np.float32)  # (T, S)
    return SentenceAttention({"cross": cross}, ["<b>", "&", "<eos>"], ["x&y", "<eos>"], ["<bos>", "x&y"])


def test_attention_png_is_a_heatmap_of_sensible_size():
    height, width = png_size(tricky_attention()._repr_png_())
    # one 2.5-inch panel at 100 dpi plus a colour bar and a title: a few hundred pixels each way
    assert 200 <= height <= 600 and 200 <= width <= 800


def test_attention_html_escapes_the_tokens_and_embeds_one_heatmap_per_map():
    page = tricky_attention()._repr_html_()
    assert "<code>&lt;b&gt;</code> <code>&amp;</code> <code>&lt;eos&gt;</code>" in page
    assert "<code>x&amp;y</code>" in page
    assert "<b>&" not in page and "<code><b>" not in page
    (image,) = embedded_images(page)
    assert image.startswith(PNG_SIGNATURE)
    assert "(2 x 3)" in page


def test_every_transformer_map_is_drawn_with_layers_and_heads():
    rng = np.random.default_rng(0)
    maps = {
        name: rng.dirichlet(np.ones(keys), size=(1, 2, queries)).astype(np.float32)  # (L, h, Q, K)
        for name, queries, keys in [("encoder_self", 3, 3), ("decoder_self", 2, 2), ("cross", 2, 3)]
    }
    attention = SentenceAttention(maps, ["a", "b", "<eos>"], ["c", "<eos>"], ["<bos>", "c"])
    page = attention._repr_html_()
    images = embedded_images(page)
    assert len(images) == 3
    assert "(1 x 2 x 2 x 3)" in page
    # the single picture is the cross-attention: two heads side by side, wider than one panel
    _, one_head_width = png_size(tricky_attention()._repr_png_())
    _, width = png_size(attention._repr_png_())
    assert width > 1.5 * one_head_width


def test_translation_html_escapes_and_lists_the_nbest():
    translation = Translation(
        "Tom & <i>Mary</i>",
        ["tom", "&", "<i>mary</i>"],
        ["Tom & <i>Marie</i>", "Tom et Marie"],
        [Hypothesis([4, 5, 6], -1.5, -0.25), Hypothesis([4, 7, 6], -2.0, -0.5)],
        ["1 word unknown: <i>mary</i>"],
    )
    page = translation._repr_html_()
    assert "Tom &amp; &lt;i&gt;Mary&lt;/i&gt;" in page
    assert "<i>" not in page
    assert page.index("Tom &amp; &lt;i&gt;Marie&lt;/i&gt;") < page.index("Tom et Marie")
    assert "-1.5000" in page and "-0.2500" in page and "-0.5000" in page
    assert "1 word unknown: &lt;i&gt;mary&lt;/i&gt;" in page


def test_a_blank_translation_says_it_has_no_output():
    assert "no output" in Translation("", [])._repr_html_()


def test_matplotlib_is_imported_only_when_a_picture_is_asked_for():
    script = textwrap.dedent(
        """
        import sys
        from attn_mt.decoding.attention import SentenceAttention
        from attn_mt.decoding.outputs import Hypothesis, Translation
        import numpy as np
        Translation("a", ["a"], ["b"], [Hypothesis([4], -1.0, -1.0)])._repr_html_()
        print("matplotlib" in sys.modules)
        SentenceAttention({"cross": np.ones((1, 1))}, ["a"], ["<eos>"], ["<bos>"])._repr_png_()
        print("matplotlib" in sys.modules)
        """
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert result.stdout.split() == ["False", "True"]


def test_a_loaded_model_shows_its_translation_and_attention(tiny_runs):
    model = attn_mt.load(tiny_runs.gru_bahdanau)
    (translation,) = model.translate_full(["Alpha bravo charlie."])
    attention = model.attention(translation)
    assert "<code>alpha</code>" in translation._repr_html_()
    rows, cols = attention.labels("cross")
    assert cols[:3] == ["alpha", "bravo", "charlie"] and rows[-1] == "<eos>"
    assert embedded_images(attention._repr_html_())[0] == attention._repr_png_()
    bundle = attention._repr_mimebundle_()  # what Jupyter asks for: the same two views, drawn once
    assert bundle == {"text/html": attention._repr_html_(), "image/png": attention._repr_png_()}


def test_attention_of_a_blank_input_is_a_clear_error(tiny_runs):
    model = attn_mt.load(tiny_runs.transformer)
    (blank,) = model.translate_full([""])
    with pytest.raises(UserError, match="no output"):
        model.attention(blank)


@pytest.mark.parametrize("name", list(DEMOS))
def test_every_demo_shows_its_numbers_and_figures(name):
    demo = show(name, seed=0)
    page = demo._repr_html_()
    images = embedded_images(page)
    assert len(images) == len(demo.results["figures"]) == 3
    assert images[0] == demo._repr_png_()
    assert all(min(png_size(png)) >= 150 and max(png_size(png)) <= 1200 for png in images)
    assert f"<b>demo {name}</b>" in page and '"seed": 0' in page


def test_an_unknown_demo_is_a_clear_error():
    with pytest.raises(UserError, match="unknown demo 'attention'"):
        show("attention")


def test_a_heatmap_of_any_weights_labels_positions_or_the_labels_given():
    import torch

    eye = Heatmap(torch.eye(10, requires_grad=True).reshape(1, 1, 10, 10))  # the book's first heatmap
    height, width = png_size(eye._repr_png_())
    assert 200 <= height <= 400 and 200 <= width <= 500  # one book-sized panel: positions need no room
    labelled = Heatmap(np.eye(2), ["<q>", "q&"], ["k1", "k2"], title="two")
    assert png_size(labelled._repr_png_())[0] >= 200
    with pytest.raises(ValueError, match=r"\(Q, K\) or \(L, h, Q, K\)"):
        Heatmap(np.ones((2, 3, 4)))
    with pytest.raises(ValueError, match="3 row and 2 column labels for 2 x 2"):
        Heatmap(np.eye(2), ["a", "b", "c"], ["d", "e"])._repr_png_()
