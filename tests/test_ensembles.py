"""Ensembles of runs (models/ensemble.py, decoding/ensembles.py): the mean of the members' probabilities,
each member with its own state; a run with itself decodes as the run alone; mismatched runs refused."""

from __future__ import annotations

import json
import math
from dataclasses import replace

import pytest
import torch
from support.search_fakes import BOS, EOS, REAL_LIMITS, TOY_SENTENCES, TableModel, tiny_real_model, toy_batch
from support.tolerances import float32_approx

from attn_mt.data.vocab import Vocab
from attn_mt.decoding.engines import translator_for
from attn_mt.decoding.ensembles import ensemble_difference, open_models
from attn_mt.decoding.search import beam_search, greedy_search
from attn_mt.errors import UserError
from attn_mt.models.ensemble import Ensemble

A, B = 3, 4


def test_a_step_is_the_log_of_the_mean_probability():
    first = TableModel({5: {(): {A: 0.6, B: 0.3, EOS: 0.1}, (A,): {EOS: 1.0}}}, 6)
    second = TableModel({5: {(): {A: 0.2, B: 0.7, EOS: 0.1}, (B,): {EOS: 1.0}}}, 6)
    src, lens = torch.tensor([[5, EOS]]), torch.tensor([2])
    (found,) = greedy_search(Ensemble([first, second]), src, lens, bos_id=BOS, eos_id=EOS)
    # Step 1: A 0.4, B 0.5, <eos> 0.1 -> B; step 2: first says (B,) is unknown (all on <eos>), second <eos>.
    assert found.tokens == [B]
    assert found.score == pytest.approx(math.log(0.5) + math.log(1.0), abs=1e-6)
    with pytest.raises(ValueError, match="at least 2 models"):
        Ensemble([first])


@pytest.mark.parametrize("kind", ["gru_bahdanau", "transformer"])
def test_a_model_with_itself_decodes_as_the_model_alone(kind):
    model = tiny_real_model(kind)
    both = Ensemble([model, model]).eval()
    src, lens = toy_batch()
    alone = greedy_search(model, src, lens, bos_id=BOS, eos_id=EOS, **REAL_LIMITS)
    paired = greedy_search(both, src, lens, bos_id=BOS, eos_id=EOS, **REAL_LIMITS)
    assert [h.tokens for h in paired] == [h.tokens for h in alone]
    assert [h.score for h in paired] == float32_approx([h.score for h in alone], terms=200)
    alone = beam_search(model, src, lens, beam_size=3, nbest=3, bos_id=BOS, eos_id=EOS, **REAL_LIMITS)
    paired = beam_search(both, src, lens, beam_size=3, nbest=3, bos_id=BOS, eos_id=EOS, **REAL_LIMITS)
    for a, p in zip(alone, paired, strict=True):
        assert [h.tokens for h in p] == [h.tokens for h in a]
        assert [h.score for h in p] == float32_approx([h.score for h in a], terms=200)
    assert len(TOY_SENTENCES) == len(alone)


def test_runs_ensemble_through_the_engine_and_the_commands(
    tiny_runs, subword_run, subword_folder, run_cli, tmp_path
):
    gru, transformer = tiny_runs.gru_bahdanau, tiny_runs.transformer
    sentences = ["golf alpha echo .", "hotel foxtrot charlie bravo ."]
    alone = translator_for(open_models([transformer], device="cpu")).translate(
        sentences, beam_size=2, nbest=2
    )
    itself = translator_for(open_models([transformer, transformer], device="cpu"))
    paired = itself.translate(sentences, beam_size=2, nbest=2)
    assert [t.outputs for t in paired] == [t.outputs for t in alone]
    assert itself.parameter_count() == 2 * translator_for(open_models([transformer])).parameter_count()
    mixed = run_cli("translate", str(gru), str(transformer), *sentences, "--beam", "2")
    assert mixed.returncode == 0 and len(mixed.stdout.splitlines()) == 2  # a GRU and a Transformer
    for models, message in [
        ([gru, subword_run], "data.tokenizer is 'sentencepiece', not 'book'"),
        ([subword_run, subword_folder], "is a CTranslate2 folder, which decodes with its own search"),
    ]:
        with pytest.raises(UserError, match=message):
            open_models(models, device="cpu")
    copies = tiny_runs.copy_to(tmp_path)
    copy = copies["transformer"]
    evaluated = run_cli(
        "eval", str(copy), str(transformer), "--split", "test", "--data", str(tiny_runs.corpus)
    )
    assert evaluated.returncode == 0, evaluated.stderr
    assert json.loads((copy / "eval" / "test-ensemble" / "scores.json").read_text())["ensemble"] == [
        str(copy),
        str(transformer),
    ]
    assert not (copy / "eval" / "test" / "scores.json").exists()  # the run's own scores are left alone
    first, second = (open_models([run], device="cpu") for run in (gru, transformer))
    assert ensemble_difference(first, second) is None  # a GRU and a Transformer on the same vocabularies
    tokens = list(second.tgt_vocab.idx_to_token)
    tokens[-1], tokens[-2] = tokens[-2], tokens[-1]
    other = replace(second, tgt_vocab=Vocab(tokens))
    assert ensemble_difference(first, other) == "its target vocabulary differs (13 entries against 13)"
    other = replace(
        second, config=replace(second.config, data=replace(second.config.data, direction="fr-en"))
    )
    assert ensemble_difference(first, other) == "data.direction is 'fr-en', not 'en-fr'"
