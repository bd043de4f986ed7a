"""The catalogues (attn_mt/i18n): every string the code marks is translated in each, with its placeholders
and the glossary's terms; the language a command or a page uses; numbers; the JSON the pages read."""

from __future__ import annotations

import contextvars
import html
import json
import re
import subprocess
import warnings
from pathlib import Path

import pytest
from babel.messages.catalog import Catalog
from fastapi import FastAPI
from fastapi.testclient import TestClient
from matplotlib.text import Text

from attn_mt.i18n import (
    catalogue_json,
    format_number,
    gettext,
    in_language,
    ngettext,
    pick_language,
    resolve_language,
)
from attn_mt.i18n.catalogues import read_catalogue, translated_languages
from attn_mt.i18n.checks import missing_translations, placeholder_problems, stale_entries
from attn_mt.i18n.extract import MarkingError, marked_strings, python_marked, template
from attn_mt.i18n.fonts import cjk_family, plot_families
from attn_mt.i18n.glossary import glossary_problems, terms
from attn_mt.i18n.languages import UnknownLanguageError
from attn_mt.web.languages import add_catalogue_routes

CATALOGUES = translated_languages()
FONT_STEP = "`make browser` (Debian: apt-get install fonts-noto-cjk)"


def run_isolated(function, *args, **kwargs):
    """Call `function` in a copy of this context, so the language it puts in force stays there."""
    return contextvars.copy_context().run(function, *args, **kwargs)


def test_the_catalogues_are_chinese_and_vietnamese():
    assert CATALOGUES == ["zh", "vi"]


def test_the_code_marks_the_demo_and_report_texts():
    marked = {m.msgid for m in marked_strings()}
    assert {
        "figures and the full JSON written to {folder}",
        "Watch it learn",
        "scaled dot-product attention",
    } <= marked
    assert {"report written to {file}", "attention weight", "Runs side by side"} <= marked


@pytest.mark.parametrize("lang", CATALOGUES)
def test_every_marked_string_is_translated(lang):
    assert missing_translations(template(), read_catalogue(lang)) == []


@pytest.mark.parametrize("lang", CATALOGUES)
def test_no_catalogue_keeps_a_string_no_code_marks(lang):
    assert stale_entries(template(), read_catalogue(lang)) == []


@pytest.mark.parametrize("lang", CATALOGUES)
def test_every_translation_keeps_its_placeholders(lang):
    assert placeholder_problems(read_catalogue(lang)) == []


@pytest.mark.parametrize("lang", CATALOGUES)
def test_every_translation_uses_the_glossary_terms(lang):
    assert glossary_problems(read_catalogue(lang), lang) == []


def catalogue_of(lang: str, *entries: tuple[str, str]) -> Catalog:
    catalog = Catalog(locale={"zh": "zh_Hans_CN", "vi": "vi"}[lang])
    for msgid, msgstr in entries:
        catalog.add(msgid, msgstr, locations=[("attn_mt/example.py", 1)])
    return catalog


def test_the_checks_find_what_they_guard():
    marked = catalogue_of("zh", ("keys", ""), ("queries", ""), ("{n} keys", ""))
    catalog = catalogue_of("zh", ("keys", "钥匙"), ("{n} keys", "{m} 个键"), ("gone", "没了"))
    catalog.add("queries", "查询", flags=["fuzzy"])
    assert missing_translations(marked, catalog) == ["untranslated: 'queries' (attn_mt/example.py)"]
    assert stale_entries(marked, catalog) == ["no code marks 'gone'"]
    assert placeholder_problems(catalog) == ["'{n} keys': '{m} 个键' has ['{m}'], the English ['{n}']"]
    assert glossary_problems(catalog, "zh") == ["'keys' uses 'key': its zh text must say '键'"]
    broken = catalogue_of("vi", ("{name!r} is unknown", "{name} không rõ"), ("{n} runs", "{n} lượt chạy {"))
    problems = placeholder_problems(broken)
    assert problems[0] == "'{name!r} is unknown': '{name} không rõ' has ['{name}'], the English ['{name!r}']"
    assert problems[1].startswith("'{n} runs': '{n} lượt chạy {' cannot be filled")


