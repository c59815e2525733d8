"""How far apart two objective values must be before their order means anything.

A value measured once on a finite eval set carries sampling noise: 9 vs 6 errors out of 360 is
no evidence that one model is better. Verdicts that compare values (did round 2 keep round 1's
order?) ask this module for each value's noise band and treat values whose bands overlap as tied:
- an error rate or accuracy whose eval set size is known (``status.json``'s ``eval_examples``, or
  its ``class_counts``): the 95% Wilson interval of the count (``scipy.stats.binomtest``);
- a point trained with several seeds: the range of its seeds' values (widened to the binomial
  band of its median where that is known);
- otherwise the noise is not measured, and the verdict says so.
For a sequence workload the eval set size counts sequences while its error rate counts tokens:
the band is then wider than the real noise (cautious: it calls fewer reversals, never more).
"""

from __future__ import annotations

import math
import os
import statistics
from dataclasses import dataclass

from tuner.report.run_folders import read_status
from tuner.report.study_data import PhaseData

CONFIDENCE = 0.95
PROPORTIONS = ("error_rate", "accuracy", "top5_accuracy")
RULE = (
    f"values differ when their noise bands do not overlap: the {CONFIDENCE:.0%} Wilson interval of an "
    "error count on the eval set, widened to a point's seed range"
)


@dataclass(frozen=True)
class Band:
    """A value's noise band: values inside it cannot be told apart from it."""

    low: float
    high: float

    def apart(self, other: Band) -> bool:
        return self.high < other.low or other.high < self.low

    def widened(self, other: Band | None) -> Band:
        return self if other is None else Band(min(self.low, other.low), max(self.high, other.high))

    def to_json(self) -> list[float]:
        return [self.low, self.high]


@dataclass(frozen=True)
class Noise:
    """What measures the noise of a later round's values and of the earlier round's they came
    from: each phase's eval set size, and the spread across seeds."""

    examples: int | None  # the later round's eval set size
    source_examples: int | None  # the earlier round's (round 1 may validate on a proxy split)
    seed_half_width: float | None  # half the median range of the later round's seeds

    def band(self, values: list[float]) -> Band | None:
        """A point's band from its seeds' values (their median is its value)."""
        if not values:
            return None
        binomial = binomial_band(statistics.median(values), self.examples)
        seeds = seed_band(values)
        return binomial.widened(seeds) if binomial is not None else seeds

    def source_band(self, value: float) -> Band | None:
        binomial = binomial_band(value, self.source_examples)
        if binomial is not None or self.seed_half_width is None:
            return binomial
        # one earlier trial per point: the seeds' spread at full length stands in for its noise
        return Band(value - self.seed_half_width, value + self.seed_half_width)

    def describe(self) -> str | None:
        parts = []
        if self.examples is not None:
            parts.append(f"{CONFIDENCE:.0%} Wilson interval of {self.examples} eval examples")
        if self.seed_half_width is not None:
            parts.append("the spread across seeds")
        return " and ".join(parts) or None


def measure_noise(phase: PhaseData, source: PhaseData | None, seed_values: list[list[float]]) -> Noise:
    """``phase``'s noise as compared with ``source``'s; ``seed_values``: each point's values."""
    widths = [max(v) - min(v) for v in seed_values if len(v) >= 2]
    return Noise(
        eval_examples(phase),
        eval_examples(source) if source is not None else None,
        statistics.median(widths) / 2 if widths else None,
    )


def is_proportion(metric: str) -> bool:
    """A metric that is a share of examples (``val/error_rate``), so binomial noise applies."""
    return metric.rsplit("/", 1)[-1] in PROPORTIONS


def binomial_band(value: float, examples: int | None) -> Band | None:
    """The Wilson interval of ``value`` as a share of ``examples``; None if either is unknown."""
    if examples is None or examples <= 0 or not 0.0 <= value <= 1.0:
        return None
    return Band(*wilson_interval(round(value * examples), examples))


def wilson_interval(successes: int, trials: int) -> tuple[float, float]:
    """The two-sided ``CONFIDENCE`` Wilson score interval of ``successes`` in ``trials``: what
    ``scipy.stats.binomtest(...).proportion_ci(method="wilson")`` returns (Newcombe's formula, as
    scipy writes it), with ``scipy.special`` only: importing ``scipy.stats`` costs about half a
    second of every ``tuner report``."""
    from scipy.special import ndtri

    z = float(ndtri(0.5 + 0.5 * CONFIDENCE))
    p = successes / trials
    denom = 2 * (trials + z**2)
    center = (2 * trials * p + z**2) / denom
    delta = z / denom * math.sqrt(4 * trials * p * (1 - p) + z**2)
    low = 0.0 if successes == 0 else center - delta
    high = 1.0 if successes == trials else center + delta
    return low, high


def seed_band(values: list[float]) -> Band | None:
    """The range of a point's seeds; None with fewer than two."""
    return Band(min(values), max(values)) if len(values) >= 2 else None


def eval_examples(phase: PhaseData) -> int | None:
    """The size of the split the phase's objective is measured on, from the first of its
    completed trials' run folders readable here (they all share one eval set); None if it does
    not say (an older run) or no folder is on this machine. One file read, not one per trial: a
    round 1 may have thousands."""
    if phase.plan is None or not is_proportion(phase.metric):
        return None
    split = phase.metric.rsplit("/", 1)[0]
    absent: set[str] = set()  # phase folders not on this machine: none of their runs is here
    for slot in phase.completed:
        run_dir = slot.run_dir
        if run_dir is None:
            continue
        folder = os.path.dirname(run_dir) or "."
        if folder in absent:
            continue
        status = read_status(run_dir)
        if isinstance(status, dict):
            return _examples(status, split)
        if not os.path.isdir(folder):
            absent.add(folder)
    return None


def _examples(status: dict[str, object], split: str) -> int | None:
    recorded = status.get("eval_examples")
    if isinstance(recorded, dict) and isinstance(recorded.get(split), int):
        return int(recorded[split])
    classes = status.get("class_counts")
    if isinstance(classes, dict) and isinstance(classes.get(split), list):
        counts = classes[split]
        if all(type(c) is int for c in counts):
            return sum(counts)
    return None
