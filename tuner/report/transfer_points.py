"""The points a round trained from an earlier round's, each with both rounds' values and ranks.

Round 2 trains round 1's best points at full length; each of its trials records the round-1
trial it came from (``source_trial``, ``source_value``). A point's round-2 value is the median
over its seeds, at LR multiplier 1 where there is one (the other multipliers are asked another
question: ``lr_multipliers``). Each value carries its noise band (``tuner.report.noise``), so the
verdict (``transfer``) can count the pairs of points both rounds tell apart.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from itertools import combinations
from typing import Any

from tuner.report.noise import Band, Noise
from tuner.report.study_data import PhaseData, SlotState


@dataclass(frozen=True)
class TransferPoint:
    """A point as both rounds scored it: what the report shows and the verdict ranks."""

    source_trial: int
    source_value: float
    value: float | None  # round N's (median over seeds); None: no completed trial yet
    seeds: int
    source_rank: int  # 1 = round 1's best among the points
    rank: int | None  # 1 = round N's best among the points
    source_noise: Band | None = None  # round 1's value's noise band; None: not measured
    noise: Band | None = None  # round N's

    def to_json(self) -> dict[str, Any]:
        return {
            "source_trial": self.source_trial,
            "source_value": self.source_value,
            "value": self.value,
            "seeds": self.seeds,
            "source_rank": self.source_rank,
            "rank": self.rank,
            "source_noise": self.source_noise.to_json() if self.source_noise else None,
            "noise": self.noise.to_json() if self.noise else None,
        }


@dataclass(frozen=True)
class SourceRow:
    """One point of the earlier round, and what the later round made of it."""

    source: int
    source_value: float
    values: list[float]  # round N's, one per seed (at LR multiplier 1 where there is one)

    @property
    def value(self) -> float | None:
        return statistics.median(self.values) if self.values else None


def source_rows(phase: PhaseData) -> list[SourceRow]:
    """The later round's trials grouped by the earlier trial (``source_trial``) they came from."""
    by_source: dict[int, dict[str, Any]] = {}
    for slot in phase.slots:
        source = slot.attrs.get("source_trial")
        if source is None:
            continue
        entry = by_source.setdefault(
            int(source), {"source_value": slot.attrs.get("source_value"), "runs": []}
        )
        entry["runs"].append(slot)
    rows = []
    for source, entry in by_source.items():
        runs = entry["runs"]
        at_one = [s for s in runs if float(s.attrs.get("lr_multiplier", 1.0)) == 1.0] or runs
        values = [s.value for s in at_one if s.state is SlotState.COMPLETE and s.value is not None]
        rows.append(SourceRow(source, float(entry["source_value"]), values))
    return rows


def ranked_points(rows: list[SourceRow], noise: Noise, minimize: bool) -> list[TransferPoint]:
    """Each row ranked in both rounds (1 = best), with its noise bands, in the earlier round's order."""
    sign = 1.0 if minimize else -1.0
    by_source_value = sorted(rows, key=lambda r: (sign * r.source_value, r.source))
    source_rank = {r.source: i for i, r in enumerate(by_source_value, start=1)}
    scored = sorted(
        (r for r in rows if r.value is not None), key=lambda r: (sign * (r.value or 0.0), r.source)
    )
    rank = {r.source: i for i, r in enumerate(scored, start=1)}
    return [
        TransferPoint(
            r.source,
            r.source_value,
            r.value,
            len(r.values),
            source_rank[r.source],
            rank.get(r.source),
            source_noise=noise.source_band(r.source_value),
            noise=noise.band(r.values),
        )
        for r in by_source_value
    ]


def changed_beyond_noise(scored: list[TransferPoint]) -> int | None:
    """Pairs of points that both rounds tell apart and order differently; None when a value's
    noise is not measured."""
    return _pairs_beyond_noise(scored, same_order=False)


def kept_beyond_noise(scored: list[TransferPoint]) -> int | None:
    """Pairs of points that both rounds tell apart and order alike; None when a value's noise is
    not measured."""
    return _pairs_beyond_noise(scored, same_order=True)


def _pairs_beyond_noise(scored: list[TransferPoint], same_order: bool) -> int | None:
    banded = [
        (p.source_value, p.source_noise, p.value, p.noise)
        for p in scored
        if p.source_noise is not None and p.noise is not None and p.value is not None
    ]
    if len(banded) < len(scored):
        return None
    found = 0
    for (source_a, source_band_a, a, band_a), (source_b, source_band_b, b, band_b) in combinations(banded, 2):
        told_apart = source_band_a.apart(source_band_b) and band_a.apart(band_b)
        if told_apart and ((source_a - source_b) * (a - b) > 0) is same_order:
            found += 1
    return found