def test_the_vietnamese_edition_literal_words_are_not_the_glossary_s():
    """Where the Vietnamese edition translates word by word, the glossary keeps the learner's word."""
    words = {term.english[0]: term.translations for term in terms()}
    assert words["dot product"]["vi"] == "tích vô hướng"  # the edition: "sản phẩm chấm"
    assert words["key"] == {"zh": "键", "vi": "khóa"}  # the edition also writes "phím"
    assert words["attention pooling"]["zh"] == "注意力汇聚"
    assert words["masked softmax operation"]["zh"] == "掩蔽softmax操作"


def test_each_glossary_term_is_there_once_in_each_language():
    forms = [form.casefold() for term in terms() for form in term.english]
    assert len(forms) == len(set(forms))
    assert all(set(term.translations) == {"zh", "vi"} and all(term.translations.values()) for term in terms())


def test_a_glossary_term_is_matched_as_whole_words_only():
    (key,) = (term for term in terms() if term.english[0] == "key")
    assert key.used_in("the Keys are equal") and key.used_in("key-value pairs")
    assert not key.used_in("a keyword") and not key.used_in("monkey")


def test_a_marked_call_needs_a_literal_message(tmp_path: Path):
    good = tmp_path / "good.py"
    good.write_text(
        '_("hello {name}")\nngettext("{n} key", "{n} keys", n)\n_(TITLES[name])\n', encoding="utf-8"
    )
    assert [(m.msgid, m.plural) for m in python_marked(good)] == [
        ("hello {name}", None),
        ("{n} key", "{n} keys"),
    ]
    for wrong in ('_(f"hello {name}")', '_("a" + b)', 'ngettext("one", plural, n)', "N_(name)"):
        bad = tmp_path / "bad.py"
        bad.write_text(wrong + "\n", encoding="utf-8")
        with pytest.raises(MarkingError, match="must be a string literal"):
            list(python_marked(bad))


@pytest.mark.parametrize(
    ("flag", "environ", "expected"),
    [
        ("vi", {"ATTN_MT_LANG": "zh", "LANG": "en_US.UTF-8"}, "vi"),
        (None, {"ATTN_MT_LANG": "zh-CN", "LANG": "vi_VN.UTF-8"}, "zh"),
        (None, {"LANG": "vi_VN.UTF-8"}, "vi"),
        (None, {"LC_ALL": "zh_CN.UTF-8", "LANG": "vi_VN.UTF-8"}, "zh"),
        (None, {"LC_ALL": "C", "LANG": "zh_CN.UTF-8"}, "en"),
        (None, {"LC_MESSAGES": "zh_TW.UTF-8", "LANG": "de_DE.UTF-8"}, "zh"),
        (None, {"LANG": "de_DE.UTF-8"}, "en"),
        (None, {}, "en"),
    ],
)
def test_the_language_is_the_flag_then_the_variable_then_the_locale(flag, environ, expected):
    assert resolve_language(flag, environ) == expected


def test_an_unknown_language_asked_for_by_name_is_refused():
    with pytest.raises(UnknownLanguageError, match="--lang 'fr': choose one of en, zh, vi"):
        resolve_language("fr", {})
    with pytest.raises(UnknownLanguageError, match=r"\$ATTN_MT_LANG 'klingon'"):
        resolve_language(None, {"ATTN_MT_LANG": "klingon"})


@pytest.mark.parametrize(
    ("header", "expected"),
    [
        ("vi-VN,vi;q=0.9,en-US;q=0.8,en;q=0.7", "vi"),
        ("en-US,en;q=0.9,zh-CN;q=0.8", "en"),
        ("fr-FR, zh-Hans;q=0.5, vi;q=0.4", "zh"),
        ("zh;q=0, fr", "en"),
        ("en;q=0.3, vi;q=0.8", "vi"),
        ("*", "en"),
        ("", "en"),
        (None, "en"),
    ],
)
def test_a_page_takes_the_browsers_preferred_language(header, expected):
    assert pick_language(header) == expected


def test_numbers_are_written_as_each_language_writes_them():
    """Only the separators differ: 2.675 is 2.67499... as a float, rounded alike in every language."""
    for lang, expected in (
        ("en", "16,095 0.05 2.67"),
        ("zh", "16,095 0.05 2.67"),
        ("vi", "16.095 0,05 2,67"),
    ):
        with in_language(lang):
            written = [format_number(16095.4, 0, grouping=True), format_number(0.05), format_number(2.675)]
        assert " ".join(written) == expected


