"""A forced target prefix and sampling in greedy and beam search: on the toy and tiny real models, by hand
on fixed logits, and through the torch engine and the translate command on a trained run."""

from __future__ import annotations

import math
import re
from dataclasses import replace

import pytest
import torch
from support.search_fakes import (
    BOS,
    EOS,
    REAL_KINDS,
    REAL_LIMITS,
    TOY_MODELS,
    TOY_SENTENCES,
    ToyAttentionModel,
    tiny_real_model,
    toy_batch,
)
from support.tolerances import float32_approx

from attn_mt.decoding.engines import translator_for
from attn_mt.decoding.lines import translate_lines
from attn_mt.decoding.outputs import Sampling
from attn_mt.decoding.search import (
    Sampler,
    beam_search,
    forced_log_probs,
    greedy_pick,
    greedy_search,
    sample_pick,
)
from attn_mt.decoding.settings import DecodeSettings
from attn_mt.errors import UserError
from attn_mt.run.open import open_model

PREFIXES = [[5], [], [7, 8], [3, 3], []]  # one per TOY_SENTENCES entry; [] is no prefix


def models():
    """The toy models and the tiny untrained real ones, with the search limits each is decoded under."""
    for kind, settings in TOY_MODELS.items():
        yield kind, ToyAttentionModel(**settings), {}
    for kind in REAL_KINDS:
        yield kind, tiny_real_model(kind), REAL_LIMITS


