"""Scores: the book's BLEU by hand, sacreBLEU numbers checked against sacreBLEU's own command line."""

from __future__ import annotations

import json
import math
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import sacrebleu
import torch
from support.synthetic import write_corpus

from attn_mt.commands.evaluate import run_eval
from attn_mt.config import load_config
from attn_mt.errors import UserError
from attn_mt.evaluation.scores import (
    BOOK_SENTENCES,
    HYP_FILE,
    REFS_FILE,
    SRC_FILE,
    book_bleu,
    book_bleu_rows,
    compare_eval_dirs,
    corpus_scores,
    paired_bootstrap,
    read_eval_files,
    read_scores,
    reference_streams,
    write_eval_files,
    write_scores,
)
from attn_mt.training.launch import train

TINY = Path(__file__).resolve().parent.parent / "configs" / "tiny.yaml"

SOURCES = [f"sentence {i} ." for i in range(12)]
REFS_2 = [
    ["le chat est noir .", "le chat noir est là ."],
    ["il fait beau .", "il fait bon ."],
    ["je suis chez moi .", "je suis à la maison ."],
    ["va !", "pars !"],
    ["j'ai perdu .", "j'ai perdu la partie ."],
    ["il est calme .", "il est tranquille ."],
    ["nous sommes prêts .", "on est prêts ."],
    ["elle lit un livre .", "elle est en train de lire ."],
    ["c'est très bien .", "c'est parfait ."],
    ["où est la gare ?", "où se trouve la gare ?"],
    ["je ne sais pas .", "aucune idée ."],
    ["merci beaucoup .", "merci bien ."],
]
HYPS_A = [
    "le chat noir .",
    "il fait très beau .",
    "je suis chez moi .",
    "va !",
    "j'ai perdu le jeu .",
    "il est calme .",
    "nous sommes prêt .",
    "elle lit le livre .",
    "c'est bien .",
    "où est gare ?",
    "je sais pas .",
    "",
]
HYPS_B = [
    "le chien est noir .",
    "il fait beau .",
    "je suis à la maison .",
    "allez !",
    "j'ai perdu .",
    "il est tranquille .",
    "on est prêts .",
    "elle lit .",
    "c'est parfait .",
    "où est la gare ?",
    "je ne sais pas .",
    "merci .",
]


def run_sacrebleu(args: list[str], cwd) -> str:
    """sacreBLEU's command line, run as a separate process."""
    done = subprocess.run(
        [sys.executable, "-m", "sacrebleu", *args], cwd=cwd, capture_output=True, text=True, check=True
    )
    return done.stdout


def stream_files(tmp_path, eval_dir, width: int) -> list[str]:
    """Turn the written refs.jsonl (fixed number of references) into one file per reference stream."""
    rows = [json.loads(line) for line in (eval_dir / REFS_FILE).read_text(encoding="utf-8").splitlines()]
    names = []
    for j in range(width):
        path = tmp_path / f"ref{j}.txt"
        path.write_text("".join(row[j] + "\n" for row in rows), encoding="utf-8")
        names.append(str(path))
    return names


# ----- the book's BLEU -----


def test_book_bleu_by_hand():
    assert book_bleu("il est calme .", "il est calme .") == 1.0
    # One token: only p_1 counts (the book's n <= len_pred); BP = exp(1 - 2/1).
    assert book_bleu("va", "va !") == pytest.approx(math.exp(-1))
    # BP exp(1 - 5/4); p_1 = 3/4 (je, suis, .); p_2 = 1/3 ("je suis").
    expected = math.exp(-0.25) * (3 / 4) ** 0.5 * (1 / 3) ** 0.25
    assert book_bleu("je suis calme .", "je suis chez moi .") == pytest.approx(expected)
    # Clipping: "le" matches once; no BP for a prediction longer than the label.
    assert book_bleu("le le le", "le chat", k=1) == pytest.approx((1 / 3) ** 0.5)
    assert book_bleu("le le le", "le chat", k=2) == 0.0
    assert book_bleu("", "va !") == 0.0
    # Every unigram matches; bigrams "chez moi" and "je suis" of 3.
    assert book_bleu("chez moi je suis", "je suis chez moi", k=2) == pytest.approx((2 / 3) ** 0.25)


def test_book_rows_for_the_book_sentences():
    sources = [s for s, _ in BOOK_SENTENCES]
    labels = [t for _, t in BOOK_SENTENCES]
    rows = book_bleu_rows(sources, ["va !", "j'ai perdu .", "il est riche .", "je suis chez moi ."], labels)
    assert [r["source"] for r in rows] == ["go .", "i lost .", "he's calm .", "i'm home ."]
    # "il est riche ." against "il est calme .": p_1 = 3/4, p_2 = 1/3 ("il est"), no brevity penalty.
    assert [round(r["bleu2"], 6) for r in rows] == [1.0, 1.0, round((3 / 4) ** 0.5 * (1 / 3) ** 0.25, 6), 1.0]


