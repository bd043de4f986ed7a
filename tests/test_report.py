"""`attn-mt report`: the HTML page of small trained runs, parsed, compared with the run files, and rendered
in headless Chromium."""

from __future__ import annotations

import base64
import contextvars
import io
import json
import re
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pytest
from matplotlib.image import imread
from sacrebleu.metrics import CHRF
from support.helpers import CHROMIUM_FLAGS, chromium_binary

from attn_mt.commands.evaluate import run_eval
from attn_mt.commands.report import run_report
from attn_mt.errors import UserError
from attn_mt.evaluation.scores import compare_eval_dirs
from attn_mt.i18n import gettext, in_language
from attn_mt.report.timeline import timeline_section
from attn_mt.training.timeline import read_timeline

DUMPS = 3  # attention dumps written by the evaluation of each run
VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "track", "wbr"}
HEADINGS = ("h1", "h2", "h3", "h4")
RUN_PARTS = ("overview", "config", "data", "curves", "timeline", "scores", "samples")
PROBES = 4  # the timeline's probe sentences (four spread over the valid split)


class PageParser(HTMLParser):
    """Checks that tags nest properly and collects ids, images, links, headings and the text under each id."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.stack: list[tuple[str, str | None]] = []
        self.errors: list[str] = []
        self.doctype = ""
        self.ids: list[str] = []
        self.images: list[dict[str, str]] = []
        self.links: list[str] = []
        self.text: dict[str, str] = {}
        self.h5: list[str] = []
        self.headings: list[str] = []  # the text of every h1 to h4

    def handle_decl(self, decl: str) -> None:
        self.doctype = decl

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        attributes = {k: v or "" for k, v in attrs}
        if "id" in attributes:
            self.ids.append(attributes["id"])
            self.text[attributes["id"]] = ""
        if tag == "img":
            self.images.append(attributes)
        if "href" in attributes:
            self.links.append(attributes["href"])
        if tag == "h5":
            self.h5.append("")
        if tag in HEADINGS:
            self.headings.append("")
        if tag not in VOID:
            self.stack.append((tag, attributes.get("id")))

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.handle_starttag(tag, attrs)
        if tag not in VOID:
            self.stack.pop()

    def handle_endtag(self, tag: str) -> None:
        if tag in VOID:
            return
        if not self.stack or self.stack[-1][0] != tag:
            self.errors.append(f"</{tag}> closes {self.stack[-1][0] if self.stack else 'nothing'}")
            return
        self.stack.pop()

    def handle_data(self, data: str) -> None:
        for _, element_id in self.stack:
            if element_id is not None:
                self.text[element_id] += data
        if any(tag == "h5" for tag, _ in self.stack):
            self.h5[-1] += data
        if any(tag in HEADINGS for tag, _ in self.stack):
            self.headings[-1] += data


def parse_page(path: Path) -> tuple[PageParser, str]:
    """Parse a report; fail on bad nesting, duplicate ids, outside resources or undecodable images."""
    page = path.read_text(encoding="utf-8")
    parser = PageParser()
    parser.feed(page)
    parser.close()
    assert parser.doctype.lower() == "doctype html"
    assert parser.errors == [] and parser.stack == [], (parser.errors, parser.stack)
    assert len(parser.ids) == len(set(parser.ids)), "duplicate ids"
    assert all(link.startswith("#") and link[1:] in parser.ids for link in parser.links), parser.links
    for forbidden in ("http://", "https://", "file:", "<script", "<link", "url("):
        assert forbidden not in page, forbidden
    for img in parser.images:
        assert img["src"].startswith("data:image/png;base64,") and img["alt"]
        pixels = imread(io.BytesIO(base64.b64decode(img["src"].split(",", 1)[1])), format="png")
        assert pixels.ndim == 3 and pixels.shape[0] > 50 and pixels.shape[1] > 50 and pixels.std() > 0
    return parser, page


def sentence_chrf(eval_dir: Path) -> list[float]:
    """Sentence chrF of every line of an eval folder, computed here from its files."""
    hyps = (eval_dir / "hyp.txt").read_text(encoding="utf-8").splitlines()
    refs = [json.loads(line) for line in (eval_dir / "refs.jsonl").read_text(encoding="utf-8").splitlines()]
    metric = CHRF()
    return [metric.sentence_score(h, r).score for h, r in zip(hyps, refs, strict=True)]


@pytest.fixture(scope="module")
def runs(tiny_runs, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Copies of the session's GRU-Bahdanau and Transformer runs, both evaluated on test with attention
    dumps; the Transformer's evaluation holds a paired bootstrap against the GRU's."""
    dirs = tiny_runs.copy_to(tmp_path_factory.mktemp("report_runs"))
    corpus = str(tiny_runs.corpus)
    run_eval(dirs["gru_bahdanau"], "test", None, DUMPS, None, "best", corpus, "cpu")
    run_eval(dirs["transformer"], "test", None, DUMPS, dirs["gru_bahdanau"], "best", corpus, "cpu")
    return dirs


