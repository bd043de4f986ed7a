"""Greedy and beam search: hand-computed results on table models, invariants on a toy attention model."""

from __future__ import annotations

import io
import math
import sys

import pytest
import torch
from support.near_ties import assert_near_tie, beam_parting, greedy_parting
from support.search_fakes import (
    BOS,
    EOS,
    PAD,
    REAL_KINDS,
    REAL_LIMITS,
    REAL_VOCAB,
    TOY_MODELS,
    TOY_SENTENCES,
    TableModel,
    ToyAttentionModel,
    tiny_real_model,
    toy_batch,
)
from support.tolerances import assert_float32_close, decoding_terms, float32_approx

from attn_mt.commands.translate import read_input_lines, split_input_lines
from attn_mt.config import Config
from attn_mt.data.vocab import Vocab
from attn_mt.decoding import engine as engine_module
from attn_mt.decoding.search import (
    beam_search,
    gnmt_length_penalty,
    greedy_pick,
    greedy_search,
    max_output_lengths,
)
from attn_mt.decoding.translator import Translator
from attn_mt.errors import UserError

A, B, C = 3, 4, 5  # target tokens of the table models
VOCAB = 6
KEY_GREEDY_FAILS, KEY_LENGTH_PENALTY, KEY_LONG, KEY_FULL = 3, 4, 5, 6  # first source id selects a table

TABLES = {
    # Greedy takes A (0.5) then <eos> (0.4): 0.20. Beam 2 also reaches B <eos>: 0.4 * 0.9 = 0.36.
    KEY_GREEDY_FAILS: {
        (): {A: 0.5, B: 0.4, EOS: 0.1},
        (A,): {A: 0.35, B: 0.25, EOS: 0.4},
        (B,): {EOS: 0.9, A: 0.06, C: 0.04},
    },
    # Beam 2 finishes [A] (0.5 * 0.7) at step 2 and [B B] (0.45 * 0.85 * 0.9) at step 3.
    KEY_LENGTH_PENALTY: {
        (): {A: 0.5, B: 0.45, EOS: 0.05},
        (A,): {EOS: 0.7, A: 0.2, B: 0.1},
        (B,): {B: 0.85, EOS: 0.1, A: 0.05},
        (A, A): {EOS: 0.9, A: 0.06, B: 0.04},
        (B, B): {EOS: 0.9, A: 0.06, B: 0.04},
    },
    # Beam 2 finishes [A] at step 2; at step 3 both [B B] and [A A] end, but only one slot is left.
    KEY_FULL: {
        (): {A: 0.5, B: 0.45, EOS: 0.05},
        (A,): {EOS: 0.65, A: 0.28, B: 0.07},
        (B,): {B: 0.85, EOS: 0.1, A: 0.05},
        (A, A): {EOS: 0.9, A: 0.06, B: 0.04},
        (B, B): {EOS: 0.9, A: 0.06, B: 0.04},
    },
    # <eos> is never likely: outputs end only at the length limit.
    KEY_LONG: {prefix: {A: 0.9, EOS: 0.1} for prefix in [(), (A,), (A, A), (A, A, A), (A, A, A, A)]},
}
log = math.log


def table_model() -> TableModel:
    return TableModel(TABLES, VOCAB)


def sources(*keys_and_lens: tuple[int, int]) -> tuple[torch.Tensor, torch.Tensor]:
    """Padded (B, S) sources whose first id is the table key, with the given valid lengths (incl. <eos>)."""
    width = max(n for _, n in keys_and_lens)
    src = torch.full((len(keys_and_lens), width), PAD)
    for i, (key, n) in enumerate(keys_and_lens):
        src[i, : n - 1] = key
        src[i, n - 1] = EOS
    return src, torch.tensor([n for _, n in keys_and_lens])


# A table model's scores are float32 log-softmaxes over the 6-token vocabulary, summed over at most 4 steps.
TABLE_TERMS = 4 * VOCAB


def summary(hyps) -> list[tuple[list[int], float, float]]:
    return [(h.tokens, h.score, h.norm_score) for h in hyps]


