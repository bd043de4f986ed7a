"""Scoring a given translation (decoding/scoring.py, `attn-mt score`): the model's own output scores what
the search reported, for both models and both engines; a hand computation of one pair's token
log-probabilities from the model's full forward pass; and the command's outputs and refusals."""

from __future__ import annotations

import json
import math
import re
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from support.synthetic import reverse_pairs
from support.tolerances import decoding_terms, float32_approx

import attn_mt
from attn_mt.decoding.engine import Engine
from attn_mt.decoding.engines import translator_for
from attn_mt.decoding.outputs import gnmt_length_penalty
from attn_mt.decoding.scoring import EMPTY_TARGET_NOTE, score_with
from attn_mt.errors import UserError
from attn_mt.run.open import open_model
from attn_mt.serving.schemas import NOT_BLANK

SOURCES = [en for en, _ in reverse_pairs(16, seed=11)]
SCORE_TERMS = decoding_terms(steps=23, widest=32, keys_or_vocab=300)  # sums of ~20 float32 log-probs


@pytest.fixture(scope="module")
def run_paths(subword_run: Path, subword_folder: Path, tiny_runs) -> dict[str, Path]:
    """Where each engine's model lies."""
    return {
        "gru": tiny_runs.gru_bahdanau,
        "transformer": tiny_runs.transformer,
        "subword": subword_run,
        "ctranslate2": subword_folder,
    }


@pytest.fixture(scope="module")
def engines(subword_run: Path, subword_folder: Path, tiny_runs) -> dict[str, Engine]:
    """torch over the tiny GRU and Transformer runs and the subword run; CTranslate2 over its export."""
    return {
        "gru": translator_for(open_model(tiny_runs.gru_bahdanau, device="cpu")),
        "transformer": translator_for(open_model(tiny_runs.transformer, device="cpu")),
        "subword": translator_for(open_model(subword_run, device="cpu")),
        "ctranslate2": translator_for(open_model(subword_folder, device="cpu")),
    }


@pytest.mark.parametrize("name", ["gru", "transformer", "subword", "ctranslate2"])
@pytest.mark.parametrize("beam", [1, 3])
def test_the_models_own_output_scores_what_the_search_reported(engines, name, beam):
    engine = engines[name]
    found = engine.translate(SOURCES, beam_size=beam)
    outputs = [t.text for t in found]
    scored = score_with(engine, SOURCES, outputs)
    for translation, score in zip(found, scored, strict=True):
        best = translation.hypotheses[0]
        assert score.target_tokens == engine.tgt_vocab.decode(best.tokens)
        assert len(score.token_log_probs) == len(best.tokens) + 1
        assert score.log_prob == pytest.approx(best.score, abs=1e-5)
        if beam > 1:  # greedy search ranks nothing: its norm_score is its raw score
            assert score.score == pytest.approx(best.norm_score, abs=1e-5)


def test_token_log_probs_equal_the_full_forward_pass_by_hand(engines):
    engine = engines["transformer"]
    source, target = SOURCES[0], engine.translate([SOURCES[1]])[0].text  # another sentence's output
    (scored,) = score_with(engine, [source], [target])
    src_ids, _ = engine.source_ids(scored.source_tokens)
    out = engine.tgt_vocab.encode(scored.target_tokens)
    bos, eos = engine.tgt_vocab.bos_id, engine.tgt_vocab.eos_id
    with torch.no_grad():
        logits = engine.model(
            torch.tensor([src_ids]), torch.tensor([len(src_ids)]), torch.tensor([[bos, *out]])
        )  # (1, T, V)
    expected = logits[0].log_softmax(-1).gather(1, torch.tensor([[t] for t in [*out, eos]])).squeeze(1)
    assert scored.token_log_probs == float32_approx(expected.tolist(), terms=SCORE_TERMS)
    alpha = engine.cfg.decode.length_penalty
    assert scored.log_prob == pytest.approx(math.fsum(scored.token_log_probs), abs=1e-9)
    assert scored.score == pytest.approx(scored.log_prob / gnmt_length_penalty(len(out) + 1, alpha))


def test_unknown_target_words_are_scored_as_unk_and_named(engines):
    engine = engines["gru"]
    (scored,) = score_with(engine, [SOURCES[0]], ["zzyzx qqq"])
    assert scored.target_tokens == ["<unk>", "<unk>"]
    assert scored.warnings == ["unknown target tokens, scored as <unk>: zzyzx qqq"]
    assert scored.log_prob < 0 and all(p <= 0 for p in scored.token_log_probs)


