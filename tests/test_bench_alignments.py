"""scripts/bench_alignments.py: the alignment error rate against hand computations, the gold file's links
within its sentences' words, and book tokens projected onto the gold's words."""

from __future__ import annotations

from pathlib import Path

import pytest
from support.helpers import load_script

from attn_mt.config import load_config
from attn_mt.decoding.alignments import WordAlignment


@pytest.fixture
def bench(monkeypatch):
    """scripts/bench_alignments.py as a module while the test runs."""
    return load_script("bench_alignments", monkeypatch)


def test_aer_by_hand(bench):
    sure, possible = bench.parse_links("0-0 1-1 2?1")
    assert sure == {(0, 0), (1, 1)} and possible == {(0, 0), (1, 1), (2, 1)}
    # A = {0-0, 2-1, 2-2}: |A & S| = 1 (0-0), |A & P| = 2 (0-0, 2-1), |A| = 3, |S| = 2: 1 - 3/5
    assert bench.alignment_error_rate({(0, 0), (2, 1), (2, 2)}, sure, possible) == pytest.approx(0.4)
    assert bench.alignment_error_rate(set(sure), sure, possible) == 0.0
    assert bench.alignment_error_rate({(0, 0), (1, 1), (2, 1)}, sure, possible) == 0.0  # P links cost nothing
    assert bench.alignment_error_rate(set(), sure, possible) == 1.0
    # Counts sum over pairs before dividing: (1 + 2) + (0 + 0) over (3 + 2) + (1 + 1)
    pair = bench.GoldPair(0, "a b c", "x y z", sure, possible)
    other = bench.GoldPair(1, "a", "x", {(0, 0)}, {(0, 0)})
    counts = bench.Counts()
    counts.add({(0, 0), (2, 1), (2, 2)}, pair)
    counts.add({(0, 1)}, other)
    assert counts.scores()["aer"] == pytest.approx(1 - 3 / 7)
    assert counts.half(1).scores() == {"aer": 1.0, "precision": 0.0, "recall": 0.0}


def test_the_gold_file_links_stay_within_each_pairs_words(bench):
    gold = bench.read_gold(bench.GOLD)
    assert len(gold) == 60
    assert len({p.line for p in gold}) == 60
    for pair in gold:
        sources, targets = len(pair.source.split(" ")), len(pair.target.split(" "))
        assert pair.sure and pair.sure <= pair.possible
        assert all(0 <= i < sources and 0 <= j < targets for i, j in pair.possible), pair.line
        assert {j for _, j in pair.possible} == set(range(targets)), pair.line  # every French word aligned
        diagonal = bench.diagonal(pair)
        assert sorted(j for _, j in diagonal) == list(range(targets))
        assert all(0 <= i < sources for i, _ in diagonal)


def test_book_tokens_are_projected_onto_the_gold_words(bench):
    book = load_config(Path(__file__).resolve().parent.parent / "configs" / "d2l_bahdanau.yaml")
    text = "Pourquoi es-tu si heureux\xa0? Tom, viens."
    assert bench.word_owners(book, text) == [0, 1, 2, 3, 3, 4, 4, 5, 5]  # heureux ? / tom , / viens .
    subword = load_config(Path(__file__).resolve().parent.parent / "configs" / "transformer.yaml")
    assert bench.word_owners(subword, text) == [0, 1, 2, 3, 4, 5]
    found = WordAlignment(["a", "b", "."], ["x", "y", "?"], [(0, 0), (1, 1), (2, 2), (1, 2)])
    assert bench.projected(found, [0, 1, 1], [0, 1, 1]) == {(0, 0), (1, 1)}
    with pytest.raises(ValueError, match="not those of the gold"):
        bench.projected(found, [0, 1, 1], [0, 1])