def test_one_run_report_shows_config_training_scores_and_gallery(runs):
    run_dir = runs["gru_bahdanau"]
    out = run_report([run_dir], None)
    assert out == run_dir / "report.html"
    parser, page = parse_page(out)
    assert {f"run-1-{part}" for part in RUN_PARTS} | {"run-1", "missing"} <= set(parser.ids)
    assert "comparison" not in parser.ids
    heatmaps = sorted((run_dir / "eval" / "test" / "attention").glob("*_cross.png"))
    assert len(heatmaps) == DUMPS
    # training curves, one row of small multiples per timeline probe, one cross-attention heatmap per dump
    assert len(parser.images) == 1 + PROBES + DUMPS
    inlined = {base64.b64decode(img["src"].split(",", 1)[1]) for img in parser.images}
    assert {png.read_bytes() for png in heatmaps} <= inlined

    overview = parser.text["run-1-overview"]
    assert "cpu, " in overview and "CPU threads" in overview and "gru_bahdanau" in overview
    summary = json.loads((run_dir / "run_summary.json").read_text(encoding="utf-8"))
    assert f"{summary['parameters']:,}" in overview and summary["stop_reason"] in overview
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert f"{max(r['elapsed_s'] for r in records):.1f} s" in overview
    speeds = [r["tokens_per_s"] for r in records if "tokens_per_s" in r]
    assert f"{sum(speeds) / len(speeds):,.0f} target tokens/s" in overview
    assert "type: gru_bahdanau" in parser.text["run-1-config"]
    data, facts = parser.text["run-1-data"], json.loads((run_dir / "data_report.json").read_text())
    vocab, train = facts["vocab"], facts["splits"]["train"]
    assert (
        f"{facts['corpus_pairs']:,} pairs" in data
        and f"source {vocab['src']:,}, target {vocab['tgt']:,}" in data
    )
    assert f"{train['pairs']:,}" in data and "source length p50/p90/p99/max" in data

    scores = json.loads((run_dir / "eval" / "test" / "scores.json").read_text())
    for key in ("bleu", "chrf", "ter"):
        assert f"{scores[key]:.2f}" in parser.text["run-1-scores"]
        assert scores[f"{key}_signature"] in parser.text["run-1-scores"]

    chrf = sentence_chrf(run_dir / "eval" / "test")
    order = sorted(range(len(chrf)), key=lambda i: (chrf[i], i))
    worst, best = order[0], sorted(range(len(chrf)), key=lambda i: (-chrf[i], i))[0]
    assert parser.h5[0].startswith(f"Sentence {worst} · sentence chrF {chrf[worst]:.1f}")
    assert "worst chrF #1" in parser.h5[0]
    assert any(h.startswith(f"Sentence {best} ") and "best chrF #1" in h for h in parser.h5)
    dumped = [h for h in parser.h5 if "attention dump" in h]
    assert sorted(int(h.split()[1]) for h in dumped) == list(range(DUMPS))
    summary = json.loads((run_dir / "eval" / "test" / "attention" / "0000.json").read_text())
    card = next(
        text
        for key, text in parser.text.items()
        if key.endswith("-attention") and f"{summary['entropy']:.3f}" in text
    )
    assert f"{summary['eos_share']:.3f}" in card
    assert "Nothing is missing." in parser.text["missing"]

    timeline = read_timeline(run_dir / "timeline.jsonl")
    assert timeline is not None and len(timeline.probes) == PROBES
    learning = parser.text["run-1-timeline"]
    assert f"the first recorded point, 10%, 50% and the last of {len(timeline.points)} points" in learning
    for probe, sentence in enumerate(timeline.probes):
        assert f"{sentence} → {timeline.points[-1].outputs[probe]}" in learning
    alts = [img["alt"] for img in parser.images if img["alt"].endswith("as training went on")]
    assert alts == [f"attention of {sentence} as training went on" for sentence in timeline.probes]


