"""Lines of running text translated sentence by sentence (decoding/lines.py): `attn-mt translate` joins
the sentences' own translations line for line, keeps blank lines and spaces, gives n-best entries and
attention dumps per sentence, cuts a sentence too long for the model at its clause punctuation, and
with --no-split prints what each line gives taken whole."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

import attn_mt
from attn_mt.decoding.engines import translator_for
from attn_mt.decoding.lines import translate_lines
from attn_mt.decoding.translator import Translator
from attn_mt.run.open import open_model

SENTENCES = ["Alpha bravo.", "Charlie delta echo.", "Golf hotel alpha bravo."]
PARAGRAPH = "Alpha bravo. Charlie delta echo.  Golf hotel alpha bravo."
LINES = [PARAGRAPH, "", "  Alpha bravo.  ", "Golf hotel alpha bravo."]


@pytest.fixture(scope="module")
def run_dir(tiny_runs) -> Path:
    return tiny_runs.gru_bahdanau


@pytest.fixture(scope="module")
def engine(run_dir) -> Translator:
    return translator_for(open_model(run_dir, device="cpu"))


def _translate(run_cli, run_dir: Path, lines: list[str], tmp_path: Path, *options: str):
    source = tmp_path / "lines.txt"
    source.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    done = run_cli("translate", str(run_dir), "--input", str(source), "--device", "cpu", *options)
    assert done.returncode == 0, done.stderr
    return done


def test_a_line_of_sentences_is_their_own_translations_joined_line_for_line(
    engine, run_dir, run_cli, tmp_path
):
    alone = [t.text for t in engine.translate(SENTENCES)]
    printed = _translate(run_cli, run_dir, LINES, tmp_path).stdout
    assert printed == (
        f"{alone[0]} {alone[1]}  {alone[2]}\n"  # the line's own spacing between its sentences
        "\n"  # a blank line stays blank
        f"  {alone[0]}  \n"  # leading and trailing spaces kept
        f"{alone[2]}\n"
    )
    # outputs that differ make the order checkable; the tiny GRU of some seeds gives two sentences one output
    assert len({*alone}) >= 2 and all(alone)


def test_no_split_prints_what_each_whole_line_gives(engine, run_dir, run_cli, tmp_path):
    whole = [t.text for t in engine.translate(LINES)]  # what translate printed before it split lines
    printed = _translate(run_cli, run_dir, LINES, tmp_path, "--no-split").stdout
    assert printed == "".join(text + "\n" for text in whole)
    assert printed != _translate(run_cli, run_dir, LINES, tmp_path).stdout


def test_nbest_entries_join_the_sentences_outputs_and_add_their_scores(engine, run_dir, run_cli, tmp_path):
    alone = engine.translate(SENTENCES, beam_size=2, nbest=2)
    printed = _translate(run_cli, run_dir, [PARAGRAPH, ""], tmp_path, "--beam", "2", "--nbest", "2").stdout
    expected = []
    for k in range(2):
        text = f"{alone[0].outputs[k]} {alone[1].outputs[k]}  {alone[2].outputs[k]}"
        score = sum(t.hypotheses[k].norm_score for t in alone)
        expected.append(f"0 ||| {text} ||| {score:.4f}")
    assert printed.splitlines() == [*expected, "1 |||  ||| 0.0000", "1 |||  ||| 0.0000"]


def test_attention_dumps_are_written_per_sentence(engine, run_dir, run_cli, tmp_path):
    dumps = tmp_path / "attention"
    _translate(run_cli, run_dir, [PARAGRAPH, "Alpha bravo."], tmp_path, "--attention-dir", str(dumps))
    names = sorted(p.stem for p in dumps.glob("*.json"))
    assert names == ["0000-1", "0000-2", "0000-3", "0001"]
    for name, sentence in zip(names, [*SENTENCES, "Alpha bravo."], strict=True):
        summary = json.loads((dumps / f"{name}.json").read_text(encoding="utf-8"))
        assert summary["source_tokens"][:-1] == engine.translate([sentence])[0].source_tokens


def test_a_sentence_longer_than_the_model_reads_is_cut_at_clause_punctuation(engine):
    cfg = replace(engine.cfg, data=replace(engine.cfg.data, max_len=2))  # the model reads 8 tokens
    short = Translator(engine.model, engine.src_vocab, engine.tgt_vocab, cfg)
    line = "Alpha bravo charlie, delta echo foxtrot golf; hotel alpha bravo charlie delta."  # 16 tokens
    (result,) = translate_lines(short, [line])
    assert [t.source for t in result.sentences] == [  # 5, 6 and 7 tokens with <eos>; no two fit together
        "Alpha bravo charlie,",
        "delta echo foxtrot golf;",
        "hotel alpha bravo charlie delta.",
    ]
    assert result.warnings[0].startswith("'Alpha bravo charlie, delta echo foxtrot'... is longer than")
    assert "translated in parts cut at its clause punctuation" in result.warnings[0]
    assert result.text == " ".join(t.text for t in short.translate([t.source for t in result.sentences]))
    (whole,) = translate_lines(short, [line], split=False)  # not split: read up to the limit, and said so
    assert any(w.startswith("source cut to 8 tokens") for w in whole.warnings)


def test_crlf_input_gives_lf_output_at_every_entry_point(engine, run_dir, run_cli, tmp_path):
    """The \\r of a CRLF line end is dropped by translate (a file), the Python API and serve's planning."""
    alone = [t.text for t in engine.translate(SENTENCES)]
    source = tmp_path / "crlf.txt"
    source.write_bytes(f"{PARAGRAPH}\r\n\r\n{SENTENCES[0]}\r\n".encode())
    done = run_cli("translate", str(run_dir), "--input", str(source), "--device", "cpu")
    assert done.stdout == f"{alone[0]} {alone[1]}  {alone[2]}\n\n{alone[0]}\n"
    model = attn_mt.load(run_dir)
    assert model.translate([f"{SENTENCES[0]}\r\n{SENTENCES[1]}\r"]) == [f"{alone[0]}\n{alone[1]}"]
    assert model.translate([f"{SENTENCES[1]}\r"], split=False) == [alone[1]]


def test_the_python_api_splits_as_translate_does(engine, run_dir, run_cli, tmp_path):
    model = attn_mt.load(run_dir)
    printed = _translate(run_cli, run_dir, LINES, tmp_path).stdout
    assert model.translate(LINES) == printed.splitlines()
    assert model.translate(LINES, split=False) == [t.text for t in engine.translate(LINES)]
    with pytest.raises(TypeError, match="give a list of texts"):
        model.translate(PARAGRAPH)
