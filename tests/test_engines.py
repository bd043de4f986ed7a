"""One behaviour suite for both engines (decoding/engine.py's `Engine`): torch's `Translator` on the shared
subword run and `Ctranslate2Translator` on its export give the same outputs where the engines agree, the
same errors for a bad beam, n-best or attention request, and say what they cannot do before being asked."""

from __future__ import annotations

from pathlib import Path

import pytest
from support.near_ties import assert_decodings_agree
from support.synthetic import reverse_pairs
from support.tolerances import decoding_terms

from attn_mt.decoding.engine import Engine, Found, translate_with
from attn_mt.decoding.engines import translator_for
from attn_mt.decoding.outputs import Hypothesis, Sampling, Translation, gnmt_length_penalty
from attn_mt.decoding.settings import DecodeSettings
from attn_mt.errors import UserError
from attn_mt.run.open import open_model

SENTENCES = [en for en, _ in reverse_pairs(24, seed=5)] + ["", "   "]
ENGINES = ["torch", "ctranslate2"]
SEARCH_TERMS = decoding_terms(steps=12, widest=64, keys_or_vocab=320)  # tests/test_ctranslate2.py's


@pytest.fixture(scope="module")
def engines(subword_run: Path, subword_folder: Path) -> dict[str, Engine]:
    """Both engines over the same trained model: the run directory, and its CTranslate2 folder."""
    return {
        "torch": translator_for(open_model(subword_run, device="cpu")),
        "ctranslate2": translator_for(open_model(subword_folder, device="cpu")),
    }


@pytest.mark.parametrize("name", ENGINES)
def test_each_engine_implements_the_interface(engines, name):
    engine = engines[name]
    assert isinstance(engine, Engine) and engine.name == name
    assert engine.description().startswith(name)
    assert engines["torch"].parameter_count() == engine.parameter_count() > 0


@pytest.mark.parametrize("beam", [1, 3])
def test_both_engines_translate_alike(engines, beam):
    torch_side, ct2_side = (engines[name].translate(SENTENCES, beam_size=beam) for name in ENGINES)
    assert_decodings_agree(
        engines["torch"], torch_side, ct2_side, beam=beam, terms=SEARCH_TERMS, other_search_rules=True
    )
    assert torch_side[-1].outputs == torch_side[-2].outputs == [] and torch_side[0].text


@pytest.mark.parametrize("name", ENGINES)
def test_nbest_lists_come_best_first_and_beam_defaults_to_the_runs(engines, name):
    engine = engines[name]
    results = engine.translate(SENTENCES[:6], beam_size=3, nbest=3)
    for result in results:
        scores = [h.norm_score for h in result.hypotheses]
        assert len(result.outputs) == 3 and scores == sorted(scores, reverse=True)
    default = engine.translate(SENTENCES[:6])
    assert [r.text for r in default] == [
        r.text for r in engine.translate(SENTENCES[:6], beam_size=engine.cfg.decode.beam_size)
    ]


BAD_REQUESTS = [
    ({"beam_size": 0}, "beam must be at least 1, got 0"),
    ({"beam_size": 2, "nbest": 0}, "nbest must be at least 1, got 0"),
    ({"beam_size": 2, "nbest": 3}, "nbest 3 needs a beam at least as large (the beam is 2)"),
]


@pytest.mark.parametrize("name", ENGINES)
@pytest.mark.parametrize(("options", "message"), BAD_REQUESTS)
def test_bad_beam_or_nbest_is_the_same_error_before_any_work(engines, name, options, message):
    with pytest.raises(UserError) as refused:
        engines[name].translate(SENTENCES, **options)
    assert str(refused.value) == message


@pytest.mark.parametrize("name", ENGINES)
def test_search_attention_is_a_capability_asked_before_translating(engines, name):
    engine = engines[name]
    if engine.search_attention:
        result = engine.translate(SENTENCES[:2], beam_size=2, need_attention=True)
        assert all(h.attention is not None for r in result for h in r.hypotheses)
    else:
        with pytest.raises(UserError, match=f"the {name} engine returns no attention from its search"):
            engine.translate(SENTENCES[:2], need_attention=True)
    assert engine.search_attention == (name == "torch")


