"""Fixed batch shapes (data.batch_shapes): few shapes, little padding, every pair once, and padding that
changes no loss or gradient of the Transformer or the packed GRU model."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from support.synthetic import TINY
from support.tolerances import assert_float32_close, float32_approx

from attn_mt.config import ConfigError, load_config
from attn_mt.data.batch import Batch, ShapedBatch
from attn_mt.data.bucketing import (
    BatchShape,
    fit_shapes,
    fixed_shape_batches,
    pad_to_shape,
    real_shares,
    shape_index,
)
from attn_mt.data.dataset import load_data
from attn_mt.models.build import build_model
from attn_mt.training.loss import masked_cross_entropy

ROOT = Path(__file__).resolve().parents[1]


def lengths(pairs: list[tuple[int, int, int]]) -> tuple[np.ndarray, np.ndarray]:
    """Source and target lengths of `count` pairs of each (source, target, count)."""
    src = np.concatenate([np.full(n, s) for s, _, n in pairs])
    tgt = np.concatenate([np.full(n, t) for _, t, n in pairs])
    return src, tgt


def test_as_many_shapes_as_pair_lengths_pad_nothing():
    src, tgt = lengths([(3, 4, 50), (5, 6, 40), (9, 8, 30)])
    shapes = fit_shapes(src, tgt, max_tokens=80, count=3)
    assert [(s.src, s.tgt) for s in shapes] == [(3, 4), (5, 6), (9, 8)]
    assert [s.rows for s in shapes] == [16, 8, 8]  # 80 // the longer side, down to a multiple of 8


def test_fewer_shapes_merge_the_pairs_that_cost_least_to_pad():
    # 2 shapes for 3 lengths: padding the 10 short pairs to (5, 6) costs less than 40 middle ones to (9, 8)
    src, tgt = lengths([(3, 4, 10), (5, 6, 40), (9, 8, 30)])
    shapes = fit_shapes(src, tgt, max_tokens=80, count=2)
    assert [(s.src, s.tgt) for s in shapes] == [(5, 6), (9, 8)]
    assert shape_index(shapes, np.array([3, 9, 5]), np.array([4, 8, 6])).tolist() == [0, 1, 0]


def test_every_pair_is_in_one_batch_and_only_the_widest_shape_has_empty_rows():
    src, tgt = lengths([(3, 4, 37), (5, 6, 21), (9, 8, 13)])
    shapes = fit_shapes(src, tgt, max_tokens=80, count=3)
    batches = fixed_shape_batches(src, tgt, shapes, np.random.default_rng(0))
    assert sorted(np.concatenate(batches).tolist()) == list(range(len(src)))
    at = shape_index(shapes, src, tgt)
    for batch in batches:
        widest = shapes[int(at[batch].max())]
        assert len(batch) <= widest.rows
        if len(batch) < widest.rows:
            assert widest == shapes[-1]  # what a narrower shape leaves over joins the next one
    assert sum(len(b) < shapes[-1].rows for b in batches) <= 1


def test_padding_to_a_shape_adds_rows_without_loss_that_trimming_keeps():
    batch = Batch(
        torch.tensor([[5, 3], [6, 3]]), torch.tensor([2, 2]), torch.tensor([[7, 3]] * 2), torch.tensor([2, 2])
    )
    shaped = pad_to_shape(batch, BatchShape(rows=4, src=3, tgt=5), pad_id=1)
    assert isinstance(shaped, ShapedBatch) and isinstance(shaped.to("cpu"), ShapedBatch)
    assert shaped.src.shape == (4, 3) and shaped.tgt.shape == (4, 5)
    assert shaped.src_lens.tolist() == [2, 2, 1, 1] and shaped.tgt_lens.tolist() == [2, 2, 0, 0]
    assert shaped.src[2:].eq(1).all() and shaped.tgt[:, 2:].eq(1).all()
    assert shaped.trimmed() is shaped and shaped.num_tgt_tokens == batch.num_tgt_tokens
    assert real_shares([shaped]) == (4 / 12, 4 / 20)


@pytest.mark.parametrize(
    "model_settings",
    [[], ["model.type=gru_bahdanau", "model.num_layers=2", "model.pack_padded=true"]],
    ids=["transformer", "packed-gru"],
)
def test_the_models_loss_and_gradients_ignore_the_shapes_padding(model_settings):
    torch.manual_seed(0)
    cfg = load_config(TINY, model_settings)
    model = build_model(cfg.model, 20, 20).eval()
    src = torch.randint(4, 20, (3, 5))  # (B, S)
    tgt = torch.randint(4, 20, (3, 6))  # (B, T)
    batch = Batch(src, torch.tensor([5, 3, 2]), tgt, torch.tensor([6, 4, 1]))
    shaped = pad_to_shape(batch, BatchShape(rows=8, src=9, tgt=10), pad_id=1)
    results = []
    for b in (batch, shaped):
        model.zero_grad()
        tgt_in = torch.cat([torch.full_like(b.tgt[:, :1], 2), b.tgt[:, :-1]], dim=1)  # (B, T)
        loss = masked_cross_entropy(model(b.src, b.src_lens, tgt_in), b.tgt, b.tgt_lens, 0.1)
        loss.backward()
        results.append((loss.detach(), [p.grad.clone() for p in model.parameters()]))
    (loss, grads), (shaped_loss, shaped_grads) = results
    assert float(shaped_loss) == float32_approx(float(loss), terms=200)
    for got, want in zip(shaped_grads, grads, strict=True):
        assert_float32_close(got, want, terms=200)


def test_batch_shapes_are_checked_against_the_model_and_the_loss():
    with pytest.raises(ConfigError) as error:
        load_config(
            TINY,
            [
                "data.batch_shapes=8",
                "model.type=gru_bahdanau",
                "model.pack_padded=false",
                "train.loss_average=book",
            ],
        )
    assert "model.pack_padded: false" in str(error.value) and "loss_average: book" in str(error.value)
    assert load_config(TINY, ["data.batch_shapes=8", "model.type=gru_bahdanau"]).model.pack_padded


@pytest.mark.corpus
@pytest.mark.parametrize(
    "config, max_tokens", [("transformer-gpu", 16384), ("transformer-gpu", 65536), ("bahdanau-gpu", 8192)]
)
def test_on_the_whole_corpus_16_shapes_keep_most_target_cells_real(corpus_path, config, max_tokens):
    """The GPU configs' pairs, at their token budgets (and the Transformer's at 4x): at most 16 shapes an
    epoch, the same every epoch, at least 85% of the target cells real tokens, every pair in one batch."""
    path = ROOT / "configs" / f"{config}.yaml"
    cfg = load_config(path, [f"data.max_tokens={max_tokens}", "data.batch_shapes=16"])
    train = load_data(cfg.data, str(corpus_path)).train
    seen = []
    for epoch in (0, 1):
        plan = train.plan(epoch, cfg.train.seed)
        assert sorted(np.concatenate(plan).tolist()) == list(range(train.num_examples))
        batches = [train.collate(indices) for indices in plan]
        shapes = {(*b.src.shape, *b.tgt.shape) for b in batches}  # (B, S, B, T)
        source_share, target_share = real_shares(batches)
        print(
            f"max_tokens {cfg.data.max_tokens}, epoch {epoch}: {len(plan)} batches, {len(shapes)} shapes, "
            f"{target_share:.1%} of target and {source_share:.1%} of source cells real"
        )
        assert len(shapes) <= 16 and target_share >= 0.85
        seen.append(shapes)
    assert seen[1] <= {(s.rows, s.src, s.rows, s.tgt) for s in train.shapes}
    assert seen[0] == seen[1]
