"""One behaviour suite for both engines (decoding/engine.py's `Engine`): torch's `Translator` on the shared
subword run and `Ctranslate2Translator` on its export give the same outputs where the engines agree, the
same errors for a bad beam, n-best or attention request, and say what they cannot do before being asked."""

from __future__ import annotations

from pathlib import Path

import pytest
from support.near_ties import assert_decodings_agree
from support.synthetic import reverse_pairs
from support.tolerances import decoding_terms

from attn_mt.decoding.engine import Engine, Found, check_search, translate_with
from attn_mt.decoding.engines import translator_for
from attn_mt.decoding.outputs import Hypothesis, Translation
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

        def search(self, sources, beam, nbest, need_attention, advance, prefixes=None, sampling=None):
            self.seen = sources
            advance(len(sources))
            reverse = [self.tgt_vocab.encode_text("Deux un.")] * len(sources)
            return [
                Found([Hypothesis(ids, -1.0, -1.0)], [f"seen {len(s)}"])
                for s, ids in zip(sources, reverse, strict=True)
            ]

    fake = Recording(engines["torch"])
    results = translate_with(fake, ["Alpha bravo.", "", "Charlie."], beam_size=1)
    assert fake.seen == [results[0].source_tokens, results[2].source_tokens] and fake.seen[0]
    assert [r.text for r in results] == ["Deux un.", "", "Deux un."]
    assert results[1] == Translation("", []) and results[2].warnings == [f"seen {len(fake.seen[1])}"]


def test_check_search_accepts_what_both_engines_run():
    for beam, nbest in ((1, 1), (4, 1), (4, 4)):
        check_search(beam, nbest)
    with pytest.raises(UserError, match="nbest 5 needs a beam at least as large"):
        check_search(4, 5)