@pytest.mark.parametrize("name", ENGINES)
def test_attention_of_a_blank_sentence_is_the_same_error(engines, name):
    engine = engines[name]
    blank = engine.translate([""])[0]
    with pytest.raises(UserError, match="no attention to show for '': it has no output"):
        engine.attention(blank)
    shown = engine.attention(engine.translate(SENTENCES[:1], beam_size=2)[0])
    assert "cross" in shown.maps and (len(shown.maps) == 1) != engine.all_attention_maps


def test_translate_with_prepares_skips_blanks_and_detokenizes_once(engines):
    """A fake search sees only the prepared, non-blank sentences; the shared code fills in the rest."""

    class Recording:
        name, search_attention, all_attention_maps = "fake", False, False
        search_prefix = search_sampling = False

        def __init__(self, real: Engine):
            self.cfg, self.src_vocab, self.tgt_vocab = real.cfg, real.src_vocab, real.tgt_vocab
            self.seen: list[list[str]] = []

        def search(self, sources, settings, need_attention, advance, prefixes=None):
            self.seen, self.settings = sources, settings
            advance(len(sources))
            reverse = [self.tgt_vocab.encode_text("Deux un.")] * len(sources)
            return [
                Found([Hypothesis(ids, -1.0, -1.0)], [f"seen {len(s)}"])
                for s, ids in zip(sources, reverse, strict=True)
            ]

    fake = Recording(engines["torch"])
    greedy = DecodeSettings.resolve(fake.cfg.decode, beam_size=1)
    results = translate_with(fake, ["Alpha bravo.", "", "Charlie."], greedy)
    assert fake.settings is greedy
    assert fake.seen == [results[0].source_tokens, results[2].source_tokens] and fake.seen[0]
    assert [r.text for r in results] == ["Deux un.", "", "Deux un."]
    assert results[1] == Translation("", []) and results[2].warnings == [f"seen {len(fake.seen[1])}"]


def test_decode_settings_take_the_runs_defaults_and_check_every_override_once(engines):
    decode = engines["torch"].cfg.decode
    run_default = DecodeSettings.resolve(decode)
    assert (run_default.beam_size, run_default.nbest) == (decode.beam_size, 1)
    assert run_default.length_penalty == decode.length_penalty and run_default.sampling is None
    for beam, nbest in ((1, 1), (4, 1), (4, 4)):
        assert DecodeSettings.resolve(decode, beam, nbest).outputs == nbest
    drawn = DecodeSettings.resolve(decode, sampling=Sampling(samples=3))
    assert (drawn.beam_size, drawn.outputs) == (1, 3)
    refused = {
        "nbest 5 needs a beam at least as large": dict(beam_size=4, nbest=5),
        "beam must be at least 1, got 0": dict(beam_size=0),
        "--sample draws its outputs token by token; it takes no --beam": dict(
            beam_size=2, sampling=Sampling(samples=2)
        ),
        "--length-penalty must be from 0 to 10, got -1": dict(length_penalty=-1.0),
        "beam size 4 needs at least 8 target vocabulary entries, got 7": dict(beam_size=4, vocab_size=7),
    }
    for message, overrides in refused.items():
        with pytest.raises(UserError, match=message):
            DecodeSettings.resolve(decode, **overrides)


@pytest.mark.parametrize("name", ENGINES)
def test_the_settings_length_penalty_ranks_the_beam(engines, name):
    """The alpha travels in the settings, not in a copied config: each norm_score is divided by it."""
    engine = engines[name]
    for alpha in (0.0, 2.5):
        settings = DecodeSettings.resolve(engine.cfg.decode, 3, 3, length_penalty=alpha)
        for result in engine.translate(SENTENCES[:4], settings=settings):
            for hyp in result.hypotheses:
                expected = hyp.score / gnmt_length_penalty(len(hyp.tokens) + 1, alpha)
                assert hyp.norm_score == pytest.approx(expected, rel=1e-6)
    with pytest.raises(TypeError, match="not both"):
        engine.translate(SENTENCES[:1], beam_size=2, settings=DecodeSettings.resolve(engine.cfg.decode))