@pytest.mark.parametrize("kind", [*TOY_MODELS, *REAL_KINDS])
def test_a_prefix_equal_to_the_greedy_output_gives_it_back_exactly(kind):
    model, limits = next((m, lim) for k, m, lim in models() if k == kind)
    src, lens = toy_batch()
    free = greedy_search(model, src, lens, bos_id=BOS, eos_id=EOS, need_attention=True, **limits)
    forced = greedy_search(
        model,
        src,
        lens,
        bos_id=BOS,
        eos_id=EOS,
        need_attention=True,
        prefix=[h.tokens for h in free],
        **limits,
    )
    for a, b in zip(free, forced, strict=True):
        assert (b.tokens, b.score, b.norm_score) == (a.tokens, a.score, a.norm_score)
        assert torch.equal(a.attention, b.attention)
    # A part of it also gives back the whole output (both without attention: its kernels may round otherwise).
    plain = greedy_search(model, src, lens, bos_id=BOS, eos_id=EOS, **limits)
    halves = [h.tokens[: len(h.tokens) // 2] for h in plain]
    again = greedy_search(model, src, lens, bos_id=BOS, eos_id=EOS, prefix=halves, **limits)
    assert [(h.tokens, h.score) for h in again] == [(h.tokens, h.score) for h in plain]


@pytest.mark.parametrize("kind", [*TOY_MODELS, *REAL_KINDS])
def test_outputs_start_with_the_prefix_and_score_it(kind):
    model, limits = next((m, lim) for k, m, lim in models() if k == kind)
    src, lens = toy_batch()
    greedy = greedy_search(model, src, lens, bos_id=BOS, eos_id=EOS, prefix=PREFIXES, **limits)
    beams = beam_search(
        model, src, lens, beam_size=3, nbest=3, bos_id=BOS, eos_id=EOS, prefix=PREFIXES, **limits
    )
    one = beam_search(model, src, lens, beam_size=1, bos_id=BOS, eos_id=EOS, prefix=PREFIXES, **limits)
    for i, prefix in enumerate(PREFIXES):
        assert greedy[i].tokens[: len(prefix)] == prefix
        assert len(beams[i]) == 3 and all(h.tokens[: len(prefix)] == prefix for h in beams[i])
        assert one[i][0].tokens == greedy[i].tokens  # beam 1 is greedy, prefix or not
        for h in [greedy[i], *beams[i]]:
            expected = sum(
                forced_log_probs(model, src[i : i + 1], lens[i : i + 1], [h.tokens], bos_id=BOS, eos_id=EOS)[
                    0
                ]
            )
            assert math.isfinite(h.score)
            assert h.score == float32_approx(expected, terms=200)


def test_prefixed_batches_equal_one_sentence_at_a_time():
    model = ToyAttentionModel(heads=2, layers=2)
    src, lens = toy_batch()
    beams = beam_search(model, src, lens, beam_size=2, nbest=2, bos_id=BOS, eos_id=EOS, prefix=PREFIXES)
    for i, sentence in enumerate(TOY_SENTENCES):
        one_src, one_len = toy_batch([sentence])
        (alone,) = beam_search(
            model, one_src, one_len, beam_size=2, nbest=2, bos_id=BOS, eos_id=EOS, prefix=[PREFIXES[i]]
        )
        assert [h.tokens for h in alone] == [h.tokens for h in beams[i]]


def test_empty_prefixes_are_no_prefix_and_bad_ones_are_refused():
    model = ToyAttentionModel()
    src, lens = toy_batch()
    free = greedy_search(model, src, lens, bos_id=BOS, eos_id=EOS)
    empty = greedy_search(model, src, lens, bos_id=BOS, eos_id=EOS, prefix=[[] for _ in TOY_SENTENCES])
    assert [(h.tokens, h.score) for h in empty] == [(h.tokens, h.score) for h in free]
    # Sentence 4 has 2 source tokens: floor(1.5 * 2 + 10) = 13 output tokens with <eos>; 12 may be forced.
    fits = [[], [], [], [3] * 12, []]
    assert greedy_search(model, src, lens, bos_id=BOS, eos_id=EOS, prefix=fits)[3].tokens == [3] * 12
    with pytest.raises(
        UserError, match="sentence 4's prefix has 13 tokens, but its output may hold at most 12"
    ):
        greedy_search(model, src, lens, bos_id=BOS, eos_id=EOS, prefix=[[], [], [], [3] * 13, []])
    with pytest.raises(ValueError, match="holds <eos>"):
        beam_search(model, src, lens, beam_size=2, bos_id=BOS, eos_id=EOS, prefix=[[3, EOS], [], [], [], []])
    with pytest.raises(ValueError, match="2 prefixes for 5 sentences"):
        greedy_search(model, src, lens, bos_id=BOS, eos_id=EOS, prefix=[[3], [4]])


# ----- sampling -----


def test_sample_pick_by_hand():
    """probs 0.5, 0.3, 0.2 (tokens 0, 1, 2): a draw falls in its token's share of the kept mass."""
    logits = torch.tensor([[0.5, 0.3, 0.2]]).log().repeat(4, 1)  # (4, 3)
    draws = torch.tensor([0.1, 0.55, 0.85, 0.999])
    every = Sampler(1.0, 0, 1.0, (0,) * 4)
    scores, tokens = sample_pick(logits, None, 2, every, draws)
    assert tokens.tolist() == [0, 1, 2, 2]
    assert scores.tolist() == pytest.approx(
        [math.log(0.5), math.log(0.3), math.log(0.2), math.log(0.2)], abs=1e-6
    )
    # Top-2 keeps 0.5 and 0.3: a draw of 0.55 is 0.44 of 0.8, still token 0; 0.85 -> 0.68, token 1.
    assert sample_pick(logits, None, 2, Sampler(1.0, 2, 1.0, (0,) * 4), draws)[1].tolist() == [0, 0, 1, 1]
    # Top-p 0.6 keeps the fewest tokens reaching 0.6: 0.5 and 0.3.
    assert sample_pick(logits, None, 2, Sampler(1.0, 0, 0.6, (0,) * 4), draws)[1].tolist() == [0, 0, 1, 1]
    # Top-p 0.5 keeps token 0 alone; a rising temperature flattens: T = 1000 is nearly uniform.
    assert sample_pick(logits, None, 2, Sampler(1.0, 0, 0.5, (0,) * 4), draws)[1].tolist() == [0, 0, 0, 0]
    assert sample_pick(logits, None, 2, Sampler(1000.0, 0, 1.0, (0,) * 4), draws)[1].tolist() == [0, 1, 2, 2]
    # The smallest temperature there is takes the most probable token, as greedy search does.
    assert sample_pick(logits, None, 2, Sampler(5e-324, 0, 1.0, (0,) * 4), draws)[1].tolist() == [0, 0, 0, 0]
    # At the length limit only <eos> (id 2) may be drawn, scored under the whole distribution.
    at_limit = torch.tensor([True, False, True, False])
    scores, tokens = sample_pick(logits, at_limit, 2, every, draws)
    assert tokens.tolist() == [2, 1, 2, 2] and scores[0].item() == pytest.approx(math.log(0.2), abs=1e-6)


@pytest.mark.parametrize("kind", REAL_KINDS)
def test_top_k_one_is_greedy_and_a_seed_draws_the_same_whatever_the_batch(kind):
    model = tiny_real_model(kind)
    src, lens = toy_batch()
    greedy = greedy_search(model, src, lens, bos_id=BOS, eos_id=EOS, **REAL_LIMITS)
    seeds = tuple(range(10, 15))
    top1 = greedy_search(
        model, src, lens, bos_id=BOS, eos_id=EOS, sampler=Sampler(0.7, 1, 1.0, seeds), **REAL_LIMITS
    )
    assert [(h.tokens, h.score) for h in top1] == [(h.tokens, h.score) for h in greedy]
    sampler = Sampler(1.0, 0, 1.0, seeds)
    drawn = greedy_search(model, src, lens, bos_id=BOS, eos_id=EOS, sampler=sampler, **REAL_LIMITS)
    assert [h.tokens for h in drawn] != [h.tokens for h in greedy]
    for i, sentence in enumerate(TOY_SENTENCES):
        one_src, one_len = toy_batch([sentence])
        (alone,) = greedy_search(
            model,
            one_src,
            one_len,
            bos_id=BOS,
            eos_id=EOS,
            sampler=Sampler(1.0, 0, 1.0, (seeds[i],)),
            **REAL_LIMITS,
        )
        assert alone.tokens == drawn[i].tokens
        assert alone.score == float32_approx(drawn[i].score, terms=200)


def test_sampling_settings_are_checked():
    with pytest.raises(UserError, match="--temperature 0 .* greedy search"):
        Sampling(temperature=0)
    for bad, message in [
        (dict(samples=0), "--sample must be from 1 to 16"),
        (dict(samples=17), "--sample must be from 1 to 16"),  # serve's bound too (attn_mt/limits.py)
        (dict(temperature=-1.0), "--temperature must be a number above 0 and at most 100"),
        (dict(temperature=math.inf), "--temperature must be a number above 0"),
        (dict(temperature=100.5), "--temperature must be a number above 0 and at most 100"),
        (dict(top_k=-1), "--top-k must be 0"),
        (dict(top_k=1 << 21), "--top-k must be 0 \\(every token\\) to 1048576"),
        (dict(top_p=0.0), "--top-p must be above 0"),
        (dict(top_p=1.5), "--top-p must be above 0"),
        (dict(seed=-3), "--seed must be from 0 to 4294967295"),
        (dict(seed=1 << 32), "--seed must be from 0 to 4294967295"),
    ]:
        with pytest.raises(UserError, match=message):
            Sampling(**bad)
    assert Sampling(seed=1).seed_for(["a", "b"], 0) != Sampling(seed=1).seed_for(["a", "b"], 1)
    assert Sampling(seed=1).seed_for(["a", "b"], 0) != Sampling(seed=2).seed_for(["a", "b"], 0)
    assert Sampling(seed=1).seed_for(["a", "b"], 0) == Sampling(seed=1, top_k=3).seed_for(["a", "b"], 0)


def test_no_search_chooses_a_token_it_may_never_output_and_scores_stay_the_models():
    """Token 0 is the most probable (0.5, then 0.3 and 0.2): left out, greedy takes token 1 and sampling
    draws tokens 1 and 2 only, each scored under the whole distribution (log 0.3, log 0.2)."""
    logits = torch.tensor([[0.5, 0.3, 0.2]]).log().repeat(4, 1)  # (4, 3)
    never = torch.tensor([0])
    scores, tokens = greedy_pick(logits.clone(), None, 2, never=never)
    assert tokens.tolist() == [1] * 4 and scores.tolist() == pytest.approx([math.log(0.3)] * 4, abs=1e-6)
    draws = torch.tensor([0.1, 0.55, 0.85, 0.999])  # of the kept 0.3 + 0.2: 0.6 is the border
    scores, tokens = sample_pick(logits.clone(), None, 2, Sampler(1.0, 0, 1.0, (0,) * 4), draws, never=never)
    assert tokens.tolist() == [1, 1, 2, 2]
    assert scores.tolist() == pytest.approx([math.log(0.3)] * 2 + [math.log(0.2)] * 2, abs=1e-6)
    model, (src, lens) = ToyAttentionModel(), toy_batch()
    free = greedy_search(model, src, lens, bos_id=BOS, eos_id=EOS)
    common = {token for h in free for token in h.tokens}
    left_out = tuple(sorted(common, key=lambda t: -sum(h.tokens.count(t) for h in free))[:2])
    ruled = [
        *greedy_search(model, src, lens, bos_id=BOS, eos_id=EOS, never=left_out),
        *(
            h
            for hyps in beam_search(
                model, src, lens, beam_size=3, nbest=3, bos_id=BOS, eos_id=EOS, never=left_out
            )
            for h in hyps
        ),
    ]
    for h in ruled:
        assert not set(left_out) & set(h.tokens)
    for i, h in enumerate(ruled[: len(TOY_SENTENCES)]):  # greedy's, one per sentence
        expected = sum(
            forced_log_probs(model, src[i : i + 1], lens[i : i + 1], [h.tokens], bos_id=BOS, eos_id=EOS)[0]
        )
        assert h.score == float32_approx(expected, terms=200)


# ----- through the engine and the command line, on a trained run -----


@pytest.fixture(scope="module")
def gru(tiny_runs):
    return translator_for(open_model(tiny_runs.gru_bahdanau, device="cpu"))


def test_engine_prefix_text_is_prepared_as_targets_are(gru):
    sentences = [gru_sentence for gru_sentence in ("golf alpha echo .", "hotel foxtrot .", "")]
    free = gru.translate(sentences, beam_size=1)
    words = free[0].text.split()
    forced = gru.translate(sentences, beam_size=1, prefix=[" ".join(words[:2]).upper(), "", "ignored"])
    assert forced[0].hypotheses[0].tokens == free[0].hypotheses[0].tokens  # its own start, cased otherwise
    assert forced[0].hypotheses[0].score == free[0].hypotheses[0].score
    assert forced[1].text == free[1].text and forced[2].text == ""
    other = gru.translate(sentences[:1], beam_size=3, nbest=3, prefix=["deux deux"])
    assert all(text.startswith("deux deux") for text in other[0].outputs)


def test_engine_refuses_prefixes_it_cannot_force(gru):
    with pytest.raises(
        UserError, match=r"prefix 1 \('zebra un'\) holds what the target vocabulary lacks: zebra;"
    ):
        gru.translate(["golf ."], prefix=["zebra un"])
    with pytest.raises(
        UserError, match="prefix 1 .* has 30 target tokens, but the output of its sentence may hold at most"
    ):
        gru.translate(["golf ."], prefix=["un " * 30])
    with pytest.raises(UserError, match="2 prefixes for 1 sentences"):
        gru.translate(["golf ."], prefix=["un", "deux"])
    with pytest.raises(UserError, match="--sample draws its outputs token by token; it takes no --beam"):
        gru.translate(["golf ."], beam_size=2, sampling=Sampling(samples=2))


def test_lines_with_a_prefix_are_translated_whole_and_samples_join(gru):
    lines = ["golf alpha . hotel echo .", "golf alpha . hotel echo ."]
    greedy = DecodeSettings.resolve(gru.cfg.decode, beam_size=1)
    results = translate_lines(gru, lines, split=True, settings=greedy, prefix=["", "un"])
    assert len(results[0].sentences) == 2 and len(results[1].sentences) == 1
    assert results[1].text.startswith("un")
    sampling = DecodeSettings.resolve(gru.cfg.decode, sampling=Sampling(samples=3, seed=4))
    drawn = translate_lines(gru, lines, split=True, settings=sampling)
    again = translate_lines(gru, lines[::-1] + ["hotel ."], split=True, settings=sampling)
    assert [len(r.nbest()) for r in drawn] == [3, 3]
    assert [t for t, _, _ in drawn[0].nbest()] == [t for t, _, _ in again[1].nbest()]


def test_cli_prefix_and_sample(tiny_runs, run_cli, tmp_path):
    run = str(tiny_runs.gru_bahdanau)
    prefixes = tmp_path / "prefixes.txt"
    prefixes.write_text("un\n\n", encoding="utf-8")
    plain = run_cli("translate", run, "golf alpha .", "hotel .", "--beam", "1")
    given = run_cli(
        "translate", run, "golf alpha .", "hotel .", "--beam", "1", "--prefix-file", str(prefixes)
    )
    assert given.returncode == 0 and given.stdout.splitlines()[0].startswith("un")
    assert given.stdout.splitlines()[1] == plain.stdout.splitlines()[1]
    drawn = run_cli("translate", run, "golf alpha .", "--sample", "4", "--top-p", "0.9", "--seed", "3")
    assert (
        drawn.returncode == 0 and [line.split(" ||| ")[0] for line in drawn.stdout.splitlines()] == ["0"] * 4
    )
    assert (
        drawn.stdout
        == run_cli("translate", run, "golf alpha .", "--sample", "4", "--top-p", "0.9", "--seed", "3").stdout
    )
    for args, message in [
        (["--prefix", "un", "--prefix-file", str(prefixes)], "give --prefix .* or --prefix-file"),
        (["--prefix-file", str(prefixes), "x ."], "has 2 lines for 3 input lines"),
        (["--top-k", "3"], "--top-k applies to sampling; add --sample N"),
        (["--sample", "2", "--temperature", "0"], "greedy search"),
        (["--sample", "2", "--nbest", "2", "--beam", "2"], "--sample draws its outputs token by token"),
    ]:
        result = run_cli("translate", run, "golf .", "hotel .", *args)
        assert result.returncode == 2, (args, result)
        assert re.search(message, result.stderr), (args, result.stderr)


@pytest.mark.parametrize("name", ["gru_bahdanau", "transformer"])
def test_samples_hold_no_pad_or_bos_and_prefixes_follow_the_same_rule(tiny_runs, run_cli, name):
    """At temperature 100 every token is about equally likely; still no sample holds <pad> or <bos>,
    which a prefix may not force either; <unk> (a training target) may be in both."""
    run = str(getattr(tiny_runs, name))
    drawn = run_cli(
        "translate", run, "golf alpha .", "hotel echo .", "--sample", "16", "--temperature", "100"
    )
    assert drawn.returncode == 0, drawn.stderr
    texts = [line.split(" ||| ")[1] for line in drawn.stdout.splitlines()]
    assert len(texts) == 32 and len({t for t in texts}) > 16  # nearly uniform draws: almost all differ
    assert not any(token in text.split() for text in texts for token in ("<pad>", "<bos>"))
    refused = run_cli("translate", run, "golf .", "--prefix", "un <bos>")
    assert refused.returncode == 2 and "holds <bos>: no output holds <pad> or <bos>" in refused.stderr
    forced = run_cli("translate", run, "golf .", "--prefix", "<unk> un", "--beam", "1")
    assert forced.returncode == 0 and forced.stdout.startswith("<unk> un"), forced.stderr


def test_input_and_prefixes_cannot_both_be_standard_input(tiny_runs, run_cli, monkeypatch):
    import io
    import sys

    run = str(tiny_runs.gru_bahdanau)
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"un\n\n")))  # piped, not a terminal
    for args in (["--input", "-", "--prefix-file", "-"], ["--prefix-file", "-"]):
        result = run_cli("translate", run, *args)
        assert result.returncode == 2, (args, result)
        assert "--input and --prefix-file cannot both read standard input" in result.stderr
    given = run_cli("translate", run, "golf .", "hotel .", "--prefix-file", "-", "--beam", "1")  # arguments
    assert given.returncode == 0 and given.stdout.startswith("un"), given.stderr