def test_a_likelier_target_scores_higher_and_the_length_penalty_is_applied(engines):
    engine = engines["transformer"]
    own = engine.translate([SOURCES[2]], beam_size=1)[0].text
    worse = " ".join(reversed(own.split()))
    if worse == own:
        worse = own + " " + own
    mine, other = score_with(engine, [SOURCES[2]] * 2, [own, worse])
    assert mine.log_prob > other.log_prob
    (raw,) = score_with(engine, [SOURCES[2]], [own], length_penalty=0.0)
    assert raw.score == raw.log_prob == pytest.approx(mine.log_prob)


def test_mismatched_pairs_and_blank_sources_are_refused_naming_them(engines):
    engine = engines["gru"]
    with pytest.raises(UserError, match="2 sources but 1 targets"):
        score_with(engine, SOURCES[:2], ["a"])
    with pytest.raises(UserError, match=r"pair 1 \(source\), 3 \(source\): a blank source sentence"):
        score_with(engine, [" ", SOURCES[0], "\t"], ["x", "  ", "y"])


@pytest.mark.parametrize("name", ["gru", "transformer", "subword", "ctranslate2"])
def test_an_empty_target_scores_eos_alone_as_the_search_scores_an_empty_output(engines, run_paths, name):
    engine = engines[name]
    at_once = replace(engine.cfg, decode=replace(engine.cfg.decode, max_len_a=0.0, max_len_b=1))
    forced_empty = translator_for(open_model(run_paths[name], device="cpu"), at_once)
    found = forced_empty.translate(SOURCES[:4], beam_size=1)  # a limit of one token: <eos> at once
    assert all(t.hypotheses[0].tokens == [] for t in found)
    for target in ("", "   "):
        scored = score_with(engine, SOURCES[:4], [target] * 4)
        for translation, pair in zip(found, scored, strict=True):
            assert pair.target_tokens == [] and len(pair.token_log_probs) == 1
            assert pair.log_prob == pytest.approx(translation.hypotheses[0].score, abs=1e-5)
            assert pair.score == pair.log_prob  # lp(1) = 1 whatever alpha is
            assert EMPTY_TARGET_NOTE in pair.warnings


def _write(path: Path, lines: list[str]) -> Path:
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


def test_cli_writes_json_lines_and_tsv_that_match_the_search(tiny_runs, run_cli, tmp_path):
    run_dir = tiny_runs.transformer
    engine = translator_for(open_model(run_dir, device="cpu"))
    found = engine.translate(SOURCES[:5], beam_size=2)
    source = _write(tmp_path / "src.en", SOURCES[:5])
    target = _write(tmp_path / "tgt.fr", [t.text for t in found])
    done = run_cli("score", str(run_dir), "--source", str(source), "--target", str(target))
    assert done.returncode == 0, done.stderr
    records = [json.loads(line) for line in done.stdout.splitlines()]
    assert [r["line"] for r in records] == [1, 2, 3, 4, 5]
    for record, translation in zip(records, found, strict=True):
        assert record["source"] == translation.source and record["target"] == translation.text
        assert record["score"] == pytest.approx(translation.hypotheses[0].norm_score, abs=1e-5)
        assert record["log_prob"] == pytest.approx(translation.hypotheses[0].score, abs=1e-5)
        assert len(record["token_log_probs"]) == len(record["target_tokens"]) + 1
    tsv = run_cli("score", str(run_dir), "--source", str(source), "--target", str(target), "--format", "tsv")
    assert tsv.returncode == 0, tsv.stderr
    rows = [line.split("\t") for line in tsv.stdout.splitlines()]
    assert rows[0] == ["log_prob", "score", "token_log_probs"]
    assert [float(r[1]) for r in rows[1:]] == pytest.approx([r["score"] for r in records], abs=1e-4)
    assert [len(r[2].split()) for r in rows[1:]] == [len(r["token_log_probs"]) for r in records]


def test_cli_refuses_bad_inputs_with_a_clear_message(tiny_runs, run_cli, tmp_path):
    run_dir = str(tiny_runs.gru_bahdanau)
    source = _write(tmp_path / "src.en", SOURCES[:3])
    short = _write(tmp_path / "short.fr", ["a", "b"])
    blank = _write(tmp_path / "blank.en", [SOURCES[0], "", SOURCES[2]])
    latin1 = tmp_path / "latin1.fr"
    latin1.write_bytes("a\nd\xe9j\xe0\nc\n".encode("latin-1"))
    cases = [
        (source, short, "has 3 lines, --target " + str(short) + " has 2"),
        (blank, short.with_name("three.fr"), "nothing to score on line 2 (source): a blank source sentence"),
        (source, latin1, "line 2 is not UTF-8"),
        (source, tmp_path / "missing.fr", "no such file"),
    ]
    _write(tmp_path / "three.fr", ["a", "b", "c"])
    for source_file, target, message in cases:
        done = run_cli("score", run_dir, "--source", str(source_file), "--target", str(target))
        assert done.returncode == 2 and message in done.stderr, done.stderr
        assert "Traceback" not in done.stderr


