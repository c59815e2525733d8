"""``range_trend.spearman`` and ``exact_p``: Spearman's rho, its t-approximation p-value and its
exact permutation p-value as scipy computes them, without importing ``scipy.stats`` (half a CPU
second of every report)."""

from __future__ import annotations

import itertools
import random

import pytest
from scipy import stats

from tuner.report.range_trend import exact_p, spearman


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


def _tied_sample(n: int, seed: int) -> tuple[list[float], list[float]]:
    """Positions and values of ``n`` trials with ties on both sides (a coarse eval set, trials
    sharing a position), and not all equal on either."""
    generator = random.Random(seed)
    while True:
        x = [round(generator.random(), 1) for _ in range(n)]
        y = [round(v + generator.gauss(0, 0.3), 1) for v in x]
        if len(set(x)) < n and len(set(y)) < n and len(set(x)) > 1 and len(set(y)) > 1:
            return x, y


@pytest.mark.parametrize("n", [3, 5, 8])
@pytest.mark.parametrize("alternative", ["two-sided", "less", "greater"])
def test_the_exact_p_value_is_scipys_permutation_test_with_ties_and_without(n: int, alternative: str) -> None:
    """Below 9 trials scipy's permutation test (50,000 resamples) lists every ordering: the same
    p-values, tied ranks (shared by equal values) included."""
    for seed in range(4):
        x, y = _tied_sample(n, seed)
        untied = [v + i * 1e-6 for i, v in enumerate(x)], [v - i * 1e-6 for i, v in enumerate(y)]
        for xs, ys in ((x, y), untied):
            method = stats.PermutationMethod(n_resamples=50_000, rng=0)
            ranks = stats.rankdata(xs), stats.rankdata(ys)
            expected = stats.pearsonr(*ranks, method=method, alternative=alternative).pvalue
            assert exact_p(xs, ys, alternative) == pytest.approx(expected, abs=1e-12), (xs, ys)


def test_with_9_tied_trials_the_p_value_counts_all_362880_orderings() -> None:
    """Where scipy would sample (9! orderings, more than its resamples), every ordering is counted:
    the p-value is the share of the orderings listed one by one."""
    import numpy as np

    x, y = _tied_sample(9, 0)
    rank_x, rank_y = stats.rankdata(x), stats.rankdata(y)
    orderings = np.array(list(itertools.permutations(range(9))), dtype=np.int8)
    null = rank_y[orderings] @ rank_x
    observed = float(rank_x @ rank_y)
    greater = float(np.mean(null >= observed - 1e-9))
    less = float(np.mean(null <= observed + 1e-9))
    assert exact_p(x, y, "greater") == pytest.approx(greater, abs=1e-12)
    assert exact_p(x, y, "less") == pytest.approx(less, abs=1e-12)
    assert exact_p(x, y) == pytest.approx(min(1.0, 2 * min(less, greater)), abs=1e-12)