def test_outputs_naming_one_file_or_an_input_are_refused_before_anything_is_written(
    tiny_runs, run_cli, tmp_path
):
    run = str(tiny_runs.gru_bahdanau)
    source = tmp_path / "source.en"
    source.write_text("golf alpha .\nhotel .\n", encoding="utf-8")
    (tmp_path / "link.en").symlink_to(source)
    (tmp_path / "hard.en").hardlink_to(source)
    both, other = tmp_path / "both.txt", tmp_path / "other.txt"
    cases = [
        (
            ["translate", run, "-i", str(source), "-o", str(both), "--alignments", str(both)],
            "--output and --alignments name the same file",
        ),
        (
            ["translate", run, "-i", str(source), "-o", str(tmp_path / "x" / ".." / "source.en")],
            "--output .* is the file --input reads",
        ),
        (
            ["translate", run, "-i", str(source), "--alignments", str(tmp_path / "link.en")],
            "--alignments .* is the file --input reads",
        ),
        (
            ["translate", run, "-i", str(source), "-o", str(tmp_path / "hard.en")],
            "--output .* is the file --input reads",
        ),
        (
            ["translate", run, "golf .", "--prefix-file", str(source), "-o", str(source)],
            "is the file --prefix-file reads",
        ),
        (
            ["translate", run, "golf .", "-o", str(other), "--attention-dir", str(other)],
            "--output and --attention-dir name the same path",
        ),
        (
            ["score", run, "-s", str(source), "-t", str(source), "-o", str(both), "--alignments", str(both)],
            "--output and --alignments name the same file",
        ),
        (
            ["score", run, "-s", str(source), "-t", str(tmp_path / "hard.en"), "--alignments", str(source)],
            "--alignments .* is the file --source reads",
        ),
    ]
    for args, message in cases:
        result = run_cli(*args)
        assert result.returncode == 2 and re.search(message, result.stderr), (args, result)
        assert source.read_text(encoding="utf-8") == "golf alpha .\nhotel .\n"
        assert not both.exists() and not other.exists() and not (tmp_path / "x").exists()
    assert (
        run_cli("translate", run, "-i", str(source), "-o", str(both), "--alignments", str(other)).returncode
        == 0
    )
    assert len(both.read_text(encoding="utf-8").splitlines()) == 2 and "-" in other.read_text(
        encoding="utf-8"
    )