def assert_hyps(hyps, expected: list[tuple[list[int], float, float]]) -> None:
    """Tokens exactly; score and normalised score to float32's rounding of the hand-computed values."""
    assert [h.tokens for h in hyps] == [tokens for tokens, _, _ in expected]
    got = [value for h in hyps for value in (h.score, h.norm_score)]
    assert got == float32_approx([v for _, score, norm in expected for v in (score, norm)], terms=TABLE_TERMS)


def test_length_penalty_definition():
    assert gnmt_length_penalty(4, 0.0) == 1.0
    assert gnmt_length_penalty(1, 1.0) == 1.0
    assert gnmt_length_penalty(7, 2.0) == pytest.approx(4.0)


def test_max_output_lengths_floor_and_errors():
    assert max_output_lengths(torch.tensor([1, 3, 4]), 1.5, 1).tolist() == [2, 5, 7]
    with pytest.raises(UserError, match="max_len_b"):
        max_output_lengths(torch.tensor([3]), 0.0, 0)


def test_greedy_hand_computed():
    src, lens = sources((KEY_GREEDY_FAILS, 2), (KEY_LENGTH_PENALTY, 2))
    out = greedy_search(table_model(), src, lens, bos_id=BOS, eos_id=EOS)
    assert_hyps(
        out,
        [
            ([A], log(0.5) + log(0.4), log(0.5) + log(0.4)),
            ([A], log(0.5) + log(0.7), log(0.5) + log(0.7)),
        ],
    )


def test_beam_finds_better_hypothesis_and_nbest():
    src, lens = sources((KEY_GREEDY_FAILS, 2))
    (two,) = beam_search(
        table_model(), src, lens, beam_size=2, nbest=2, length_penalty=0.0, bos_id=BOS, eos_id=EOS
    )
    # Step 1 keeps A, B (<eos> ranks 3rd); step 2's best two candidates are B<eos>, A<eos>: done.
    assert_hyps(
        two,
        [
            ([B], log(0.4) + log(0.9), log(0.4) + log(0.9)),
            ([A], log(0.5) + log(0.4), log(0.5) + log(0.4)),
        ],
    )
    (three,) = beam_search(
        table_model(), src, lens, beam_size=3, nbest=3, length_penalty=1.0, bos_id=BOS, eos_id=EOS
    )
    # Beam 3: the empty output (<eos> first, 0.1) ranks 3rd at step 1 and is finished too; at step 2 [B]
    # and [A] finish, but the live [A A] (0.175) could still end better than the worst kept, [] (norm
    # -2.30): it does ([A A] <eos> is certain, norm -1.31), and replaces [].
    aa = log(0.5) + log(0.35)
    assert_hyps(
        three,
        [
            ([B], log(0.4) + log(0.9), (log(0.4) + log(0.9)) / (7 / 6)),
            ([A, A], aa, aa / (8 / 6)),
            ([A], log(0.5) + log(0.4), (log(0.5) + log(0.4)) / (7 / 6)),
        ],
    )


def test_length_penalty_changes_ranking():
    src, lens = sources((KEY_LENGTH_PENALTY, 2))
    short = log(0.5) + log(0.7)  # [A]: -1.0498, length 2 with <eos>
    long = log(0.45) + log(0.85) + log(0.9)  # [B B]: -1.0664, length 3
    assert short > long
    (raw,) = beam_search(
        table_model(), src, lens, beam_size=2, nbest=2, length_penalty=0.0, bos_id=BOS, eos_id=EOS
    )
    assert_hyps(raw, [([A], short, short), ([B, B], long, long)])
    (penalised,) = beam_search(
        table_model(), src, lens, beam_size=2, nbest=2, length_penalty=1.0, bos_id=BOS, eos_id=EOS
    )
    # alpha = 1: [A] -> -1.0498 / (7/6) = -0.900, [B B] -> -1.0664 / (8/6) = -0.800: the longer one wins.
    assert_hyps(
        penalised,
        [
            ([B, B], long, long / (8 / 6)),
            ([A], short, short / (7 / 6)),
        ],
    )
    (best,) = beam_search(
        table_model(), src, lens, beam_size=2, nbest=1, length_penalty=1.0, bos_id=BOS, eos_id=EOS
    )
    assert_hyps(best, summary(penalised[:1]))


