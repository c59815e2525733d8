"""``range_trend.spearman``: Spearman's rho and its t-approximation p-value as scipy computes them,
without importing ``scipy.stats`` (half a second of every large report)."""

from __future__ import annotations

import random

import pytest
from scipy import stats

from tuner.report.range_trend import spearman


@pytest.mark.parametrize("n", [3, 8, 40, 1000])
def test_it_is_scipys_spearmanr_with_ties_and_without(n: int) -> None:
    generator = random.Random(n)
    for tied in (False, True):
        x = [generator.random() for _ in range(n)]
        y = [v + generator.gauss(0, 0.5) for v in x]
        if tied:  # a coarse eval set: many equal values on both sides
            x, y = [round(v, 1) for v in x], [round(v, 1) for v in y]
        rho, p_value = spearman(x, y)
        expected = stats.spearmanr(x, y)
        assert rho == pytest.approx(expected.statistic, abs=1e-12)
        assert p_value == pytest.approx(expected.pvalue, abs=1e-12)


def test_a_perfect_order_has_rho_one_and_p_zero() -> None:
    assert spearman([0.1, 0.2, 0.3, 0.4], [4.0, 3.0, 2.0, 1.0]) == (-1.0, 0.0)