# ----- sacreBLEU scores -----


def test_reference_streams_pad_with_none():
    assert reference_streams([["a", "b"], ["c"], ["d", "e", "f"]]) == [
        ["a", "c", "d"],
        ["b", None, "e"],
        [None, None, "f"],
    ]
    with pytest.raises(ValueError, match="sentence 1"):
        reference_streams([["a"], []])
    with pytest.raises(UserError):
        reference_streams([])


@pytest.mark.parametrize("width", [1, 2])
def test_scores_equal_sacrebleu_command_line_on_written_files(tmp_path, width):
    refs = [r[:width] for r in REFS_2]
    eval_dir = tmp_path / "eval"
    write_eval_files(eval_dir, SOURCES, HYPS_A, refs)
    scores = corpus_scores(HYPS_A, refs)
    write_scores(eval_dir, scores)
    cli = json.loads(
        run_sacrebleu(
            [
                *stream_files(tmp_path, eval_dir, width),
                "-i",
                str(eval_dir / HYP_FILE),
                "-m",
                "bleu",
                "chrf",
                "ter",
                "-w",
                "6",
                "-f",
                "json",
            ],
            tmp_path,
        )
    )
    written = read_scores(eval_dir)
    for key, entry in zip(["bleu", "chrf", "ter"], cli, strict=True):
        assert written[key] == pytest.approx(entry["score"], abs=1e-6)
        assert written[f"{key}_signature"] == entry["signature"]
    assert written["bleu_signature"].startswith(f"nrefs:{width}|")


def test_variable_reference_counts():
    refs = [REFS_2[0], REFS_2[1][:1], REFS_2[2], REFS_2[3][:1]]
    hyps = HYPS_A[:4]
    scores = corpus_scores(hyps, refs)
    # Repeating a sentence's only reference changes no metric, so a fixed two-stream corpus must agree.
    repeated = [r if len(r) == 2 else r * 2 for r in refs]
    streams = [[r[j] for r in repeated] for j in range(2)]
    assert scores["bleu"] == pytest.approx(sacrebleu.corpus_bleu(hyps, streams).score, abs=1e-9)
    assert scores["chrf"] == pytest.approx(sacrebleu.corpus_chrf(hyps, streams).score, abs=1e-9)
    assert scores["ter"] == pytest.approx(sacrebleu.corpus_ter(hyps, streams).score, abs=1e-9)
    assert scores["bleu_signature"].startswith("nrefs:var|")
    assert scores["refs_per_sentence"] == {"min": 1, "max": 2, "mean": 1.5}
    # Padding with empty strings instead of None would add empty references: TER divides by the
    # mean reference length, which they shorten.
    wrong = [[r[j] if j < len(r) else "" for r in refs] for j in range(2)]
    assert sacrebleu.corpus_ter(hyps, wrong).score != pytest.approx(scores["ter"])


def test_paired_bootstrap_equals_sacrebleu_command_line(tmp_path):
    refs = [r[:1] for r in REFS_2]
    write_eval_files(tmp_path / "a", SOURCES, HYPS_A, refs)
    write_eval_files(tmp_path / "b", SOURCES, HYPS_B, refs)
    result = paired_bootstrap(HYPS_A, HYPS_B, refs, names=("a", "b"))
    text = run_sacrebleu(
        [
            *stream_files(tmp_path, tmp_path / "a", 1),
            "-i",
            str(tmp_path / "a" / HYP_FILE),
            str(tmp_path / "b" / HYP_FILE),
            "-m",
            "bleu",
            "chrf",
            "ter",
            "--paired-bs",
            "-w",
            "4",
            "-f",
            "text",
        ],
        tmp_path,
    )
    p_values = [float(p) for p in re.findall(r"\(p = ([0-9.]+)\)", text)]
    assert p_values == [round(result[k]["system"]["p_value"], 4) for k in ("bleu", "chrf", "ter")]
    system_row = next(
        line
        for line in text.splitlines()
        if (tmp_path / "b" / HYP_FILE).name in line and "Baseline" not in line
    )
    numbers = [float(x) for x in re.findall(r"[0-9]+\.[0-9]+", system_row)]
    fields = ("score", "mean", "ci")
    expected = [round(result[k]["system"][f], 4) for k in ("bleu", "chrf", "ter") for f in fields]
    assert numbers == pytest.approx(expected, abs=1.5e-4)
    assert result["bleu"]["signature"] == (
        f"nrefs:1|bs:1000|seed:12345|case:mixed|eff:no|tok:13a|smooth:exp|version:{sacrebleu.__version__}"
    )
    assert result["bleu"]["baseline"]["score"] == pytest.approx(corpus_scores(HYPS_A, refs)["bleu"])


