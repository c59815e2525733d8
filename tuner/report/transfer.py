"""Round 1 -> round 2 transfer: did the short trials rank the points as the long ones do?

Round 2 trains round 1's best points at full length; each of its trials records the round-1
trial it came from (``source_trial``, ``source_value``): ``transfer_points`` pairs them up.
Rules (stated in every verdict):
- a point's round-2 value is the median over its seeds, at LR multiplier 1 where there is one;
- the rank correlation is Spearman's (as scipy computes it), over points with a round-2 value, from 3 points;
- top-k overlap: k = half the points (at least 1), the share of round 1's top k that stay in
  round 2's top k;
- against noise (``tuner.report.noise``): a pair of points changed order only when both rounds
  tell them apart (their noise bands do not overlap) and disagree; below ``GOOD``, a ranking whose
  every order change lies inside the noise is "within noise", not weak or reversed (round 1 picked
  points that are as good as each other); with no measure of noise, the verdict says so;
- *good* (rho >= 0.5) also needs, where the noise is measured, one pair of points that both
  rounds tell apart in the same order; without one the order agrees only inside the noise, and the
  verdict is "within noise" (with 3 points, rho >= 0.5 comes by chance half the time);
- whether round 1's trials were still improving when they ended is not decided here: it is
  round 1's own best-step verdict (``best_step.still_improving``, the one calibrated rule), which
  this verdict quotes when it says so, so that the two sections never disagree; a warning only
  when the ranking measurably failed to transfer (weak or reversed), a note otherwise; nothing
  when round 1's best-step verdict says anything else (the length looks right, cannot tell);
- round 1 scored at a step round 2 never evaluates (an off-grid ``steps``): a warning that the
  rounds cannot be compared step for step (``tuner.report.scored_steps``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from itertools import combinations
from typing import Any, ClassVar, Literal

from tuner.report.best_step import BestStepLate
from tuner.report.findings import Finding, Level, fmt, of, ordinal
from tuner.report.longer_runs import longer_runs_finding
from tuner.report.lr_multipliers import multiplier_finding
from tuner.report.noise import RULE as NOISE_RULE
from tuner.report.noise import Noise, measure_noise
from tuner.report.range_trend import rank_correlation
from tuner.report.scored_steps import scored_at_other_steps
from tuner.report.study_data import PhaseData
from tuner.report.transfer_points import (
    TransferPoint,
    changed_beyond_noise,
    kept_beyond_noise,
    ranked_points,
    source_rows,
)

MIN_POINTS = 3
GOOD = 0.5  # rho at or above: transferred well

Quality = Literal["good", "weak", "reversed", "within_noise", "too_few"]


@dataclass(frozen=True)
class RankCorrelation(Finding):
    kind: ClassVar[str] = "rank_correlation"
    quality: Quality
    spearman: float | None
    points: int
    top_k: int
    top_k_overlap: int
    best_stayed_best: bool | None
    # pairs of points whose order changed (kept) by more than both rounds' noise; None: not measured
    changed_beyond_noise: int | None = None
    kept_beyond_noise: int | None = None
    noise: str | None = None  # what measured it (``Wilson interval of 360 examples``, ``2 seeds``)


@dataclass(frozen=True)
class SourceTooShort(Finding):
    """Round 1's best-step verdict said its trials were still improving; its numbers, quoted."""

    kind: ClassVar[str] = "source_too_short"
    late: int  # completed trials with their best step in the last 25%
    completed: int
    late_top: int  # ... of the ``top`` best trials
    top: int


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


