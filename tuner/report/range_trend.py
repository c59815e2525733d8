"""The whole trend of the objective along one searched range, and how sure it is.

Why: the position rule (the best trials in the outer 20% of the range) needs several of the few
round-1 points to land in a thin band; with 8 quasi-random trials that band holds about 1.6 of
them, so a study whose error falls steadily as the LR rises, best at 92% of the range, looked
"inside the range". Every trial carries the trend: the Spearman rank correlation of the objective
with the parameter's position (log axis for a log range) uses all of them, and its p-value says
how sure that is with this many trials.

The p-value is exact below ``EXACT_BELOW`` trials (every ordering of the ranks, a permutation
test): the usual t approximation gives p = 0 for any perfect order, even of 3 trials.

The whole trend alone does not move a range (``edge_trend`` does): an optimum inside the range at
72% of it, with the lower values bad, gives a clear whole-range trend toward the top, and moving
the range up then trains where every value is worse (measured: ``benchmarks/calibrate_ranges.py``,
80% false alarms on that case with 20 trials). What tells "better beyond the edge" from "best
just inside it" is the half of the range next to the edge: beyond-edge optima keep improving
there, inside optima turn back.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from tuner.report.range_moves import Edge

CLEAR_P = 0.05  # p <= 0.05: the trend is clear
LIKELY_P = 0.20  # p <= 0.20: likely; more trials would make it sure
UNSURE_P = 0.50  # p <= 0.50: a hint, too weak to act on: cannot tell (above: no trend at all)
#: One-sided p at most this for the trend over the edge's half of the range: what moves a range
#: (chosen by ``benchmarks/calibrate_ranges.py``: at most 5% false alarms on every case there).
EDGE_P = 0.025
EDGE_HALF = 0.5  # the trials within this share of the range from the edge
TREND_ZONE = 1 / 3  # the best trial must lie in the outer third on the side the trend points to
EXACT_BELOW = 10
EDGE_RULE_TEXT = (
    f"the objective still improves toward the edge within the half of the range next to it (Spearman "
    f"rank correlation over the completed trials there, one-sided p <= {EDGE_P:g}; log axis for log "
    f"ranges) and the best trial lies in the outer third of the range there"
)
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
        p_value = exact_p(units, values)
    rising_is_better = (rho < 0) if minimize else (rho > 0)
    side: Edge = "high" if rising_is_better else "low"
    return Trend(rho, p_value, len(units), side, _certainty(p_value))


def edge_trend(
    units: list[float], values: list[float], minimize: bool, edge: Edge, within: float = EDGE_HALF
) -> Trend | None:
    """The trend over the trials in the share ``within`` of the range next to ``edge`` (its half;
    1.0 for all of it), its p-value one-sided toward that edge (exact below ``EXACT_BELOW``
    trials); None when fewer than 3 trials lie there or either side is constant. ``certainty`` is
    ``CLEAR`` when p <= ``EDGE_P``, else ``UNSURE``."""
    near = [
        (u, v)
        for u, v in zip(units, values, strict=True)
        if (u >= 1 - within if edge == "high" else u <= within)
    ]
    xs, ys = [u for u, _ in near], [v for _, v in near]
    if len(xs) < 3 or len(set(xs)) < 2 or len(set(ys)) < 2:
        return None
    rho, _ = spearman(xs, ys)
    if not math.isfinite(rho):
        return None
    # toward the high edge a falling error (minimize) is rho < 0: "less"; a rising score "greater"
    toward_high = "less" if minimize else "greater"
    alternative = toward_high if edge == "high" else ("greater" if toward_high == "less" else "less")
    p_value = _one_sided_p(xs, ys, rho, alternative)
    certainty = Certainty.CLEAR if p_value <= EDGE_P else Certainty.UNSURE
    return Trend(rho, p_value, len(xs), edge, certainty)


def _one_sided_p(xs: list[float], ys: list[float], rho: float, alternative: str) -> float:
    if len(xs) < EXACT_BELOW:
        return exact_p(xs, ys, alternative)
    _, two_sided = spearman(xs, ys)
    against = (rho > 0) if alternative == "less" else (rho < 0)
    return 1 - two_sided / 2 if against else two_sided / 2


def exact_p(xs: list[float], ys: list[float], alternative: str = "two-sided") -> float:
    """The permutation p-value of the rank correlation over every ordering of the ranks, as
    ``scipy.stats.pearsonr(ranks, ranks, method=PermutationMethod())`` gives it where it lists
    every ordering (two-sided: twice the smaller tail, at most 1). Tied values share the mean of
    their ranks (``rankdata``'s default); doubled, every rank is a whole number, so are the
    orderings' statistics, and they are counted exactly (``_null_counts``) for 9 trials too,
    where scipy's 50,000 resamples would only sample 9! orderings. No ``scipy.stats``: importing
    it costs half a CPU second of every report."""
    rank_x = [int(r) for r in 2 * _average_ranks(xs)]
    rank_y = [int(r) for r in 2 * _average_ranks(ys)]
    observed = sum(a * b for a, b in zip(rank_x, rank_y, strict=True))
    counts = _null_counts(tuple(sorted(rank_x)), tuple(sorted(rank_y)))
    total = float(counts.sum())
    less = float(counts[: observed + 1].sum()) / total
    greater = float(counts[observed:].sum()) / total
    if alternative == "less":
        return less
    if alternative == "greater":
        return greater
    return min(1.0, 2 * min(less, greater))


@functools.cache
def _null_counts(weights: tuple[int, ...], values: tuple[int, ...]) -> Any:
    """How many orderings ``p`` of ``values`` give each ``sum(weights[i] * values[p[i]])``: the
    rank statistic's null, counted by placing the values one position at a time over the subsets
    already used (2^n subsets; listing all n! orderings took 1.8 s at n = 9, this takes
    milliseconds). Equal values are distinct items here, as each ordering of the trials is."""
    import numpy as np

    n = len(values)
    top = sum(w * v for w, v in zip(sorted(weights), values, strict=True))  # the largest sum
    counts = np.zeros((1 << n, top + 1), dtype=np.int64)
    counts[0, 0] = 1
    for mask in range(1 << n):
        position = mask.bit_count()
        if position == n or not counts[mask].any():
            continue
        for index, value in enumerate(values):
            if mask & (1 << index):
                continue
            add = weights[position] * value
            counts[mask | (1 << index), add:] += counts[mask, : top + 1 - add]
    return counts[(1 << n) - 1]


def spearman(x: list[float], y: list[float]) -> tuple[float, float]:
    """Spearman's rho and its two-sided p-value by the t approximation: what
    ``scipy.stats.spearmanr`` returns (average ranks for ties, ``n - 2`` degrees of freedom), with
    numpy and ``scipy.special`` only. Importing ``scipy.stats`` costs half a second, a fifth of
    ``tuner report`` on a study of 10,000 trials, where the approximation is the one used."""
    from scipy.special import stdtr

    rho = rank_correlation(x, y)
    n = len(x)
    if not math.isfinite(rho) or n < 3:
        return rho, math.nan
    if abs(rho) >= 1.0:
        return rho, 0.0
    t = rho * math.sqrt((n - 2) / ((1.0 + rho) * (1.0 - rho)))
    return rho, float(2 * stdtr(n - 2, -abs(t)))


def rank_correlation(x: list[float], y: list[float]) -> float:
    """Spearman's rho alone: the correlation of the average ranks (``spearmanr``'s statistic);
    NaN, with numpy's warning, when either side is constant."""
    import numpy as np

    return float(np.corrcoef(_average_ranks(x), _average_ranks(y))[0, 1])


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
