"""Tolerances for float32 results that reach the same value by different paths.

A batch of one against a batch of five, beam 1 against greedy, a fused kernel against the book's
layers, AVX2 against AVX-512 kernels: each computes the same sums with the additions in another order
(other SIMD widths, other blockings of a matrix product). Summing n float32 terms in any order carries
a rounding error of at most (n - 1) * u * sum(|x_i|), with u = eps / 2 the unit roundoff (the standard
bound for recursive summation, Higham, "Accuracy and Stability of Numerical Algorithms", 2nd ed., §4.2);
two orders can therefore differ by up to n * eps * sum(|x_i|). The helpers here turn that bound into a
comparison: `terms` counts the additions a value goes through on its way (the dot-product length, the
softmax's keys, the steps summed into a score), and `scale` is the size of what was summed, by default
the largest expected value, never taken below 1 (the intermediates, logits and log-sum-exps, are of
order one even where a result is near zero). A real defect (a wrong token's probability, a missed mask,
a stale state) moves a value by far more than the bound, which stays near 1e-3 or below in this suite.
"""

from __future__ import annotations

from collections.abc import Sequence

import pytest
import torch

FLOAT32_EPS = torch.finfo(torch.float32).eps  # 2**-23, about 1.19e-7


def float32_tolerance(terms: int, scale: float) -> float:
    """How far two float32 results of `terms` additions of total size `scale` may lie apart by order alone."""
    return terms * FLOAT32_EPS * max(scale, 1.0)


def decoding_terms(steps: int, widest: int, keys_or_vocab: int) -> int:
    """Additions behind a value decoded over `steps` steps: each step's widest dot product and its softmax."""
    return steps * (widest + keys_or_vocab)


def _scale(expected: torch.Tensor | Sequence[float] | float) -> float:
    """The largest magnitude among the expected values (0 for an empty tensor)."""
    values = (
        expected.detach().double() if isinstance(expected, torch.Tensor) else torch.tensor(expected).double()
    )
    return float(values.abs().max()) if values.numel() else 0.0


def assert_float32_close(
    actual: torch.Tensor,
    expected: torch.Tensor,
    *,
    terms: int,
    scale: float | None = None,
    msg: str | None = None,
) -> None:
    """Assert two float32 tensors agree to what `terms` reordered additions allow (see the module doc)."""
    size = _scale(expected) if scale is None else scale
    tolerance = float32_tolerance(terms, size)
    torch.testing.assert_close(
        actual.detach().double(), expected.detach().double(), rtol=0.0, atol=tolerance, msg=msg
    )


def float32_approx(expected: float | Sequence[float], *, terms: int, scale: float | None = None):
    """pytest.approx for float32 scalars (or a list of them) that `terms` reordered additions produced."""
    size = _scale(expected) if scale is None else scale
    return pytest.approx(expected, rel=0.0, abs=float32_tolerance(terms, size))