def test_a_full_beam_keeps_the_best_normalised_of_all_endings():
    src, lens = sources((KEY_FULL, 2))
    a = log(0.5) + log(0.65)  # [A] -1.124, finished at step 2
    bb = log(0.45) + log(0.85) + log(0.9)  # [B B] -1.066, ranked first at step 3: the beam is full
    aa = log(0.5) + log(0.28) + log(0.9)  # [A A] -2.072, ranked second at step 3
    alpha = 5.0  # strong enough that [A A] (norm -0.492) outranks [A] (norm -0.520): it takes [A]'s place
    assert aa / gnmt_length_penalty(3, alpha) > a / gnmt_length_penalty(2, alpha)
    (hyps,) = beam_search(
        table_model(), src, lens, beam_size=2, nbest=2, length_penalty=alpha, bos_id=BOS, eos_id=EOS
    )
    assert_hyps(
        hyps,
        [
            ([B, B], bb, bb / gnmt_length_penalty(3, alpha)),
            ([A, A], aa, aa / gnmt_length_penalty(3, alpha)),
        ],
    )
    # Ranked by raw score (alpha 0), [A] stays: [A A] is worse than both kept outputs.
    (raw,) = beam_search(
        table_model(), src, lens, beam_size=2, nbest=2, length_penalty=0.0, bos_id=BOS, eos_id=EOS
    )
    assert_hyps(raw, [([B, B], bb, bb), ([A], a, a)])


def test_beam_goes_on_while_a_live_hypothesis_can_still_win():
    # <eos> ranks second at step 0 ([], 0.06) and [A C] finishes at step 2 (0.054): two outputs have
    # finished while the live [A A] is one step from a far better ending ([A A C], 0.729). Stopping as soon
    # as K outputs have finished returns [A C] whatever alpha is; no beam may.
    tables = {
        KEY_GREEDY_FAILS: {
            (): {A: 0.9, EOS: 0.06, B: 0.04},
            (A,): {A: 0.9, C: 0.06, EOS: 0.04},
            (A, A): {C: 0.9, EOS: 0.06, B: 0.04},
            (A, A, C): {EOS: 1.0},
        }
    }
    src, lens = sources((KEY_GREEDY_FAILS, 2))
    best = log(0.9) + log(0.9) + log(0.9)
    for beam in (2, 3, 4):
        for alpha in (0.0, 1.0):
            model = TableModel(tables, max(VOCAB, 2 * beam))
            (hyps,) = beam_search(
                model, src, lens, beam_size=beam, length_penalty=alpha, bos_id=BOS, eos_id=EOS, max_len_b=8
            )
            assert_hyps(hyps, [([A, A, C], best, best / gnmt_length_penalty(4, alpha))])
    # Then it stops: at step 3 no live hypothesis is left (every extension of [A A C] is <eos>).
    assert len(model.rows_per_step) == 4
    # fairseq's and CTranslate2's rule (decode.beam_stop k_finished) stops at step 2, where [A C] (0.054)
    # finishes second after [] (0.06).
    model = TableModel(tables, VOCAB)
    (hyps,) = beam_search(
        model, src, lens, beam_size=2, nbest=2, bos_id=BOS, eos_id=EOS, max_len_b=8, stop_at_k_finished=True
    )
    ac = log(0.9) + log(0.06)
    assert_hyps(hyps, [([A, C], ac, ac / gnmt_length_penalty(3, 1.0)), ([], log(0.06), log(0.06))])
    assert len(model.rows_per_step) == 3


def test_beam_stops_once_no_live_hypothesis_can_win():
    # At step 1 [B] (0.72, norm -0.28 at alpha 1) and [A] (0.18, norm -1.47) finish; the best live one,
    # [B A] at 0.08, can at best end at its sentence's limit with the raw score it has.
    tables = {KEY_GREEDY_FAILS: {(): {B: 0.8, A: 0.2}, (A,): {EOS: 0.9, A: 0.1}, (B,): {EOS: 0.9, A: 0.1}}}
    src, lens = sources((KEY_GREEDY_FAILS, 2))
    worst = (log(0.2) + log(0.9)) / gnmt_length_penalty(2, 1.0)
    # Limit 3: [B A <eos>] at best -2.53 / lp(3) = -1.89, below -1.47: stop after step 1.
    assert log(0.08) / gnmt_length_penalty(3, 1.0) < worst
    model = TableModel(tables, VOCAB)
    (hyps,) = beam_search(
        model, src, lens, beam_size=2, length_penalty=1.0, bos_id=BOS, eos_id=EOS, max_len_a=0, max_len_b=3
    )
    assert [h.tokens for h in hyps] == [[B]]
    assert model.rows_per_step == [1, 2]
    # Limit 20: a longer ending would divide by lp(20) = 4.17, giving -0.61 at best: it must go on.
    assert log(0.08) / gnmt_length_penalty(20, 1.0) > worst
    model = TableModel(tables, VOCAB)
    (hyps,) = beam_search(
        model, src, lens, beam_size=2, length_penalty=1.0, bos_id=BOS, eos_id=EOS, max_len_a=0, max_len_b=20
    )
    assert [h.tokens for h in hyps] == [[B]]
    assert model.rows_per_step == [1, 2, 2]  # [B A] and [A A] end at step 2 (certain <eos>): none live