def test_python_api_takes_prefixes_and_sampling(tiny_runs):
    import attn_mt

    model = attn_mt.load(tiny_runs.gru_bahdanau)
    assert model.translate(["golf alpha ."], beam=1, prefix=["un deux"])[0].startswith("un deux")
    drawn = model.translate_full(["golf alpha ."], sampling=attn_mt.Sampling(samples=2, seed=7))
    assert len(drawn[0].hypotheses) == 2
    with pytest.raises(TypeError, match="one text per sentence"):
        model.translate(["golf ."], prefix="un")


def test_serve_takes_prefixes_and_sampling_and_refuses_misuse(tiny_runs, tmp_path_factory, run_cli):
    from support.helpers import call, server, translate

    run = tiny_runs.copy_to(tmp_path_factory.mktemp("prefix_serving"))["gru_bahdanau"]
    with server(run) as address:
        plain = translate(address, ["golf alpha . hotel .", "hotel ."], beam=1)
        given = translate(address, ["golf alpha . hotel .", "hotel ."], beam=1, prefix=["un", ""])
        assert given["results"][0]["translation"].startswith("un")
        assert given["results"][0]["sentences"] is None  # translated whole
        assert given["results"][1] == plain["results"][1]
        every = translate(address, ["golf .", "hotel ."], beam=3, nbest=2, prefix="deux")
        assert all(c["text"].startswith("deux") for r in every["results"] for c in r["nbest"])
        drawn = translate(address, ["golf alpha . hotel ."], sample=3, top_k=4, seed=2)
        assert drawn["nbest"] == 3 and len(drawn["results"][0]["nbest"]) == 3
        assert translate(address, ["golf alpha . hotel ."], sample=3, top_k=4, seed=2) == drawn
        cli = run_cli(
            "translate", str(run), "golf alpha . hotel .", "--sample", "3", "--top-k", "4", "--seed", "2"
        )
        assert [line.split(" ||| ")[1] for line in cli.stdout.splitlines()] == [
            c["text"] for c in drawn["results"][0]["nbest"]
        ]
        for body, message in [
            ({"prefix": "zebra"}, "holds what the target vocabulary lacks: zebra"),
            ({"prefix": ["un", "deux"]}, "prefix: 2 prefixes for 1 sentences"),
            ({"top_k": 3}, "top_k applies to sampling; add sample"),
            ({"sample": 2, "beam": 3}, "sample draws its outputs token by token; it takes no beam"),
            ({"temperature": 0, "sample": 2}, "temperature"),
            ({"top_p": 1.5, "sample": 2}, "top_p"),
        ]:
            status, answer = call(address, "/translate", {"sentences": ["golf ."], **body})
            assert status == 422 and message in answer["error"], (body, answer)
        status, answer = call(address, "/translate", {"sentences": ["golf ."], "prefix": "un " * 40})
        assert status == 422 and "shorten it" in answer["error"]