def test_messages_and_plurals_come_out_in_the_language_in_force():
    with in_language("zh"):
        assert gettext("scaled dot-product attention") == "缩放点积注意力"
        assert ngettext(
            "{count} run: {names}. Generated {stamp}.", "{count} runs: {names}. Generated {stamp}.", 1
        )
        assert gettext("a string no code marks") == "a string no code marks"
    with in_language("vi"):
        assert gettext("additive attention") == "chú ý cộng tính"
    singular = "{count} run: {names}. Generated {stamp}."
    assert ngettext(singular, "{count} runs: {names}. Generated {stamp}.", 1) == singular
    assert gettext("additive attention") == "additive attention"


def test_the_pages_catalogue_holds_the_same_translations():
    zh = catalogue_json("zh")
    assert zh["html_lang"] == "zh-Hans" and zh["plural"] == "one-form"
    assert zh["messages"]["Watch it learn"] == "看它学习"
    assert zh["messages"]["{count} run: {names}. Generated {stamp}."] == [
        "{count} 个运行：{names}。生成于 {stamp}。"
    ]
    assert zh["languages"] == {"en": "English", "zh": "中文（简体）", "vi": "Tiếng Việt"}
    english = catalogue_json("en")
    assert english["messages"] == {} and english["plural"] == "n-not-1"
    with pytest.raises(ValueError, match="no catalogue for 'fr'"):
        catalogue_json("fr")


def test_the_catalogue_route_answers_the_language_asked_else_the_browsers():
    app = FastAPI()
    add_catalogue_routes(app)
    client = TestClient(app)
    chosen = client.get("/i18n/catalogue.json", headers={"Accept-Language": "vi-VN,vi;q=0.9,en;q=0.5"})
    assert chosen.status_code == 200 and chosen.json()["lang"] == "vi"
    assert chosen.headers["vary"] == "Accept-Language" and chosen.headers["content-language"] == "vi"
    asked = client.get("/i18n/catalogue.json?lang=zh", headers={"Accept-Language": "vi"})
    assert asked.json() == json.loads(json.dumps(catalogue_json("zh")))
    unknown = client.get("/i18n/catalogue.json?lang=fr")
    assert unknown.status_code == 404 and unknown.json()["error"] == "no catalogue for 'fr': en, zh, vi"
    script = client.get("/i18n/i18n.js")
    assert script.headers["content-type"].startswith("text/javascript")
    assert "window.attnMtI18n" in script.text


def test_plots_name_a_cjk_font_and_draw_chinese_without_missing_glyphs(tmp_path: Path):
    from attn_mt.demos import scoring

    if cjk_family() is None:
        pytest.fail(f"no CJK font for the plots' Chinese: install one with {FONT_STEP}")
    drawn: list[list[str]] = []
    families: list[list[str]] = []
    real_save = scoring.save_figure

    def recording_save(fig, path):
        texts = fig.findobj(Text)
        saved = real_save(fig, path)
        drawn.append([text.get_text() for text in texts])
        families.append(texts[0].get_fontfamily())
        return saved

    scoring.save_figure = recording_save
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # matplotlib warns "Glyph ... missing from font(s)"
            with in_language("zh"):
                scoring.run(tmp_path, seed=0)
    finally:
        scoring.save_figure = real_save
    texts = {text for figure in drawn for text in figure}
    assert {"缩放点积注意力", "加性注意力", "键", "查询", "注意力权重", "有效长度 [2, 3]"} <= texts
    assert families[0] == plot_families() == ["DejaVu Sans", cjk_family()]