def test_a_run_without_a_timeline_has_no_timeline_section(runs, tmp_path):
    bare = tmp_path / "bare"
    shutil.copytree(runs["transformer"], bare)
    (bare / "timeline.jsonl").unlink()
    assert timeline_section(bare, "run-1-timeline") == ""
    assert timeline_section(runs["transformer"], "run-1-timeline").count("<img ") == PROBES


def test_two_runs_side_by_side_with_paired_bootstrap(runs, tmp_path):
    gru, transformer = runs["gru_bahdanau"], runs["transformer"]
    parser, _ = parse_page(run_report([gru, transformer], tmp_path / "both.html"))
    assert {"comparison", "run-1", "run-2"} <= set(parser.ids)
    side = parser.text["comparison"]
    stored = json.loads((transformer / "eval" / "test" / "scores.json").read_text())
    baseline = json.loads((gru / "eval" / "test" / "scores.json").read_text())
    for scores in (stored, baseline):
        assert f"{scores['bleu']:.2f}" in side and f"{scores['chrf']:.2f}" in side
    assert "transformer against baseline gru_bahdanau" in side and "stored by" in side
    for key in ("bleu", "chrf", "ter"):
        assert f"{stored['compare'][key]['system']['p_value']:.4f}" in side
    # all runs' curves, then each run's own curves, timeline and dumps
    assert len(parser.images) == 1 + (1 + PROBES + DUMPS) + (1 + PROBES + 3 * DUMPS)

    swapped, _ = parse_page(run_report([transformer, gru], tmp_path / "swapped.html"))
    assert "transformer against baseline gru_bahdanau" in swapped.text["comparison"]
    assert "baseline transformer" not in swapped.text["comparison"]  # the stored test's baseline is the GRU
    assert f"{stored['compare']['bleu']['system']['p_value']:.4f}" in swapped.text["comparison"]


def test_bootstrap_is_computed_when_no_evaluation_stored_it(runs, tmp_path):
    gru = runs["gru_bahdanau"]
    again = tmp_path / "gru_again"
    shutil.copytree(gru, again)
    expected = compare_eval_dirs(gru / "eval" / "test", again / "eval" / "test")
    parser, _ = parse_page(run_report([gru, again], tmp_path / "computed.html"))
    side = parser.text["comparison"]
    assert "gru_again against baseline gru_bahdanau" in side and "computed by this report" in side
    assert f"{expected['chrf']['system']['p_value']:.4f}" in side