def test_paired_bootstrap_needs_the_same_sentences(tmp_path):
    with pytest.raises(UserError, match="reference lists"):
        paired_bootstrap(HYPS_A, HYPS_B[:-1], REFS_2)
    write_eval_files(tmp_path / "a", SOURCES, HYPS_A, REFS_2)
    write_eval_files(tmp_path / "b", SOURCES, HYPS_B, REFS_2)
    write_eval_files(tmp_path / "c", SOURCES[::-1], HYPS_B, REFS_2)
    compared = compare_eval_dirs(tmp_path / "a", tmp_path / "b", n_samples=100)
    direct = paired_bootstrap(HYPS_A, HYPS_B, REFS_2, n_samples=100)
    assert compared["bleu"]["system"] == direct["bleu"]["system"]
    assert compared["baseline_name"] == str(tmp_path / "a")
    with pytest.raises(UserError, match="same split"):
        compare_eval_dirs(tmp_path / "a", tmp_path / "c")


# ----- eval files -----


def test_eval_files_round_trip(tmp_path):
    refs = [["c'est l'été !", "été"], ["x"], ["y", "z", "w"]]
    hyps = ["", "  deux  espaces ", "é"]
    write_eval_files(tmp_path, ["a", "b", "c"], hyps, refs)
    back = read_eval_files(tmp_path)
    assert (back.sources, back.hyps, back.refs) == (["a", "b", "c"], hyps, refs)
    assert (tmp_path / HYP_FILE).read_text(encoding="utf-8") == "\n  deux  espaces \né\n"
    assert "c'est l'été" in (tmp_path / REFS_FILE).read_text(encoding="utf-8")


def test_eval_file_errors(tmp_path):
    with pytest.raises(ValueError, match="line break"):
        write_eval_files(tmp_path, ["a"], ["two\nlines"], [["r"]])
    write_eval_files(tmp_path, ["a", "b"], ["x", "y"], [["r"], ["s"]])
    (tmp_path / SRC_FILE).write_text("a\n", encoding="utf-8")
    with pytest.raises(UserError, match="must match"):
        read_eval_files(tmp_path)
    with pytest.raises(UserError, match="does not exist"):
        read_eval_files(tmp_path / "missing")


# ----- `attn-mt eval` on a trained run -----


def test_eval_finds_the_trained_corpus_checks_compare_first_and_prints_the_bootstrap(
    tmp_path, monkeypatch, capsys
):
    corpus = write_corpus(tmp_path / "reverse.txt", n=120)
    other = write_corpus(tmp_path / "other.txt", n=120, seed=1)  # other pairs: other vocabulary ids
    cfg = load_config(TINY, ["data.valid_size=8", "data.test_size=8", "train.epochs=1", "train.threads=1"])
    threads = torch.get_num_threads()
    try:
        train(cfg, tmp_path / "run", data_path=str(corpus), quiet=True, device="cpu")
    finally:
        torch.set_num_threads(threads)
    run = tmp_path / "run"
    monkeypatch.setenv("ATTN_MT_DATA", str(other))  # the trained corpus, named in data_report.json, wins

    with pytest.raises(UserError, match="--compare .*nowhere: run directory not found"):
        run_eval(run, "test", None, 0, tmp_path / "nowhere", "best", None, "cpu")
    assert not (run / "eval").exists(), "a bad --compare must fail before anything is translated"
    with pytest.raises(UserError, match=f"trained on {re.escape(str(corpus))}: pass --data"):
        run_eval(run, "test", None, 0, None, "best", str(other), "cpu")

    with pytest.raises(UserError, match="--length-penalty must be from 0 to 10, got -1"):
        run_eval(run, "test", None, 0, None, "best", None, "cpu", -1.0)
    raw = run_eval(run, "test", None, 0, None, "best", None, "cpu", 0.0)
    longer = run_eval(run, "test", None, 0, None, "best", None, "cpu", 5.0)
    assert (raw["length_penalty"], longer["length_penalty"]) == (0.0, 5.0)
    assert longer["bleu_detail"]["sys_len"] >= raw["bleu_detail"]["sys_len"]
    scores = run_eval(run, "test", None, 0, None, "best", None, "cpu")
    assert scores["length_penalty"] == cfg.decode.length_penalty
    files = read_eval_files(run / "eval" / "test")
    assert len(files.hyps) == 8 and scores["bleu"] == corpus_scores(files.hyps, files.refs)["bleu"]
    shutil.copytree(run, tmp_path / "again", ignore=shutil.ignore_patterns("eval"))
    capsys.readouterr()
    again = run_eval(tmp_path / "again", "test", None, 0, run, "best", None, "cpu")
    table = capsys.readouterr().out
    assert f"paired bootstrap (1000 resamples), baseline {run} -> this run:" in table
    for key, label in (("bleu", "BLEU"), ("chrf", "chrF"), ("ter", "TER")):
        p_value = again["compare"][key]["system"]["p_value"]
        line = rf"^    {label} +{scores[key]:.2f} -> +{again[key]:.2f} +p = {p_value:.4f}$"
        assert re.search(line, table, re.M), table