def test_length_limit_forces_eos_per_sentence():
    # max_len = floor(1.0 * src_len + 0): 2 and 3 target tokens including the forced <eos>.
    src, lens = sources((KEY_LONG, 2), (KEY_LONG, 3))
    greedy = greedy_search(table_model(), src, lens, bos_id=BOS, eos_id=EOS, max_len_a=1.0, max_len_b=0)
    assert_hyps(
        greedy,
        [
            ([A], log(0.9) + log(0.1), log(0.9) + log(0.1)),
            ([A, A], 2 * log(0.9) + log(0.1), 2 * log(0.9) + log(0.1)),
        ],
    )
    beam = beam_search(
        table_model(),
        src,
        lens,
        beam_size=1,
        length_penalty=0.0,
        bos_id=BOS,
        eos_id=EOS,
        max_len_a=1.0,
        max_len_b=0,
    )
    for hyps, one in zip(beam, summary(greedy), strict=True):
        assert_hyps(hyps, [one])


def test_finished_sentences_leave_the_batch_and_search_stops_early():
    model = table_model()
    src, lens = sources((KEY_GREEDY_FAILS, 2), (KEY_LONG, 2))
    greedy_search(model, src, lens, bos_id=BOS, eos_id=EOS, max_len_a=0.0, max_len_b=3)
    assert model.rows_per_step == [2, 2, 1]  # the first sentence ends at step 2, the second at 3
    model = table_model()
    src, lens = sources((KEY_GREEDY_FAILS, 2), (KEY_LENGTH_PENALTY, 2))
    beam_search(
        model, src, lens, beam_size=2, length_penalty=0.0, bos_id=BOS, eos_id=EOS, max_len_a=0.0, max_len_b=50
    )
    assert model.rows_per_step == [2, 4, 2]  # one row per sentence, 2 x 2 beams, then one sentence: stop
    model = table_model()
    greedy_search(model, *sources((KEY_GREEDY_FAILS, 2)), bos_id=BOS, eos_id=EOS, max_len_b=50)
    assert model.rows_per_step == [1, 1]


def test_argument_errors():
    src, lens = sources((KEY_GREEDY_FAILS, 2))
    with pytest.raises(UserError, match="nbest"):
        beam_search(table_model(), src, lens, beam_size=2, nbest=3, bos_id=BOS, eos_id=EOS)
    with pytest.raises(UserError, match="beam size"):
        beam_search(table_model(), src, lens, beam_size=0, bos_id=BOS, eos_id=EOS)
    with pytest.raises(ValueError, match="src_lens"):
        greedy_search(table_model(), src, lens[:0], bos_id=BOS, eos_id=EOS)
    assert greedy_search(table_model(), src[:0], lens[:0], bos_id=BOS, eos_id=EOS) == []


# ----- invariants on a toy attention model -----


def assert_same_or_near_tie(model, sentence, got, want, *, beam, terms, max_len_a=1.5, max_len_b=10) -> bool:
    """True when two searches of `sentence` (one alone, one in a batch) return the same outputs; else
    assert that they part at a near-tie of the model's (tests/support/near_ties.py) and return False."""
    a, b = next(
        ((x.tokens, y.tokens) for x, y in zip(want, got, strict=True) if x.tokens != y.tokens), (None, None)
    )
    if a is None and len(got) == len(want):
        return True
    src_ids, src_len = [*sentence, EOS], len(sentence) + 1
    if beam == 1:
        parting = greedy_parting(model, src_ids, src_len, a, b, bos_id=BOS, eos_id=EOS, terms=terms)
    else:
        limits = dict(max_len_a=max_len_a, max_len_b=max_len_b)
        settings = dict(beam_size=beam, length_penalty=1.0, bos_id=BOS, eos_id=EOS, terms=terms, **limits)
        parting = beam_parting(model, src_ids, src_len, a or [], b or [], **settings)
    assert_near_tie(parting, f"sentence {sentence}")
    return False


