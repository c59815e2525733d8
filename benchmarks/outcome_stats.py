"""The outcome benchmark's statistics: intervals over runs, differences paired by seed, the
smallest difference a set of runs can detect, and the verdict each comparison supports.

A difference is *beyond the noise* when its 95% interval (Student's t over the paired
differences, one per seed) excludes 0. The *smallest detectable difference* is the one a
two-sided paired t-test at 5% would find 80% of the time with these runs' spread:
``(t(0.975, n-1) + t(0.80, n-1)) * sd / sqrt(n)``; a smaller true difference is usually
reported as "within the noise", which is why every table prints it.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass


@dataclass(frozen=True)
class Interval:
    mean: float
    low: float
    high: float

    def __str__(self) -> str:
        if math.isnan(self.low):
            return f"{self.mean:.4f}"
        return f"{self.mean:.4f} [{self.low:.4f}, {self.high:.4f}]"

    def signed(self) -> str:
        if math.isnan(self.low):
            return f"{self.mean:+.4f}"
        return f"{self.mean:+.4f} [{self.low:+.4f}, {self.high:+.4f}]"

    @property
    def excludes_zero(self) -> bool:
        return self.low > 0 or self.high < 0


def t_interval(values: list[float]) -> Interval:
    """Mean and 95% Student-t interval (no interval from one value)."""
    from scipy import stats

    mean = statistics.fmean(values)
    if len(values) < 2:
        return Interval(mean, math.nan, math.nan)
    half = stats.t.ppf(0.975, len(values) - 1) * statistics.stdev(values) / math.sqrt(len(values))
    return Interval(mean, mean - half, mean + half)


def detectable(differences: list[float]) -> float:
    """The smallest true mean difference these paired runs find 80% of the time at 5% (NaN
    with fewer than 2)."""
    from scipy import stats

    n = len(differences)
    if n < 2:
        return math.nan
    return (
        (stats.t.ppf(0.975, n - 1) + stats.t.ppf(0.80, n - 1)) * statistics.stdev(differences) / math.sqrt(n)
    )


@dataclass(frozen=True)
class Comparison:
    """``a`` minus ``b`` on the seeds both ran, signed so that a positive ``gain`` is ``a`` better."""

    a: str
    b: str
    difference: Interval  # a - b, in the metric's units
    detectable: float
    seeds: int
    minimize: bool

    @property
    def gain(self) -> Interval:
        """The difference signed as "better for a" (negated for a metric to minimise)."""
        d = self.difference
        return Interval(-d.mean, -d.high, -d.low) if self.minimize else d

    @property
    def verdict(self) -> str:
        if math.isnan(self.difference.low):
            return "one seed: no interval"
        if not self.difference.excludes_zero:
            return "within the noise"
        return f"{self.a} {'ahead' if self.gain.mean > 0 else 'behind'} beyond the noise"


def compare(a: str, b: str, by_seed: dict[str, dict[int, float]], minimize: bool) -> Comparison | None:
    """``a`` against ``b`` paired by seed (None when they share no seed)."""
    seeds = sorted(set(by_seed.get(a, {})) & set(by_seed.get(b, {})))
    if not seeds:
        return None
    differences = [by_seed[a][s] - by_seed[b][s] for s in seeds]
    return Comparison(a, b, t_interval(differences), detectable(differences), len(seeds), minimize)


def best_of(names: list[str], by_seed: dict[str, dict[int, float]], minimize: bool) -> str | None:
    """The name with the best mean (the first of equals), among those that ran."""
    ran = [n for n in names if by_seed.get(n)]
    if not ran:
        return None
    means = {n: statistics.fmean(by_seed[n].values()) for n in ran}
    return min(ran, key=lambda n: means[n] if minimize else -means[n])


def relative_gains(
    a: str,
    b_per_workload: dict[str, str],
    by_workload: dict[str, dict[str, dict[int, float]]],
    minimize: dict[str, bool],
) -> Interval | None:
    """``a``'s gain over each workload's ``b``, relative to ``b``'s value, averaged over the
    workloads seed by seed (seed s of every workload is one sample): its mean and interval."""
    per_seed: dict[int, list[float]] = {}
    for workload, b in b_per_workload.items():
        runs = by_workload[workload]
        for seed in sorted(set(runs.get(a, {})) & set(runs.get(b, {}))):
            base = runs[b][seed]
            sign = -1.0 if minimize[workload] else 1.0
            per_seed.setdefault(seed, []).append(sign * (runs[a][seed] - base) / abs(base))
    complete = [statistics.fmean(g) for g in per_seed.values() if len(g) == len(b_per_workload)]
    return t_interval(complete) if complete else None