def test_cli_scores_a_blank_target_line_as_eos_alone_with_a_warning(tiny_runs, run_cli, tmp_path):
    run_dir = tiny_runs.transformer
    engine = translator_for(open_model(run_dir, device="cpu"))
    source = _write(tmp_path / "src.en", SOURCES[:3])
    target = _write(tmp_path / "gap.fr", ["un deux", "", "trois"])
    done = run_cli("score", str(run_dir), "--source", str(source), "--target", str(target))
    assert done.returncode == 0, done.stderr
    records = [json.loads(line) for line in done.stdout.splitlines()]
    (alone,) = score_with(engine, [SOURCES[1]], [""])
    assert records[1]["target_tokens"] == [] and records[1]["log_prob"] == pytest.approx(alone.log_prob)
    assert len(records[1]["token_log_probs"]) == 1 and len(records[0]["token_log_probs"]) > 1
    assert f"line 2: {EMPTY_TARGET_NOTE}" in done.stderr


def test_cli_split_scores_sentence_pairs_and_adds_them_up(tiny_runs, run_cli, tmp_path):
    run_dir = tiny_runs.gru_bahdanau
    engine = translator_for(open_model(run_dir, device="cpu"))
    sentences = ["Alpha bravo.", "Charlie delta echo."]
    outputs = [t.text for t in engine.translate(sentences, beam_size=1)]
    alone = score_with(engine, sentences, outputs)
    source = _write(tmp_path / "src.en", [" ".join(sentences), " ".join(sentences)])
    target = _write(tmp_path / "tgt.fr", [" ".join(outputs), outputs[0]])  # line 2: 2 sentences, 1 target
    done = run_cli("score", str(run_dir), "--source", str(source), "--target", str(target))  # split
    assert done.returncode == 0, done.stderr
    split, whole = (json.loads(line) for line in done.stdout.splitlines())
    assert split["log_prob"] == pytest.approx(alone[0].log_prob + alone[1].log_prob, abs=1e-5)
    assert split["score"] == pytest.approx(alone[0].score + alone[1].score, abs=1e-5)
    assert split["target_tokens"] == [*alone[0].target_tokens, "<eos>", *alone[1].target_tokens]
    assert len(split["token_log_probs"]) == len(split["target_tokens"]) + 1
    assert "line 2: the source has 2 sentence(s) and the target 1: scored as one sentence each" in done.stderr
    (kept,) = score_with(engine, [" ".join(sentences)], [outputs[0]])
    assert whole["log_prob"] == pytest.approx(kept.log_prob, abs=1e-5)
    unsplit = run_cli("score", str(run_dir), "--source", str(source), "--target", str(target), "--no-split")
    assert json.loads(unsplit.stdout.splitlines()[0])["log_prob"] != pytest.approx(
        split["log_prob"], abs=1e-3
    )


def test_a_line_of_sentences_scores_what_translate_reported_for_it(tiny_runs, run_cli, tmp_path):
    """translate splits "Golf alpha echo. Hotel delta." and adds its sentences' scores; score (the command
    and the Python API) splits it the same way: the line's own translation scores what translate printed."""
    run_dir = tiny_runs.transformer
    line = "Golf alpha echo. Hotel delta."
    printed = run_cli("translate", str(run_dir), line, "--beam", "2", "--nbest", "2", "--device", "cpu")
    assert printed.returncode == 0, printed.stderr
    _, text, reported = printed.stdout.splitlines()[0].split(" ||| ")
    source, target = _write(tmp_path / "src.en", [line]), _write(tmp_path / "tgt.fr", [text])
    done = run_cli("score", str(run_dir), "--source", str(source), "--target", str(target))
    assert done.returncode == 0, done.stderr
    (record,) = (json.loads(row) for row in done.stdout.splitlines())
    assert record["score"] == pytest.approx(float(reported), abs=1e-4)
    assert record["target_tokens"].count("<eos>") == 1  # two sentences, scored apart
    (api,) = attn_mt.load(run_dir).score([line], [text])
    assert api.score == pytest.approx(record["score"], abs=1e-6)
    (whole,) = attn_mt.load(run_dir).score([line], [text], split=False)
    assert abs(whole.score - api.score) > 1e-3  # one long sentence: another number


