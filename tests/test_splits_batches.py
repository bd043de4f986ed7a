"""Grouped splits, token-budget and book batches, load_data in both modes, and the data report."""

from __future__ import annotations

import collections
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from attn_mt.config import DataConfig
from attn_mt.data.book import BookTrainSet, build_array
from attn_mt.data.bucketing import BucketTrainSet, token_budget_batches
from attn_mt.data.corpus import read_pairs
from attn_mt.data.dataset import load_data
from attn_mt.data.preprocess import clean_text, tokenize
from attn_mt.data.report import format_report
from attn_mt.data.splits import grouped_split
from attn_mt.data.trainset import TokenSequences, epoch_rng, iter_batches
from attn_mt.data.vocab import Vocab
from attn_mt.errors import UserError

WORDS = ["red", "blue", "cat", "dog", "runs", "sleeps", "big", "small", "the", "a"]


def _synthetic_lines(n_english: int = 60) -> list[str]:
    """English sentence k has (k % 3) + 1 French translations and 1 + k % 7 words."""
    lines = []
    for k in range(n_english):
        english = " ".join(WORDS[(k + j) % len(WORDS)] for j in range(1 + k % 7)) + f" n{k}."
        for r in range(k % 3 + 1):
            lines.append(f"{english.capitalize()}\tfr{r} {english}")
    return lines


@pytest.fixture
def synthetic(tmp_path) -> Path:
    path = tmp_path / "synthetic.txt"
    path.write_text("\n".join(_synthetic_lines()) + "\n", encoding="utf-8")
    return path


def _split_cfg(**overrides) -> SimpleNamespace:
    values = dict(
        mode="split",
        path=None,
        num_examples=600,
        num_steps=10,
        batch_size=64,
        min_freq=1,
        normalize_apostrophes=False,
        split_seed=0,
        valid_size=5,
        test_size=7,
        max_len=30,
        max_tokens=64,
        languages="en-fr",
        direction="en-fr",
        tokenizer="book",
        batch_shapes=0,
    )
    values.update(overrides)
    return SimpleNamespace(**values)


# ----- grouped split -----


def test_split_is_grouped_deterministic_and_disjoint():
    src = ["a", "b", "a", "c", "d", "b", "e", "f", "g", "a"]
    tgt = [f"t{i}" for i in range(len(src))]
    first = grouped_split(src, tgt, valid_size=2, test_size=2, seed=3)
    again = grouped_split(src, tgt, valid_size=2, test_size=2, seed=3)
    assert first == again
    valid_src, test_src = {ex.src for ex in first.valid}, {ex.src for ex in first.test}
    train_src = {src[i] for i in first.train}
    assert len(valid_src) == 2 and len(test_src) == 2
    assert not (train_src & valid_src or train_src & test_src or valid_src & test_src)
    assert train_src | valid_src | test_src == set(src)
    assert first.train == sorted(first.train)  # file order
    held_pairs = sum(len(ex.refs) for ex in first.valid + first.test)
    assert len(first.train) + held_pairs == len(src)
    seeds = {tuple(ex.src for ex in grouped_split(src, tgt, 2, 2, seed).valid) for seed in range(8)}
    assert len(seeds) > 1


def test_held_out_examples_keep_every_reference_in_file_order():
    src = ["x", "y", "x", "x", "y", "z"]
    tgt = ["x1", "y1", "x2", "x1", "y2", "z1"]  # "x1" twice: kept once
    split = grouped_split(src, tgt, valid_size=1, test_size=1, seed=0)
    refs = {ex.src: ex.refs for ex in split.valid + split.test}
    expected = {"x": ["x1", "x2"], "y": ["y1", "y2"], "z": ["z1"]}
    assert all(refs[s] == expected[s] for s in refs)


def test_split_without_training_data_is_a_user_error():
    with pytest.raises(UserError, match="leaves no training data"):
        grouped_split(["a", "b", "a"], ["1", "2", "3"], valid_size=1, test_size=1, seed=0)


# ----- token-budget batches -----