# Batches of other shapes sum in other orders: at most 7 steps, the widest product is the 24-term mix (3H),
# scores end in an 11-token log-softmax and attention in a softmax over at most 7 keys.
TOY_SCORE_TERMS = decoding_terms(steps=7, widest=24, keys_or_vocab=11)
TOY_ATTENTION_TERMS = decoding_terms(steps=7, widest=24, keys_or_vocab=7)


@pytest.mark.parametrize("kind", TOY_MODELS)
def test_beam_one_equals_greedy(kind):
    model = ToyAttentionModel(**TOY_MODELS[kind])
    src, lens = toy_batch()
    greedy = greedy_search(model, src, lens, bos_id=BOS, eos_id=EOS, need_attention=True)
    beam = beam_search(
        model, src, lens, beam_size=1, length_penalty=0.0, bos_id=BOS, eos_id=EOS, need_attention=True
    )
    assert len({len(h.tokens) for h in greedy}) > 2, "outputs should have varied lengths"
    for g, (b,) in zip(greedy, beam, strict=True):
        assert b.tokens == g.tokens
        assert b.score == float32_approx(g.score, terms=TOY_SCORE_TERMS)
        assert_float32_close(b.attention, g.attention, terms=TOY_ATTENTION_TERMS)


@pytest.mark.parametrize("kind", TOY_MODELS)
def test_batched_equals_one_at_a_time(kind):
    model = ToyAttentionModel(**TOY_MODELS[kind])
    src, lens = toy_batch()
    greedy = greedy_search(model, src, lens, bos_id=BOS, eos_id=EOS)
    beam = beam_search(model, src, lens, beam_size=3, nbest=3, bos_id=BOS, eos_id=EOS)
    for i, sentence in enumerate(TOY_SENTENCES):
        one_src, one_len = toy_batch([sentence])
        (g,) = greedy_search(model, one_src, one_len, bos_id=BOS, eos_id=EOS)
        if assert_same_or_near_tie(model, sentence, [g], [greedy[i]], beam=1, terms=TOY_SCORE_TERMS):
            assert g.score == float32_approx(greedy[i].score, terms=TOY_SCORE_TERMS)
        (b,) = beam_search(model, one_src, one_len, beam_size=3, nbest=3, bos_id=BOS, eos_id=EOS)
        if assert_same_or_near_tie(model, sentence, b, beam[i], beam=3, terms=TOY_SCORE_TERMS):
            norm_scores = [h.norm_score for h in beam[i]]
            assert [h.norm_score for h in b] == float32_approx(norm_scores, terms=TOY_SCORE_TERMS)


@pytest.mark.parametrize("kind", TOY_MODELS)
def test_search_attention_matches_teacher_forced_maps(kind):
    model = ToyAttentionModel(**TOY_MODELS[kind])
    src, lens = toy_batch()
    beam = beam_search(model, src, lens, beam_size=2, nbest=2, bos_id=BOS, eos_id=EOS, need_attention=True)
    for i, hyps in enumerate(beam):
        n = int(lens[i])
        for h in hyps:
            tgt_in = torch.tensor([[BOS, *h.tokens]])
            cross = model.attention_maps(src[i : i + 1, :n], lens[i : i + 1], tgt_in)["cross"][0]
            if cross.dim() == 4:  # (L, h, T, S) -> the search's (T, L, h, S)
                cross = cross.permute(2, 0, 1, 3)
            assert h.attention.shape == cross.shape
            assert h.attention.shape[0] == len(h.tokens) + 1 and h.attention.shape[-1] == n
            assert_float32_close(h.attention, cross, terms=TOY_ATTENTION_TERMS)
            ones = torch.ones(h.attention.shape[:-1])
            assert_float32_close(h.attention.sum(-1), ones, terms=TOY_ATTENTION_TERMS)