def _pharaoh(line: str) -> list[tuple[int, int]]:
    """`0-1 2-0` as [(0, 1), (2, 0)]."""
    return [(int(i), int(j)) for i, j in (pair.split("-") for pair in line.split())]


@pytest.mark.parametrize("name", ["gru", "transformer", "subword", "ctranslate2"])
def test_score_alignments_of_the_models_own_greedy_output_are_translates(run_paths, run_cli, tmp_path, name):
    """`score --alignments` along the model's own greedy output writes the pairs `translate --alignments`
    wrote for it (one function aligns both), a line of two sentences included; along another target the
    pairs are valid: each target word once, every source index within the source's words."""
    run_dir = str(run_paths[name])
    lines = ["golf alpha echo . hotel foxtrot .", "charlie bravo .", "delta echo golf hotel ."]
    if name in ("subword", "ctranslate2"):
        lines = ["Golf alpha echo. Hotel foxtrot.", "Charlie bravo.", "Delta echo golf hotel."]
    told = tmp_path / "translate.align"
    printed = run_cli(
        "translate", run_dir, *lines, "--beam", "1", "--alignments", str(told), "--device", "cpu"
    )
    assert printed.returncode == 0, printed.stderr
    outputs = printed.stdout.splitlines()
    source, target = _write(tmp_path / "src.en", lines), _write(tmp_path / "tgt.fr", outputs)
    scored = tmp_path / "score.align"
    done = run_cli("score", run_dir, "-s", str(source), "-t", str(target), "--alignments", str(scored))
    assert done.returncode == 0, done.stderr
    api = attn_mt.load(run_dir).score(lines, outputs, alignments=True)
    assert [s.alignment.pharaoh() + "\n" for s in api] == scored.read_text(encoding="utf-8").splitlines(True)
    # An output that lost a sentence's full stop (a tiny model's runaway) splits into fewer sentences than
    # its source, so score takes the pair whole, with a note (docs/translating.md), where translate aligned
    # each sentence: only the lines whose sentences pair up must give translate's alignments.
    whole = [any("scored as one sentence each" in w for w in s.warnings) for s in api]
    assert sum(whole) < len(lines), outputs
    for pairs, wrote, taken_whole in zip(
        api, told.read_text(encoding="utf-8").splitlines(True), whole, strict=True
    ):
        if not taken_whole:
            assert pairs.alignment.pharaoh() + "\n" == wrote
    assert any(_pharaoh(line) for line in scored.read_text(encoding="utf-8").splitlines())
    others = ["un deux trois quatre cinq six sept", "a b", "x"]
    other_target = _write(tmp_path / "other.fr", others)
    done = run_cli("score", run_dir, "-s", str(source), "-t", str(other_target), "--alignments", str(scored))
    assert done.returncode == 0, done.stderr
    written = scored.read_text(encoding="utf-8").splitlines()
    assert len(written) == len(lines)
    for line, other, pairs in zip(lines, others, written, strict=True):
        found = _pharaoh(pairs)
        assert sorted(j for _, j in found) == list(range(len(other.split())))
        assert all(0 <= i < len(line.split()) for i, _ in found)


def test_score_with_alignments_joins_a_lines_sentences_and_leaves_them_out_unasked(engines):
    from attn_mt.decoding.scoring import score_lines

    engine = engines["subword"]
    source, target = "Golf alpha. Hotel.", "un deux trois. quatre cinq."
    (plain,) = score_lines(engine, [source], [target])
    assert plain.alignment is None
    (line,) = score_lines(engine, [source], [target], alignments=True)
    parts = score_with(engine, ["Golf alpha.", "Hotel."], ["un deux trois.", "quatre cinq."], alignments=True)
    assert line.alignment is not None and all(p.alignment is not None for p in parts)
    first = parts[0].alignment.pairs
    assert line.alignment.pairs == first + [(i + 2, j + 3) for i, j in parts[1].alignment.pairs]
    assert line.alignment.target_words == target.split()


def test_the_score_schemas_idea_of_blank_is_the_servers():
    """POST /score's pattern refuses exactly the texts str.strip leaves empty (U+001C-U+001F and U+0085
    too, which JSON Schema's \\S counts as text), so a schema-valid pair never meets the blank check."""
    assert "\\s" not in NOT_BLANK.lower()  # every character named: JSON Schema, Rust and Python agree on it
    pattern = re.compile(NOT_BLANK)
    refused = {chr(c) for c in range(0x110000) if not pattern.fullmatch(chr(c))}
    assert refused == {chr(c) for c in range(0x110000) if not chr(c).strip()}