def test_missing_pieces_are_noted_not_fatal(runs, tmp_path):
    gru = runs["gru_bahdanau"]
    unevaluated, no_dumps, log_only = tmp_path / "unevaluated", tmp_path / "no_dumps", tmp_path / "log_only"
    shutil.copytree(gru, unevaluated, ignore=shutil.ignore_patterns("eval", "metrics.jsonl"))
    shutil.copytree(gru, no_dumps, ignore=shutil.ignore_patterns("attention"))
    log_only.mkdir()
    shutil.copy(gru / "train.log", log_only / "train.log")  # a run whose other files were deleted
    with (no_dumps / "metrics.jsonl").open("a", encoding="utf-8") as handle:
        handle.write('{"step": 99, "loss\n')  # a line cut short by a crash
    hyp_file = no_dumps / "eval" / "test" / "hyp.txt"
    lines = hyp_file.read_text(encoding="utf-8").splitlines()
    hyp_file.write_text("\n".join(['<script>alert("x")</script> & ça', *lines[1:]]) + "\n", encoding="utf-8")

    parser, page = parse_page(run_report([no_dumps, unevaluated, log_only], tmp_path / "partial.html"))
    assert "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt; &amp; ça" in page
    missing = parser.text["missing"]
    assert "metrics.jsonl lines" in missing and "no attention dumps for split test" in missing
    assert "--attention N" in missing
    assert "never evaluated" in missing and "metrics.jsonl not found" in missing
    assert "config.yaml not found" in missing and "run_summary.json not found" in missing
    assert "no metrics.jsonl records" in parser.text["run-2-curves"]
    # the comparison curves, no_dumps' own curves, and the timelines of no_dumps and unevaluated; no dumps
    assert len(parser.images) == 2 + 2 * PROBES
    assert "no attention dump for sentence" in parser.text["run-1-samples"]
    beam = json.loads((no_dumps / "eval" / "test" / "scores.json").read_text())["beam_size"]
    assert f"--split test --beam {beam} --attention " in parser.text["run-1-samples"]  # the same outputs
    assert f"--split test --beam {beam} --attention N" in missing

    with pytest.raises(UserError, match="run directory not found"):
        run_report([tmp_path / "nowhere"], None)


@pytest.mark.parametrize("lang", ["zh", "vi"])
def test_missing_pieces_are_noted_in_the_language_asked(runs, tmp_path, lang):
    unevaluated = tmp_path / "unevaluated"
    shutil.copytree(runs["gru_bahdanau"], unevaluated, ignore=shutil.ignore_patterns("eval", "metrics.jsonl"))
    out = contextvars.copy_context().run(run_report, [unevaluated], tmp_path / "page.html", lang)
    missing = parse_page(out)[0].text["missing"]
    with in_language(lang):
        lost = gettext("training curves, wall time and throughput")
        assert (
            gettext("{file} not found (not shown: {what})").format(file="metrics.jsonl", what=lost) in missing
        )
        assert (
            gettext("never evaluated: {command} writes scores, samples and attention").split("{")[0]
            in missing
        )
    assert "not found" not in missing and "never evaluated" not in missing


def test_cli_refuses_a_folder_holding_no_run_file(runs, tmp_path, run_cli):
    notes = tmp_path / "notes"
    (notes / "drafts").mkdir(parents=True)
    (notes / "thesis.tex").write_text("not a run\n", encoding="utf-8")
    result = run_cli("report", str(runs["transformer"]), str(notes), "--out", str(tmp_path / "page.html"))
    assert result.returncode == 2
    assert result.stderr == (
        f"attn-mt: error: {notes} is not a run directory: none of a run's files "
        "(config.yaml, metrics.jsonl, checkpoints/, eval/, ...) is in it; it holds "
        "drafts/, thesis.tex\n"
    )
    assert not (tmp_path / "page.html").exists()
    empty = tmp_path / "empty"
    empty.mkdir()
    refused = f"^{re.escape(str(empty))} is not a run directory: .*; it holds nothing$"
    with pytest.raises(UserError, match=refused):
        run_report([empty], None)
    assert not (empty / "report.html").exists()


def test_cli_writes_the_report(runs, tmp_path, run_cli):
    out = tmp_path / "sub" / "cli.html"
    result = run_cli("report", str(runs["transformer"]), "--out", str(out))
    assert result.returncode == 0, result.stderr
    assert str(out) in result.stdout
    parser, _ = parse_page(out)
    # curves, the timeline's probes, encoder self, decoder self and cross per dump
    assert len(parser.images) == 1 + PROBES + 3 * DUMPS


