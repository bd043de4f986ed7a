"""tests/support/near_ties.py, the comparison every cross-engine, cross-kernel and cross-batch test uses: a
divergence at a near-tie is accepted, one at a clear margin is rejected, on hand-made probability tables
whose margins are known exactly."""

from __future__ import annotations

import math

import pytest
from support.near_ties import assert_near_tie, beam_decisions, beam_parting, greedy_parting, parting_position
from support.search_fakes import BOS, EOS, TableModel

TERMS = 100  # a small decoding's worth of additions: a tolerance of about 2.4e-5 at scale 1
A, B, C = 3, 4, 5  # three ordinary tokens after PAD, BOS and EOS


def two_way(gap: float) -> TableModel:
    """After the source id 7: token A or B first, their probabilities apart by `gap` in log space; A then
    ends, B then ends (the two outputs [A] and [B])."""
    p_a = 0.5
    p_b = p_a * math.exp(-gap)
    rest = 1.0 - p_a - p_b
    table = {(): {A: p_a, B: p_b, C: rest}, (A,): {EOS: 1.0}, (B,): {EOS: 1.0}, (C,): {EOS: 1.0}}
    return TableModel({7: table}, vocab_size=6)


def test_parting_position_counts_the_implied_eos():
    assert parting_position([3, 4], [3, 4], EOS) is None
    assert parting_position([3, 4], [3, 5], EOS) == 1
    assert parting_position([3], [3, 4], EOS) == 1  # one ended where the other went on
    assert parting_position([], [3], EOS) == 0


def test_a_constructed_near_tie_is_accepted_and_a_clear_margin_rejected_in_greedy():
    tie = greedy_parting(two_way(1e-6), [7, EOS], 2, [A], [B], bos_id=BOS, eos_id=EOS, terms=TERMS)
    assert tie is not None and tie.position == 0 and tie.near_tie
    assert tie.margin == pytest.approx(1e-6, abs=1e-7)
    assert_near_tie(tie, "a near-tie")  # passes
    clear = greedy_parting(two_way(0.3), [7, EOS], 2, [A], [B], bos_id=BOS, eos_id=EOS, terms=TERMS)
    assert clear is not None and not clear.near_tie and clear.margin == pytest.approx(0.3, abs=1e-6)
    with pytest.raises(AssertionError, match=r"part at position 0 .* clear margin of 0\.3"):
        assert_near_tie(clear, "a clear margin")
    same = greedy_parting(two_way(0.3), [7, EOS], 2, [A], [A], bos_id=BOS, eos_id=EOS, terms=TERMS)
    assert same is None


def test_a_constructed_near_tie_is_accepted_and_a_clear_margin_rejected_in_beam_search():
    settings = dict(beam_size=2, length_penalty=0.0, max_len_a=0.0, max_len_b=5, bos_id=BOS, eos_id=EOS)
    tie = beam_parting(two_way(1e-6), [7, EOS], 2, [A], [B], terms=TERMS, **settings)
    assert tie is not None and tie.near_tie and tie.margin == pytest.approx(1e-6, abs=1e-7)
    clear = beam_parting(two_way(0.3), [7, EOS], 2, [A], [B], terms=TERMS, **settings)
    assert clear is not None and not clear.near_tie
    with pytest.raises(AssertionError, match="clear margin"):
        assert_near_tie(clear, "a clear margin")


def test_beam_decisions_replay_the_searchs_own_scores():
    """At step 0 the candidates are log 0.5, log(0.5 e^-0.3) and log of the rest; then each live
    hypothesis has only <eos>, so the finished order is A before B by exactly 0.3."""
    settings = dict(beam_size=2, length_penalty=0.0, max_len_a=0.0, max_len_b=5, bos_id=BOS, eos_id=EOS)
    decisions, finished = beam_decisions(two_way(0.3), [7, EOS], 2, **settings)
    assert [h.tokens for h in finished] == [[A], [B]]
    first = dict(decisions)["beam step 0"]
    p_b = 0.5 * math.exp(-0.3)
    expected = min(0.3, math.log(p_b) - math.log(1 - 0.5 - p_b))
    assert first == pytest.approx(expected, abs=1e-5)
    assert dict(decisions)["the finished hypotheses' order"] == pytest.approx(0.3, abs=1e-5)