# ----- word alignments -----


def test_alignments_are_pairs_within_both_sentences_words(tiny_runs, tmp_path_factory, run_cli):
    from support.helpers import call, server

    root = tmp_path_factory.mktemp("alignments")
    runs = tiny_runs.copy_to(root)
    lines = ["golf alpha echo . hotel foxtrot .", "charlie bravo .", ""]
    for name in ("gru_bahdanau", "transformer"):
        out = root / f"{name}.align"
        result = run_cli("translate", str(runs[name]), *lines, "--alignments", str(out))
        assert result.returncode == 0, result.stderr
        written = out.read_text(encoding="utf-8").split("\n")
        assert len(written) == len(lines) + 1 and written[-1] == ""
        for line, translation, pairs in zip(lines, result.stdout.split("\n"), written, strict=False):
            found = [tuple(map(int, pair.split("-"))) for pair in pairs.split()]
            targets = translation.split()
            assert sorted(j for _, j in found) == list(range(len(targets)))  # each output word once
            assert all(0 <= i < len(line.split()) for i, _ in found)
        with server(runs[name]) as address:
            status, answer = call(address, "/translate", {"sentences": lines, "alignments": True})
        assert status == 200
        for pairs, result_json in zip(written, answer["results"], strict=False):
            assert result_json["alignment"]["pairs"] == pairs
            assert len(result_json["alignment"]["source_words"]) == len(result_json["source"].split())