@pytest.mark.parametrize(
    ("lang", "html_lang", "headings", "score"),
    [
        (
            "zh",
            "zh-Hans",
            ["运行对比", "运行 gru_bahdanau", "概览", "训练曲线", "看它学习", "翻译示例", "缺失内容"],
            r"\d+\.\d\d",
        ),
        (
            "vi",
            "vi",
            ["So sánh các lượt chạy", "Tổng quan", "Đường cong huấn luyện", "Xem mô hình học"],
            r"\d+,\d\d",
        ),
    ],
)
def test_the_report_speaks_the_language_asked(runs, tmp_path, run_cli, lang, html_lang, headings, score):
    out = tmp_path / f"{lang}.html"
    args = ("report", str(runs["gru_bahdanau"]), str(runs["transformer"]), "--out", str(out), "--lang", lang)
    result = contextvars.copy_context().run(run_cli, *args)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == {"zh": f"报告已写入 {out}", "vi": f"Đã ghi báo cáo vào {out}"}[lang]
    parser, page = parse_page(out)
    assert f'<html lang="{html_lang}">' in page and '"Noto Sans CJK SC"' in page
    assert set(headings) <= set(parser.headings)
    assert not {"Overview", "Training curves", "Runs side by side", "Missing"} & set(parser.headings)
    with in_language(lang):  # the data report's tables too
        assert gettext("vocabulary") in parser.text["run-1-data"]
        assert gettext("source length p50/p90/p99/max") in parser.text["run-1-data"]
    assert "vocabulary" not in parser.text["run-1-data"] and "pairs" not in parser.text["run-1-data"]
    side_by_side = parser.text["comparison"]
    assert re.search(score, side_by_side), side_by_side[:300]  # the scores as the language writes numbers
    english = contextvars.copy_context().run(run_cli, "report", str(runs["gru_bahdanau"]), "--out", str(out))
    assert english.returncode == 0 and '<html lang="en">' in out.read_text(encoding="utf-8")


def test_missing_chromium_names_the_install_step_and_installs_nothing(monkeypatch):
    monkeypatch.setattr(shutil, "which", lambda name: None)

    def no_commands(*args, **kwargs):
        raise AssertionError(f"a test ran {args[0]!r}")

    monkeypatch.setattr(subprocess, "run", no_commands)
    with pytest.raises(pytest.fail.Exception, match="install it with `make browser`"):
        chromium_binary()


def open_in_chromium(chromium: str, page: Path, work: Path, *extra: str) -> subprocess.CompletedProcess:
    """Load a page in headless Chromium, print its DOM on stdout and log its console messages on stderr."""
    profile = work / "chromium-profile"
    command = [
        chromium,
        *CHROMIUM_FLAGS,
        f"--user-data-dir={profile}",
        "--window-size=1200,2000",
        "--enable-logging=stderr",
        "--v=0",
        "--dump-dom",
        *extra,
        page.resolve().as_uri(),
    ]
    return subprocess.run(command, capture_output=True, text=True, timeout=60, cwd=work)


def console_lines(stderr: str) -> list[str]:
    """The lines Chromium logs for the page's console (script errors, failed resources)."""
    return [line for line in stderr.splitlines() if ":CONSOLE" in line or "Uncaught" in line]


def test_report_renders_in_headless_chromium(runs, chromium, tmp_path):
    probe = tmp_path / "probe.html"
    probe.write_text("<!DOCTYPE html><title>probe</title><script>notDefined();</script>", encoding="utf-8")
    assert any(
        "notDefined" in line for line in console_lines(open_in_chromium(chromium, probe, tmp_path).stderr)
    )

    report = run_report([runs["gru_bahdanau"], runs["transformer"]], tmp_path / "report.html")
    shot = tmp_path / "shot.png"
    result = open_in_chromium(chromium, report, tmp_path, f"--screenshot={shot}")
    assert result.returncode == 0 and shot.is_file(), result.stderr[-2000:]
    assert console_lines(result.stderr) == []
    pixels = imread(shot)
    assert pixels.shape[:2] == (2000, 1200)
    assert pixels.std() > 0 and not np.all(pixels[..., :3] >= 1.0)
    assert np.mean(pixels[..., :3].min(axis=-1) < 0.9) > 0.01  # a real share of the page is not white

    dom = result.stdout
    for section in ("comparison", "run-1-curves", "run-2-samples", "missing"):
        assert f'id="{section}"' in dom
    # GRU: 1 map per dump, Transformer: 3; each run's timeline: one row of small multiples per probe
    assert dom.count("<img ") == 1 + (1 + PROBES + DUMPS) + (1 + PROBES + 3 * DUMPS)