def test_demo_speaks_the_language_asked(run_cli, tmp_path: Path, monkeypatch):
    monkeypatch.setenv("ATTN_MT_LANG", "vi")
    result = run_isolated(run_cli, "demo", "positional-encoding", "--out", str(tmp_path))
    assert result.returncode == 0
    assert (
        result.stdout.splitlines()[-1]
        == f"Đã ghi các hình và toàn bộ JSON vào {tmp_path / 'positional-encoding'}"
    )
    result = run_isolated(run_cli, "demo", "positional-encoding", "--out", str(tmp_path), "--lang", "zh")
    assert result.stdout.splitlines()[-1] == f"图和完整的 JSON 已写入 {tmp_path / 'positional-encoding'}"
    result = run_isolated(run_cli, "demo", "attention-cues", "--lang", "zh")
    assert result.returncode == 2
    assert (
        "没有名为 'attention-cues' 的演示：请从 nadaraya-watson, scoring, positional-encoding 中选一个"
        in result.stderr
    )
    result = run_isolated(run_cli, "demo", "scoring", "--lang", "fr")
    assert result.returncode == 2 and "--lang 'fr': choose one of en, zh, vi" in result.stderr
    monkeypatch.setenv("ATTN_MT_LANG", "en")
    result = run_isolated(run_cli, "demo", "positional-encoding", "--out", str(tmp_path))
    assert (
        result.stdout.splitlines()[-1]
        == f"figures and the full JSON written to {tmp_path / 'positional-encoding'}"
    )


I18N_JS = Path(__file__).resolve().parent.parent / "attn_mt" / "i18n" / "i18n.js"
HELPER_PAGE = """<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"></head><body>
<select id="language"></select><h2 data-i18n>Watch
  it   learn</h2><p id="out"></p>
<script>
const CATALOGUES = %s;
const asked = [];
window.fetch = async (url) => {  // the server: ?lang= else the browser's language (Vietnamese here)
  const lang = new URL(url, location.href).searchParams.get("lang") || "vi";
  asked.push(lang);
  return { ok: true, status: 200, json: async () => CATALOGUES[lang] };
};
</script>
<script src="i18n.js"></script>
<script>
const { t, nt, formatNumber } = window.attnMtI18n;
attnMtI18n.load().then(async () => {
  const select = attnMtI18n.switcher(document.getElementById("language"));
  const plural = ["{count} run: {names}. Generated {stamp}.", "{count} runs: {names}. Generated {stamp}."];
  const first = [document.documentElement.lang, document.querySelector("h2").textContent,
    t("Run {name}", { name: "gru" }), nt(...plural, 2, { count: 2, names: "a, b", stamp: "9:00" }),
    formatNumber(16095.4, 0, true), formatNumber(0.05, 2), t("{{not a field}} {n}", { n: 1 }),
    [...select.options].map((option) => option.textContent).join("|")];
  await attnMtI18n.choose("zh");
  const second = [document.documentElement.lang, document.querySelector("h2").textContent, select.value,
    localStorage.getItem("attn-mt-lang"), t("Run {name}", { name: "gru" })];
  document.getElementById("out").textContent = JSON.stringify({ first, second, asked });
});
</script></body></html>
"""


def test_the_pages_helper_translates_switches_and_remembers(chromium, tmp_path: Path):
    from support.helpers import CHROMIUM_FLAGS

    catalogues = {lang: catalogue_json(lang) for lang in ("en", "zh", "vi")}
    (tmp_path / "i18n.js").write_bytes(I18N_JS.read_bytes())
    page = tmp_path / "page.html"
    page.write_text(HELPER_PAGE % json.dumps(catalogues, ensure_ascii=False), encoding="utf-8")
    command = [
        chromium,
        *CHROMIUM_FLAGS,
        f"--user-data-dir={tmp_path / 'profile'}",
        "--allow-file-access-from-files",
        "--virtual-time-budget=5000",
        "--dump-dom",
        page.as_uri(),
    ]
    dom = subprocess.run(command, capture_output=True, text=True, timeout=90, cwd=tmp_path).stdout
    found = re.search(r'<p id="out">(.*?)</p>', dom)
    assert found and found.group(1), dom[-2000:]
    result = json.loads(html.unescape(found.group(1)))
    assert result["first"] == [
        "vi",
        "Xem mô hình học",
        "Lượt chạy gru",
        "2 lượt chạy: a, b. Tạo lúc 9:00.",
        "16.095",
        "0,05",
        "{not a field} 1",
        "English|中文（简体）|Tiếng Việt",
    ]
    assert result["second"] == ["zh-Hans", "看它学习", "zh", "zh", "运行 gru"]
    assert result["asked"] == ["vi", "zh"]