def test_beam_scores_are_sums_of_model_log_probs():
    model = ToyAttentionModel(heads=0)
    src, lens = toy_batch()
    beam = beam_search(model, src, lens, beam_size=4, nbest=4, length_penalty=0.6, bos_id=BOS, eos_id=EOS)
    for i, hyps in enumerate(beam):
        assert [h.norm_score for h in hyps] == sorted((h.norm_score for h in hyps), reverse=True)
        for h in hyps:
            state = model.init_state(model.encode(src[i : i + 1], lens[i : i + 1]))
            total = 0.0
            for prev, nxt in zip([BOS, *h.tokens], [*h.tokens, EOS], strict=True):
                logits, state, _ = model.step(torch.tensor([prev]), state)
                total += float(torch.log_softmax(logits.detach(), -1)[0, nxt])
            assert h.score == float32_approx(total, terms=TOY_SCORE_TERMS)
            lp = gnmt_length_penalty(len(h.tokens) + 1, 0.6)
            assert h.norm_score == float32_approx(total / lp, terms=TOY_SCORE_TERMS)


# ----- the real models, tiny and untrained -----

# At most 9 steps (7 source tokens + 2); the widest product is the 16-unit feed-forward layer; scores end in
# a 24-token log-softmax, attention in a softmax over at most 7 keys.
REAL_SCORE_TERMS = decoding_terms(steps=9, widest=16, keys_or_vocab=REAL_VOCAB)
REAL_ATTENTION_TERMS = decoding_terms(steps=9, widest=16, keys_or_vocab=7)


@pytest.mark.parametrize("kind", REAL_KINDS)
def test_real_model_beam_one_equals_greedy(kind):
    model = tiny_real_model(kind)
    src, lens = toy_batch()
    greedy = greedy_search(model, src, lens, bos_id=BOS, eos_id=EOS, need_attention=True, **REAL_LIMITS)
    beam = beam_search(
        model,
        src,
        lens,
        beam_size=1,
        length_penalty=0.0,
        bos_id=BOS,
        eos_id=EOS,
        need_attention=True,
        **REAL_LIMITS,
    )
    for g, (b,) in zip(greedy, beam, strict=True):
        assert b.tokens == g.tokens
        assert b.score == float32_approx(g.score, terms=REAL_SCORE_TERMS)
        assert_float32_close(b.attention, g.attention, terms=REAL_ATTENTION_TERMS)


@pytest.mark.parametrize("kind", REAL_KINDS)
def test_real_model_batched_equals_one_at_a_time(kind):
    model = tiny_real_model(kind)
    src, lens = toy_batch()
    greedy = greedy_search(model, src, lens, bos_id=BOS, eos_id=EOS, **REAL_LIMITS)
    beam = beam_search(model, src, lens, beam_size=3, nbest=3, bos_id=BOS, eos_id=EOS, **REAL_LIMITS)
    assert len({len(h.tokens) for h in greedy}) > 2
    for i, sentence in enumerate(TOY_SENTENCES):
        one_src, one_len = toy_batch([sentence])
        (g,) = greedy_search(model, one_src, one_len, bos_id=BOS, eos_id=EOS, **REAL_LIMITS)
        if assert_same_or_near_tie(model, sentence, [g], [greedy[i]], beam=1, terms=REAL_SCORE_TERMS):
            assert g.score == float32_approx(greedy[i].score, terms=REAL_SCORE_TERMS)
        (b,) = beam_search(
            model, one_src, one_len, beam_size=3, nbest=3, bos_id=BOS, eos_id=EOS, **REAL_LIMITS
        )
        settings = dict(beam=3, terms=REAL_SCORE_TERMS, **REAL_LIMITS)
        if assert_same_or_near_tie(model, sentence, b, beam[i], **settings):
            assert [h.score for h in b] == float32_approx([h.score for h in beam[i]], terms=REAL_SCORE_TERMS)