def test_align_words_takes_the_last_layers_head_average_and_skips_eos():
    import numpy as np

    from attn_mt.decoding.alignments import align_words, joined
    from attn_mt.decoding.attention import SentenceAttention

    cross = np.zeros((2, 2, 3, 3))  # (L, h, T, S): outputs "a b <eos>", sources "x y <eos>"
    cross[0, :, :, 0] = 1.0  # the first layer looks at x only: ignored
    cross[1, 0] = [[0.1, 0.3, 0.6], [0.5, 0.2, 0.3], [0.0, 0.0, 1.0]]
    cross[1, 1] = [[0.1, 0.5, 0.4], [0.7, 0.1, 0.2], [0.0, 0.0, 1.0]]
    attention = SentenceAttention(
        {"cross": cross}, ["x", "y", "<eos>"], ["a", "b", "<eos>"], ["<bos>", "a", "b"]
    )
    found = align_words(attention)  # a: y (0.4 against <eos>'s 0.5, which is no word); b: x
    assert (found.pairs, found.source_words, found.target_words) == ([(1, 0), (0, 1)], ["x", "y"], ["a", "b"])
    assert joined([found, found]).pharaoh() == "1-0 0-1 3-2 2-3"


def test_subword_alignments_count_words_not_pieces(subword_run):
    from attn_mt.decoding.alignments import alignment_of

    engine = translator_for(open_model(subword_run, device="cpu"))
    for translation in engine.translate(["Golf alpha echo hotel golf.", "Charlie bravo."], beam_size=1):
        found = alignment_of(engine, translation)
        assert found.source_words == translation.source.split()
        assert found.target_words == translation.text.split()
        assert [j for _, j in found.pairs] == list(range(len(found.target_words)))


