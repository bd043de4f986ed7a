"""The float32 tolerance the suite compares with: wide enough for reordered sums, not for defects."""

from __future__ import annotations

import pytest
import torch
from support.tolerances import FLOAT32_EPS, assert_float32_close, float32_approx, float32_tolerance


def ordered_sums(values: torch.Tensor) -> list[float]:
    """One float32 sum of `values` (n,) added front to back, back to front, pairwise and by torch."""
    forward = torch.zeros((), dtype=torch.float32)
    for v in values:
        forward = forward + v
    backward = torch.zeros((), dtype=torch.float32)
    for v in values.flip(0):
        backward = backward + v
    pairwise = values.clone()
    while pairwise.numel() > 1:
        if pairwise.numel() % 2:
            pairwise = torch.cat([pairwise, torch.zeros(1)])
        pairwise = pairwise[0::2] + pairwise[1::2]
    return [float(forward), float(backward), float(pairwise[0]), float(values.sum())]


@pytest.mark.parametrize("n", [8, 100, 1000])
def test_every_summation_order_stays_within_the_bound(n):
    gen = torch.Generator().manual_seed(n)
    values = torch.randn(n, generator=gen, dtype=torch.float32) * 3.0  # (n,)
    exact = float(values.double().sum())
    scale = float(values.abs().sum())
    sums = ordered_sums(values)
    assert len(set(sums)) > 1 or n == 8, "the orders should round differently"
    for s in sums:
        assert abs(s - exact) <= float32_tolerance(n, scale)
    assert sums == float32_approx([exact] * 4, terms=n, scale=scale)


def test_a_missing_term_is_far_outside_the_bound():
    values = torch.linspace(-1.0, 2.0, 50)  # (50,)
    full, dropped = values.sum(), values[:-1].sum()
    with pytest.raises(AssertionError):
        assert_float32_close(dropped.reshape(1), full.reshape(1), terms=50)
    assert float32_tolerance(50, 1.0) == pytest.approx(50 * FLOAT32_EPS)
    assert float32_tolerance(50, 0.01) == float32_tolerance(50, 1.0)  # never below one unit of scale