def test_token_budget_batches_cover_everything_within_budget():
    rng = np.random.default_rng(0)
    src = rng.integers(1, 20, size=500)
    tgt = rng.integers(1, 20, size=500)
    batches = token_budget_batches(src, tgt, max_tokens=100, rng=epoch_rng(7, 0))
    flat = sorted(i for b in batches for i in b)
    assert flat == list(range(500))
    for batch in batches:
        assert len(batch) * max(max(src[i], tgt[i]) for i in batch) <= 100
    longest = [max(max(src[i], tgt[i]) for i in b) for b in batches]
    assert longest != sorted(longest)  # batch order is shuffled across buckets
    widest = np.maximum(src, tgt)
    ranges = sorted((int(widest[b].min()), int(widest[b].max())) for b in batches)
    for (_, high), (low, _) in zip(ranges, ranges[1:], strict=False):
        assert high <= low  # length-sorted buckets: batches cover consecutive length ranges


def test_token_budget_batches_are_a_function_of_seed_and_epoch():
    lens = np.array([3, 5, 5, 5, 2, 9, 9, 4, 4, 4, 4, 7])

    def plan(seed: int, epoch: int) -> list[list[int]]:
        return [b.tolist() for b in token_budget_batches(lens, lens, 12, epoch_rng(seed, epoch))]

    first = plan(1, 2)
    assert plan(1, 3) != first and plan(1, 2) == first  # the plan in between leaves no state behind
    assert plan(1, 2) != plan(2, 2)
    assert plan(-1, 0) != plan(1, 0)  # negative seeds work and stay distinct
    oversize = token_budget_batches(np.array([50, 2]), np.array([1, 2]), 10, epoch_rng(0, 0))
    assert sorted(b.tolist() for b in oversize) == [[0], [1]]


def test_bucket_collate_pads_to_the_longest_and_appends_eos():
    src = TokenSequences.from_lists([[5, 6], [7], [8, 9, 10]])
    tgt = TokenSequences.from_lists([[11], [12, 13, 14], [15]])
    assert src.ids.dtype == np.int32 and src.starts.tolist() == [0, 2, 3]
    assert src.lengths.tolist() == [2, 1, 3]
    train = BucketTrainSet(src, tgt, max_tokens=20, pad_id=1, eos_id=3)
    batch = train.collate([2, 1])
    assert batch.src.tolist() == [[8, 9, 10, 3], [7, 3, 1, 1]]
    assert batch.src_lens.tolist() == [4, 2]
    assert batch.tgt.tolist() == [[15, 3, 1, 1], [12, 13, 14, 3]]
    assert batch.tgt_lens.tolist() == [2, 4]
    assert batch.num_tgt_tokens == 6
    assert train.num_examples == 3


def test_token_sequences_from_texts_and_iter_batches():
    vocab = Vocab.build([["a", "b", "b"]], min_freq=1)  # b 4, a 5
    seqs = TokenSequences.from_texts(["a b", "b", "zz a"], vocab)
    assert [seqs[i] for i in range(3)] == [[5, 4], [4], [0, 5]]
    train = BucketTrainSet(seqs, seqs, max_tokens=6, pad_id=1, eos_id=3)
    plan = train.plan(0, 0)
    skipped = list(iter_batches(train, 0, 0, start=1))
    assert len(skipped) == len(plan) - 1
    assert skipped[0].src.tolist() == train.collate(plan[1]).src.tolist()


# ----- book batches -----


def test_book_plan_like_a_shuffled_dataloader():
    array, valid = build_array([[i % 50 + 4] for i in range(601)], num_steps=10, pad_id=1, eos_id=3)
    train = BookTrainSet(array, valid, array, valid, batch_size=64)
    plan = train.plan(0, 0)
    assert [len(b) for b in plan] == [64] * 9 + [25]
    assert sorted(i for b in plan for i in b) == list(range(601))
    assert plan == train.plan(0, 0) and plan != train.plan(1, 0) and plan != train.plan(0, 1)
    batch = train.collate(plan[-1])
    assert batch.src.shape == (25, 10) and batch.tgt.shape == (25, 10)
    assert batch.src_lens.tolist() == [2] * 25
    assert batch.src.dtype == batch.src_lens.dtype == batch.tgt.dtype == torch.long


def test_book_mode_takes_num_examples_plus_one_pairs(synthetic):
    cfg = _split_cfg(mode="book", num_examples=20, num_steps=5, batch_size=8, min_freq=2)
    data = load_data(cfg, str(synthetic))
    assert data.train.num_examples == 21
    assert [len(b) for b in data.train.plan(0, 0)] == [8, 8, 5]
    raw = read_pairs(synthetic)[:21]
    src_lengths = [len(tokenize(clean_text(e))) + 1 for e, _ in raw]
    assert data.report["splits"]["train"]["truncated_src"] == sum(n > 5 for n in src_lengths)
    assert data.report["splits"]["train"]["pairs"] == 21
    everything = load_data(_split_cfg(mode="book", num_examples=0), str(synthetic))
    assert everything.train.num_examples == len(_synthetic_lines())


