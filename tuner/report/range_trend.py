"""The whole trend of the objective along one searched range, and how sure it is.

Why: the position rule (the best trials in the outer 20% of the range) needs several of the few
round-1 points to land in a thin band; with 8 quasi-random trials that band holds about 1.6 of
them, so a study whose error falls steadily as the LR rises, best at 92% of the range, looked
"inside the range". Every trial carries the trend: the Spearman rank correlation of the objective
with the parameter's position (log axis for a log range) uses all of them, and its p-value says
how sure that is with this many trials.

The p-value is exact below ``EXACT_BELOW`` trials (every ordering of the ranks, a permutation
test): the usual t approximation gives p = 0 for any perfect order, even of 3 trials.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from tuner.report.range_moves import Edge

CLEAR_P = 0.05  # p <= 0.05: the trend is clear
LIKELY_P = 0.20  # p <= 0.20: likely; more trials would make it sure
UNSURE_P = 0.50  # p <= 0.50: a hint, too weak to act on: cannot tell (above: no trend at all)
TREND_ZONE = 1 / 3  # the best trial must lie in the outer third on the side the trend points to
EXACT_BELOW = 10
RESAMPLES = 50_000  # >= 9!: every ordering below EXACT_BELOW trials
TREND_RULE = (
    f"the objective's Spearman rank correlation with the parameter (log axis for log ranges) over "
    f"every completed trial points to an edge (p <= {CLEAR_P:g} clear, p <= {LIKELY_P:g} likely, "
    f"p <= {UNSURE_P:g} cannot tell) and the best trial lies in the outer third of the range there"
)


class Certainty(StrEnum):
    CLEAR = "clear"
    LIKELY = "likely"
    UNSURE = "cannot tell"
    NONE = "no trend"


@dataclass(frozen=True)
class Trend:
    """The rank correlation of the objective with the parameter's position, over ``trials``."""

    spearman: float  # of objective vs position: negative when the objective falls as it rises
    p_value: float  # two-sided
    trials: int
    better_toward: Edge  # the edge the objective improves toward
    certainty: Certainty

    def words(self) -> str:
        """``Spearman -0.88 over 8 trials, p = 0.007`` (what every trend verdict prints)."""
        return f"Spearman {self.spearman:+.2f} over {self.trials} trials, p = {self.p_value:.2g}"


def rank_trend(units: list[float], values: list[float], minimize: bool) -> Trend | None:
    """The trend of ``values`` along ``units`` (positions 0..1); None when either is constant."""
    if len(units) < 3 or len(set(units)) < 2 or len(set(values)) < 2:
        return None
    rho, p_value = spearman(units, values)
    if not math.isfinite(rho):
        return None
    if len(units) < EXACT_BELOW:
        from scipy import stats

        exact = stats.PermutationMethod(n_resamples=RESAMPLES, rng=0)
        p_value = float(stats.pearsonr(stats.rankdata(units), stats.rankdata(values), method=exact).pvalue)
    rising_is_better = (rho < 0) if minimize else (rho > 0)
    side: Edge = "high" if rising_is_better else "low"
    return Trend(rho, p_value, len(units), side, _certainty(p_value))


def spearman(x: list[float], y: list[float]) -> tuple[float, float]:
    """Spearman's rho and its two-sided p-value by the t approximation: what
    ``scipy.stats.spearmanr`` returns (average ranks for ties, ``n - 2`` degrees of freedom), with
    numpy and ``scipy.special`` only. Importing ``scipy.stats`` costs half a second, a fifth of
    ``tuner report`` on a study of 10,000 trials, where the approximation is the one used."""
    import numpy as np
    from scipy.special import stdtr

    rho = float(np.corrcoef(_average_ranks(x), _average_ranks(y))[0, 1])
    n = len(x)
    if not math.isfinite(rho) or n < 3:
        return rho, math.nan
    if abs(rho) >= 1.0:
        return rho, 0.0
    t = rho * math.sqrt((n - 2) / ((1.0 + rho) * (1.0 - rho)))
    return rho, float(2 * stdtr(n - 2, -abs(t)))


def _average_ranks(values: list[float]) -> Any:
    """Ranks 1..n, tied values sharing the mean of their ranks (``scipy.stats.rankdata``'s default)."""
    import numpy as np

    data = np.asarray(values, dtype=float)
    ordinal = np.empty(len(data))
    ordinal[np.argsort(data, kind="mergesort")] = np.arange(1, len(data) + 1)
    _, group = np.unique(data, return_inverse=True)
    return (np.bincount(group, weights=ordinal) / np.bincount(group))[group]


def _certainty(p_value: float) -> Certainty:
    for bound, certainty in (
        (CLEAR_P, Certainty.CLEAR),
        (LIKELY_P, Certainty.LIKELY),
        (UNSURE_P, Certainty.UNSURE),
    ):
        if p_value <= bound:
            return certainty
    return Certainty.NONE


def best_near(edge: Edge, best_unit: float) -> bool:
    """The best trial lies in the outer ``TREND_ZONE`` of the range on ``edge``'s side."""
    return best_unit >= 1 - TREND_ZONE if edge == "high" else best_unit <= TREND_ZONE