@pytest.mark.parametrize("kind", REAL_KINDS)
def test_real_model_search_attention_matches_teacher_forced_maps(kind):
    model = tiny_real_model(kind)
    src, lens = toy_batch()
    beam = beam_search(
        model, src, lens, beam_size=2, nbest=2, bos_id=BOS, eos_id=EOS, need_attention=True, **REAL_LIMITS
    )
    for i, hyps in enumerate(beam):
        n = int(lens[i])
        for h in hyps:
            tgt_in = torch.tensor([[BOS, *h.tokens]])
            with torch.no_grad():
                maps = model.attention_maps(src[i : i + 1, :n], lens[i : i + 1], tgt_in)
            cross = maps["cross"][0]
            if cross.dim() == 4:  # (L, h, T, S) -> the search's (T, L, h, S)
                cross = cross.permute(2, 0, 1, 3)
            assert h.attention.shape == cross.shape
            assert_float32_close(h.attention, cross, terms=REAL_ATTENTION_TERMS)


# ----- the translate command: input lines and the progress bar -----


class FakeTerminal(io.StringIO):
    """A text stream that says it is a terminal."""

    def isatty(self) -> bool:
        return True


def test_input_lines_split_on_newlines_only(tmp_path):
    text = "one\fstill one\r\n\ntwo\u2028still two\x85\nthree"
    lines = ["one\fstill one", "", "two\u2028still two\x85", "three"]
    assert split_input_lines(text) == lines
    assert split_input_lines("a\n\n") == ["a", ""] and split_input_lines("") == []
    path = tmp_path / "in.txt"
    path.write_bytes(text.encode("utf-8"))
    assert read_input_lines(str(path), []) == lines


def test_translator_shows_a_bar_on_a_terminal_and_a_line_in_a_file(monkeypatch):
    tokens = [f"w{i}" for i in range(REAL_VOCAB - 4)]
    vocab = Vocab(["<unk>", "<pad>", "<bos>", "<eos>", *tokens])
    cfg = Config()
    cfg.data.mode, cfg.decode.batch_size = "split", 2
    translator = Translator(tiny_real_model("transformer"), vocab, vocab, cfg)
    sentences = ["w1 w2 w3", "", "w4", "w5 w6 w7 w8"] * 3
    monkeypatch.setattr(engine_module, "PROGRESS_DELAY_S", 0.0)
    outputs = {}
    for name, stream, progress in [
        ("terminal", FakeTerminal(), True),
        ("file", io.StringIO(), True),
        ("off", FakeTerminal(), False),
    ]:
        monkeypatch.setattr(sys, "stderr", stream)
        outputs[name] = [r.outputs for r in translator.translate(sentences, beam_size=2, progress=progress)]
        shown = stream.getvalue()
        expected = {
            "terminal": "translating" in shown and "/9" in shown,
            "file": shown.startswith("translating: 9/9 sentences (100%)")
            and shown.count("\n") == 1
            and "\r" not in shown,
            "off": shown == "",
        }[name]
        assert expected, (name, shown)
    assert outputs["terminal"] == outputs["file"] == outputs["off"]
    assert [o == [] for o in outputs["off"]] == [s == "" for s in sentences]


@pytest.mark.parametrize("vocab", [8000, 8003, 7, 1])
def test_greedy_pick_equals_log_softmax_then_max(vocab):
    """greedy_pick gives max(log_softmax) exactly: first index on ties, <eos> forced at the limit."""
    torch.manual_seed(vocab)
    logits = torch.randn(37, vocab) * 4  # (N, V)
    logits[3] = 0.0  # a row of ties: the first index wins
    if vocab > 5:
        logits[4, [2, vocab - 1]] = 50.0  # two maxima far apart
    expected_scores, expected_tokens = torch.log_softmax(logits, dim=-1).max(dim=-1)
    scores, tokens = greedy_pick(logits, None, EOS)
    assert torch.equal(tokens, expected_tokens)
    # Both sum `vocab` exponentials in their own order and subtract from logits as large as `size`.
    size = float(logits.abs().max())
    assert_float32_close(scores, expected_scores, terms=vocab, scale=size)
    if vocab > EOS:
        at_limit = torch.arange(37) % 3 == 0  # (N,)
        scores, tokens = greedy_pick(logits, at_limit, EOS)
        log_probs = torch.log_softmax(logits, dim=-1)
        assert torch.equal(tokens[at_limit], torch.full((13,), EOS))
        assert_float32_close(scores[at_limit], log_probs[at_limit, EOS], terms=vocab, scale=size)
        assert torch.equal(tokens[~at_limit], expected_tokens[~at_limit])