def diagnose_transfer(
    phase: PhaseData, source: PhaseData | None, *, source_late: BestStepLate | None = None
) -> TransferResult | None:
    """For a round trained from an earlier round's points; None for any other phase.
    ``source_late``: the source round's best-step verdict when it says its trials were still
    improving (``best_step.still_improving``), quoted beside the ranking; None says nothing of
    the source's length."""
    if phase.plan is None or phase.plan.source_phase is None:
        return None
    rows = source_rows(phase)
    noise = measure_noise(phase, source, [r.values for r in rows])
    points = ranked_points(rows, noise, phase.minimize)
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
        f"points (from {MIN_POINTS}); good >= {GOOD} with, where the noise is measured, a pair of points "
        f"both rounds tell apart in the same order; reversed < 0; within noise when no pair of points "
        f"changed order by more than the noise ({NOISE_RULE})"
    )
    common = {
        "points": len(scored),
        "top_k": k,
        "top_k_overlap": overlap,
        "best_stayed_best": stayed,
        "rule": rule,
        "changed_beyond_noise": changed_beyond_noise(scored),
        "kept_beyond_noise": kept_beyond_noise(scored),
        "noise": noise.describe(),
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
        # more of the source's points is advice only while it has more than were taken
        more_points = source is None or len(points) < len(source.completed)
        finding = _correlation_finding(phase, result.source_phase, rho, first, common, more_points)
        if rho is None:
            finding = _all_equal(phase, result.source_phase, scored, noise, common) or finding
        elif finding.quality == "within_noise":
            finding = _told_apart_now(phase, result.source_phase, scored, finding, common) or finding
        result.findings.append(finding)
    multipliers = multiplier_finding(phase, [p.source_trial for p in points], noise)
    if multipliers is not None:
        result.findings.append(multipliers)
    longer = longer_runs_finding(phase, source, noise)
    if longer is not None:
        result.findings.append(longer)
    if source is not None:
        other_steps = scored_at_other_steps(phase, source)
        if other_steps is not None:
            result.findings.insert(0, other_steps)  # read before the verdict it qualifies
    if source is not None and source_late is not None:
        correlation = next((f for f in result.findings if isinstance(f, RankCorrelation)), None)
        quality: Quality = correlation.quality if correlation else "too_few"
        result.findings.append(_too_short(source, source_late, quality))
    return result


def _spearman(x: list[float], y: list[float]) -> float | None:
    """Spearman's rho (``scipy.stats.spearmanr``'s, computed by ``range_trend.rank_correlation``
    without importing ``scipy.stats``: half a CPU second of every report with a round 2); None
    when either side is constant, where it is undefined."""
    if len(set(x)) < 2 or len(set(y)) < 2:
        return None
    rho = rank_correlation(x, y)
    return rho if math.isfinite(rho) else None


def _all_equal(
    phase: PhaseData, source: str, scored: list[TransferPoint], noise: Noise, common: dict[str, Any]
) -> RankCorrelation | None:
    """A round whose points all scored the same value on an eval set small enough that one
    example moves it a whole step: the split, not the points, is what cannot tell them apart."""
    for name, values, examples in (
        (source, [p.source_value for p in scored], noise.source_examples),
        (phase.phase, [float(p.value or 0.0) for p in scored], noise.examples),
    ):
        if len(set(values)) != 1 or examples is None or not 0.0 <= values[0] <= 1.0:
            continue
        count = round(values[0] * examples)
        return RankCorrelation(
            quality="too_few",
            spearman=None,
            level=Level.INFO,
            text=f"{name}'s {len(values)} points all scored {fmt(values[0])} ({count} of {examples} "
            f"eval examples): a split of {examples} examples moves the value in steps of "
            f"{fmt(1 / examples)}, too coarse to separate them, so the ranking cannot be compared",
            advice="a larger validation split would separate them (a few thousand examples move it "
            "in steps of 0.0005 or less), or more seeds per point",
            **common,
        )
    return None


def _told_apart_now(
    phase: PhaseData, source: str, scored: list[TransferPoint], found: RankCorrelation, common: dict[str, Any]
) -> RankCorrelation | None:
    """No pair changed order beyond both rounds' noise, yet the later round tells pairs apart
    that the earlier could not: it found an order the short runs were too noisy to see."""
    banded = [p for p in scored if p.source_noise is not None and p.noise is not None]
    if len(banded) < len(scored):
        return None
    pairs = list(combinations(banded, 2))
    resolved = sum(
        1
        for a, b in pairs
        if a.noise.apart(b.noise) and not a.source_noise.apart(b.source_noise)  # type: ignore[union-attr]
    )
    if not resolved:
        return None
    best = min(scored, key=lambda p: p.rank or len(scored) + 1)
    return RankCorrelation(
        quality=found.quality,
        spearman=found.spearman,
        level=Level.INFO,
        text=f"{source} could not tell these points apart (their values lie inside each other's noise) "
        f"and {phase.phase} does: {of(resolved, len(pairs), 'pairs')} apart beyond its noise "
        f"({common['noise']}); its best is trial {best.source_trial}'s point ({fmt(best.value or 0.0)}): "
        f"trust {phase.phase}'s order, not {source}'s",
        advice=f"choose from {phase.phase}'s runs; {source}'s short runs ranked these points by noise",
        **common,
    )


def _correlation_finding(
    phase: PhaseData,
    source: str,
    rho: float | None,
    first: TransferPoint | None,
    common: dict[str, Any],
    more_points: bool,
) -> RankCorrelation:
    n, k, overlap = common["points"], common["top_k"], common["top_k_overlap"]
    best = ""
    if first is not None:
        place = "stayed best" if first.rank == 1 else f"came {ordinal(first.rank or 0)} of {n}"
        best = f"; {source}'s best (trial {first.source_trial}) {place}"
    spearman = fmt(rho) if rho is not None else "undefined"
    numbers = f"Spearman {spearman} over {n} points; top {k} overlap {of(overlap, k, 'points')}{best}"
    changed, noise = common["changed_beyond_noise"], common["noise"]
    if rho is None:
        return RankCorrelation(
            quality="too_few",
            spearman=None,
            level=Level.INFO,
            text=f"the ranking cannot be compared ({numbers}): the values of a round are all equal",
            **common,
        )
    kept = common["kept_beyond_noise"]
    if rho >= GOOD and kept == 0 and not changed:
        # the same order, but by values inside each other's noise: with 3 points rho >= 0.5 comes
        # by chance half the time, and measured it said "held" in up to a quarter of rounds whose
        # long runs reversed the short ones' order (benchmarks/calibrate_transfer.py)
        return RankCorrelation(
            quality="within_noise",
            spearman=rho,
            level=Level.INFO,
            text=f"{phase.phase}'s order follows {source}'s, but only inside the noise ({numbers}; no "
            f"pair of points is told apart by both rounds, {noise}): these points are as good as each "
            "other as far as these runs can tell, and whether the ranking held cannot be said",
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
    pairs = n * (n - 1) // 2
    if changed == 0:
        return RankCorrelation(
            quality="within_noise",
            spearman=rho,
            level=Level.INFO,
            text=f"{phase.phase}'s order differs from {source}'s only inside the noise ({numbers}; no "
            f"pair of points changed order by more than the noise, {noise}): these points are as good "
            "as each other as far as these runs can tell",
            **common,
        )
    if changed is None:
        caveat = (
            "; noise not measured (one seed per point and no eval set size recorded), so this may be noise"
        )
        more = f"; train {phase.phase} with seeds: 2 or more to tell a real change from noise"
    else:
        caveat = f"; {of(changed, pairs, 'pairs')} changed order beyond the noise ({noise})"
        more = ""
    if rho >= 0:
        return RankCorrelation(
            quality="weak",
            spearman=rho,
            level=Level.WARNING,
            text=f"{source}'s ranking only weakly predicted {phase.phase}'s ({numbers}{caveat})",
            advice=f"lengthen {source}'s trials (length_fraction)"
            f"{' or take more of its points (top_k)' if more_points else ''} next time; trust the long "
            f"runs{more}",
            **common,
        )
    return RankCorrelation(
        quality="reversed",
        spearman=rho,
        level=Level.WARNING,
        text=f"{phase.phase} reversed {source}'s order ({numbers}{caveat}): the short trials ranked the "
        "points the wrong way",
        advice=f"{source} was too short or too noisy to rank: lengthen its trials (length_fraction), add "
        f"seeds, and pick from the long runs, not from its ranking{more}",
        **common,
    )


def _too_short(source: PhaseData, late: BestStepLate, quality: Quality) -> SourceTooShort:
    """Round 1's best-step verdict said its trials were still improving at their end: quoted, with
    what the ranking made of it. A warning when the ranking measurably failed to transfer (weak,
    reversed): lengthening round 1 is then the fix; a note when it held, or when nothing could be
    measured (no advice to lengthen a round whose ranking may have been fine)."""
    numbers = (
        f"{late.late_top} of the top {late.top}, {late.late_all} of {late.completed} completed have their "
        "best step in the last 25% of training"
    )
    said = f"{source.phase}'s best-step verdict says its trials were still improving when they ended"
    rule = f"{source.phase}'s best-step verdict is 'still improving' by its own rule: {late.rule}"
    level, advice = Level.INFO, None
    if quality == "good":
        text = f"{said} ({numbers}), yet their ranking held: its length was enough to rank these points"
    elif quality in ("too_few", "within_noise"):
        why = "too few points to measure" if quality == "too_few" else "the order changes are within noise"
        text = f"{said} ({numbers}); whether that hurt its ranking cannot be told ({why})"
    else:
        level = Level.WARNING
        advice = (
            f"lengthen {source.phase} ({source.round_key}.length_fraction) so trials get past their "
            "early, noisy phase"
        )
        text = f"{source.phase} may have been too short to rank reliably: {said} ({numbers})"
    return SourceTooShort(
        late=late.late_all,
        completed=late.completed,
        late_top=late.late_top,
        top=late.top,
        level=level,
        rule=rule,
        text=text,
        advice=advice,
    )
