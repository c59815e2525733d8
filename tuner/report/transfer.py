"""Round 1 -> round 2 transfer: did the short trials rank the points as the long ones do?

Round 2 trains round 1's best points at full length; each of its trials records the round-1
trial it came from (``source_trial``, ``source_value``). Rules (stated in every verdict):
- a point's round-2 value is the median over its seeds, at LR multiplier 1 where there is one;
- the rank correlation is Spearman's (scipy), over points with a round-2 value, from 3 points;
- top-k overlap: k = half the points (at least 1), the share of round 1's top k that stay in
  round 2's top k;
- round 1 was too short to rank reliably when at least half of its completed trials had their
  best step in the last 25% (they were still improving when stopped).
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

from tuner.report.best_step import LATE
from tuner.report.findings import Finding, Level, fmt, of, ordinal
from tuner.report.study_data import PhaseData, SlotState

MIN_POINTS = 3
GOOD = 0.5  # rho at or above: transferred well

Quality = Literal["good", "weak", "reversed", "too_few"]


@dataclass(frozen=True)
class TransferPoint:
    source_trial: int
    source_value: float
    value: float | None  # round N's (median over seeds); None: no completed trial yet
    seeds: int
    source_rank: int  # 1 = round 1's best among the points
    rank: int | None  # 1 = round N's best among the points

    def to_json(self) -> dict[str, Any]:
        return {
            "source_trial": self.source_trial,
            "source_value": self.source_value,
            "value": self.value,
            "seeds": self.seeds,
            "source_rank": self.source_rank,
            "rank": self.rank,
        }


@dataclass(frozen=True)
class RankCorrelation(Finding):
    kind: ClassVar[str] = "rank_correlation"
    quality: Quality
    spearman: float | None
    points: int
    top_k: int
    top_k_overlap: int
    best_stayed_best: bool | None


@dataclass(frozen=True)
class SourceTooShort(Finding):
    kind: ClassVar[str] = "source_too_short"
    late: int
    completed: int


@dataclass(frozen=True)
class LrMultiplierWins(Finding):
    kind: ClassVar[str] = "lr_multiplier"
    wins: dict[str, int]  # multiplier -> points where it gave the best value


@dataclass
class TransferResult:
    source_phase: str
    points: list[TransferPoint]
    findings: list[Finding] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "source_phase": self.source_phase,
            "points": [p.to_json() for p in self.points],
            "verdicts": [f.to_json() for f in self.findings],
        }


def _points(phase: PhaseData, minimize: bool) -> list[TransferPoint]:
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
        rows.append(
            (source, float(entry["source_value"]), statistics.median(values) if values else None, len(values))
        )
    sign = 1.0 if minimize else -1.0
    by_source_value = sorted(rows, key=lambda r: (sign * r[1], r[0]))
    source_rank = {r[0]: i for i, r in enumerate(by_source_value, start=1)}
    scored = sorted((r for r in rows if r[2] is not None), key=lambda r: (sign * r[2], r[0]))
    rank = {r[0]: i for i, r in enumerate(scored, start=1)}
    return [
        TransferPoint(source, value_1, value_n, seeds, source_rank[source], rank.get(source))
        for source, value_1, value_n, seeds in by_source_value
    ]


def diagnose_transfer(phase: PhaseData, source: PhaseData | None) -> TransferResult | None:
    """For a round trained from an earlier round's points; None for any other phase."""
    if phase.plan is None or phase.plan.source_phase is None:
        return None
    points = _points(phase, phase.minimize)
    result = TransferResult(phase.plan.source_phase, points)
    scored = [p for p in points if p.value is not None]
    k = max(1, len(scored) // 2)
    top_source = {p.source_trial for p in sorted(scored, key=lambda p: p.source_rank)[:k]}
    top_now = {p.source_trial for p in scored if p.rank is not None and p.rank <= k}
    overlap = len(top_source & top_now)
    first = min(scored, key=lambda p: p.source_rank, default=None)
    stayed = None if first is None else first.rank == 1
    rule = (
        f"Spearman rank correlation of {result.source_phase}'s and {phase.phase}'s values over the same "
        f"points (from {MIN_POINTS}); good >= {GOOD}, reversed < 0"
    )
    common = {
        "points": len(scored),
        "top_k": k,
        "top_k_overlap": overlap,
        "best_stayed_best": stayed,
        "rule": rule,
    }
    if len(scored) < MIN_POINTS:
        result.findings.append(
            RankCorrelation(
                quality="too_few",
                spearman=None,
                level=Level.INFO,
                text=f"{len(scored)} of {len(points)} points have a {phase.phase} value: too few to "
                f"measure how {result.source_phase}'s ranking transferred (needs {MIN_POINTS})",
                **common,
            )
        )
    else:
        rho = _spearman([p.source_value for p in scored], [float(p.value or 0.0) for p in scored])
        result.findings.append(_correlation_finding(phase, result.source_phase, rho, first, common))
    _multipliers(phase, result)
    if source is not None:
        held = any(isinstance(f, RankCorrelation) and f.quality == "good" for f in result.findings)
        _too_short(source, result, ranking_held=held)
    return result


def _spearman(x: list[float], y: list[float]) -> float | None:
    from scipy.stats import spearmanr

    rho = spearmanr(x, y).statistic
    return float(rho) if rho is not None and math.isfinite(rho) else None


def _correlation_finding(
    phase: PhaseData, source: str, rho: float | None, first: TransferPoint | None, common: dict[str, Any]
) -> RankCorrelation:
    n, k, overlap = common["points"], common["top_k"], common["top_k_overlap"]
    best = ""
    if first is not None:
        place = "stayed best" if first.rank == 1 else f"came {ordinal(first.rank or 0)} of {n}"
        best = f"; {source}'s best (trial {first.source_trial}) {place}"
    spearman = fmt(rho) if rho is not None else "undefined"
    numbers = f"Spearman {spearman} over {n} points; top {k} overlap {of(overlap, k, 'points')}{best}"
    if rho is None:
        return RankCorrelation(
            quality="too_few",
            spearman=None,
            level=Level.INFO,
            text=f"the ranking cannot be compared ({numbers}): the values are all equal",
            **common,
        )
    if rho >= GOOD:
        return RankCorrelation(
            quality="good",
            spearman=rho,
            level=Level.OK,
            text=f"{source}'s ranking held at full length ({numbers})",
            **common,
        )
    if rho >= 0:
        return RankCorrelation(
            quality="weak",
            spearman=rho,
            level=Level.WARNING,
            text=f"{source}'s ranking only weakly predicted {phase.phase}'s ({numbers})",
            advice=f"lengthen {source}'s trials (length_fraction) or take more of its points (top_k) "
            "next time; trust the long runs",
            **common,
        )
    return RankCorrelation(
        quality="reversed",
        spearman=rho,
        level=Level.WARNING,
        text=f"{phase.phase} reversed {source}'s order ({numbers}): the short trials ranked the points "
        "the wrong way",
        advice=f"{source} was too short or too noisy to rank: lengthen its trials (length_fraction), add "
        "seeds, and pick from the long runs, not from its ranking",
        **common,
    )


def _multipliers(phase: PhaseData, result: TransferResult) -> None:
    """With ``lr_multipliers``, which multiple of the LR won, per point."""
    multipliers = {float(s.attrs.get("lr_multiplier", 1.0)) for s in phase.slots}
    if len(multipliers) < 2:
        return
    sign = 1.0 if phase.minimize else -1.0
    wins: dict[str, int] = {}
    for point in result.points:
        runs = [
            s
            for s in phase.completed
            if s.attrs.get("source_trial") == point.source_trial and s.value is not None
        ]
        if runs:
            winner = min(runs, key=lambda s: sign * float(s.value or 0.0))
            label = f"{float(winner.attrs.get('lr_multiplier', 1.0)):g}"
            wins[label] = wins.get(label, 0) + 1
    if not wins:
        return
    text = ", ".join(f"x{m} best for {of(n, len(result.points), 'points')}" for m, n in sorted(wins.items()))
    moved = sum(n for m, n in wins.items() if float(m) != 1.0)
    result.findings.append(
        LrMultiplierWins(
            wins=wins,
            level=Level.WARNING if moved * 2 > sum(wins.values()) else Level.INFO,
            rule="per point, the LR multiplier whose trial had the best value",
            text=f"learning-rate multipliers: {text}",
            advice="the best LR moved at full length: retune the LR (and its schedule) at the production "
            "length"
            if moved * 2 > sum(wins.values())
            else None,
        )
    )


def _too_short(source: PhaseData, result: TransferResult, *, ranking_held: bool) -> None:
    """Round 1's trials still improving at their end: a warning, or only a note when its ranking
    held at full length anyway."""
    positions = [s.position for s in source.completed if s.position is not None]
    late = sum(1 for p in positions if p > LATE)
    if not positions or late < len(positions) / 2:
        return
    numbers = f"{of(late, len(positions))} had their best step in the last 25% of training"
    rule = f"at least half of {source.phase}'s completed trials had their best step in the last 25%"
    if ranking_held:
        level, advice = Level.INFO, None
        text = (
            f"{source.phase}'s trials were still improving when stopped ({numbers}), yet their ranking "
            "held: its length was enough to rank these points"
        )
    else:
        level = Level.WARNING
        advice = (
            f"lengthen {source.phase} ({source.round_key}.length_fraction) so trials get past their "
            "early, noisy phase"
        )
        text = (
            f"{source.phase} may have been too short to rank reliably: {numbers} (still improving when "
            "stopped)"
        )
    result.findings.append(
        SourceTooShort(late=late, completed=len(positions), level=level, rule=rule, text=text, advice=advice)
    )