# ----- load_data, split mode -----


def test_split_mode_end_to_end(synthetic):
    data = load_data(_split_cfg(max_len=7), str(synthetic))
    lines = _synthetic_lines()
    by_english = collections.defaultdict(list)
    for line in lines:
        english, french = line.split("\t")
        by_english[clean_text(english)].append(clean_text(french))
    assert len(data.valid) == 5 and len(data.test) == 7
    for ex in data.valid + data.test:
        assert ex.refs == by_english[ex.src]  # every French translation is a reference
    report = data.report
    train = report["splits"]["train"]
    held = {ex.src for ex in data.valid + data.test}
    train_english = [e for e in by_english if e not in held]
    kept = [
        (e, f)
        for e in train_english
        for f in by_english[e]
        if len(tokenize(e)) + 1 <= 7 and len(tokenize(f)) + 1 <= 7
    ]
    assert train["pairs"] == data.train.num_examples == len(kept)
    assert train["dropped_for_length"] == sum(len(by_english[e]) for e in train_english) - len(kept)
    assert train["dropped_for_length"] > 0
    assert report["overlap"] == {"train_valid": 0, "train_test": 0, "valid_test": 0}
    assert report["splits"]["valid"]["refs_per_sentence"]["max"] == max(len(ex.refs) for ex in data.valid)
    assert report["vocab"] == {"src": len(data.src_vocab), "tgt": len(data.tgt_vocab)}
    # the vocabulary comes from the kept training pairs only: held-out sentence ids like "n3" are absent
    held_markers = {tokenize(s)[-2] for s in held}
    assert not held_markers & set(data.src_vocab.idx_to_token)
    for indices in data.train.plan(0, 0):
        batch = data.train.collate(indices)
        assert batch.src.shape[0] * max(batch.src.shape[1], batch.tgt.shape[1]) <= 64
        assert int(batch.src_lens.max()) == batch.src.shape[1]
        assert int(batch.tgt_lens.max()) == batch.tgt.shape[1]
    text = format_report(report)
    assert "valid" in text and "dropped for length > 7 tokens" in text and "train/valid 0" in text


def test_split_mode_with_the_real_config_class_and_errors(synthetic):
    cfg = DataConfig(mode="split", valid_size=5, test_size=5, max_len=30, max_tokens=64, min_freq=1)
    assert load_data(cfg, str(synthetic)).report["splits"]["test"]["english_sentences"] == 5
    with pytest.raises(UserError, match="data.max_tokens = 4 is smaller than the longest training pair"):
        load_data(_split_cfg(max_tokens=4), str(synthetic))
    with pytest.raises(UserError, match="data.max_len = 1 drops every training pair"):
        load_data(_split_cfg(max_len=1), str(synthetic))
    with pytest.raises(UserError, match="data.mode: 'weird'"):
        load_data(_split_cfg(mode="weird"), str(synthetic))


# ----- the real corpus -----


@pytest.mark.corpus
def test_real_corpus_split_mode(corpus_path):
    cfg = DataConfig(mode="split", valid_size=1000, test_size=2000, max_len=30, max_tokens=4096)
    data = load_data(cfg, str(corpus_path))
    report = data.report
    assert report["corpus_pairs"] == 167_130
    assert report["overlap"] == {"train_valid": 0, "train_test": 0, "valid_test": 0}
    assert report["splits"]["valid"]["english_sentences"] == 1000
    assert report["splits"]["test"]["english_sentences"] == 2000
    per_english = collections.Counter(clean_text(e) for e, _ in read_pairs(corpus_path))
    held_pairs = sum(per_english[ex.src] for ex in data.valid + data.test)
    train = report["splits"]["train"]
    assert train["pairs"] + train["dropped_for_length"] + held_pairs == 167_130
    assert report["splits"]["test"]["pairs"] == sum(len(ex.refs) for ex in data.test)
    assert report["splits"]["test"]["refs_per_sentence"]["max"] > 1
    assert data.src_vocab.idx_to_token[:4] == ["<unk>", "<pad>", "<bos>", "<eos>"]
    plan = data.train.plan(0, 0)
    assert sorted(i for b in plan for i in b) == list(range(data.train.num_examples))