# ----- the CTranslate2 engine -----


def test_ctranslate2_forces_prefixes_as_torch_does_and_samples(subword_run, subword_folder):
    """Where both engines decode a sentence alike without a prefix (no near-tie parts them), they
    decode it alike with one: the same tokens, and scores that include the prefix."""
    from support.synthetic import reverse_pairs

    run = open_model(subword_run, device="cpu")
    ct2_rule = replace(
        run.config, decode=replace(run.config.decode, beam_stop="k_finished")
    )  # CTranslate2's stop
    torch_side = translator_for(run, ct2_rule)
    ct2_side = translator_for(open_model(subword_folder, device="cpu"))
    assert ct2_side.search_prefix and ct2_side.search_sampling
    sentences = [en for en, _ in reverse_pairs(12, seed=5)]
    compared = 0
    for beam in (1, 3):
        free = [engine.translate(sentences, beam_size=beam) for engine in (torch_side, ct2_side)]
        prefixes = [" ".join(t.text.split()[:1]) if k % 2 else "Un deux" for k, t in enumerate(free[0])]
        forced = [
            engine.translate(sentences, beam_size=beam, prefix=prefixes) for engine in (torch_side, ct2_side)
        ]
        for k, (a, b) in enumerate(zip(*free, strict=True)):
            if a.outputs != b.outputs:
                continue  # a near-tie parts the engines already (tests/test_engines.py's comparison)
            x, y = forced[0][k].hypotheses[0], forced[1][k].hypotheses[0]
            assert x.tokens == y.tokens, (k, beam)
            assert x.score == float32_approx(y.score, terms=400)
            assert torch_side.tgt_vocab.detokenize(x.tokens).startswith(prefixes[k])
            compared += 1
    assert compared >= 12
    drawn = ct2_side.translate(sentences[:2], sampling=Sampling(samples=3, top_k=5, temperature=0.8))
    assert [len(t.hypotheses) for t in drawn] == [3, 3]
    scored = ct2_side.force(
        [t.source_tokens for t in drawn], [t.hypotheses[1].tokens for t in drawn], lambda n: None
    )
    for t, row in zip(drawn, scored, strict=True):
        assert t.hypotheses[1].score == pytest.approx(sum(row.log_probs), abs=1e-4)  # the model's own
