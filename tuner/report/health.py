"""Search health: how the phase's trials ended, where they diverged, and whether to go on.

Rules (stated in every verdict):
- failure rate = failed / finished slots (a retried attempt is not a failure, only a slot's
  last attempt counts; divergence is not a failure); more than 20% of at least 5 finished trials
  is a warning, as during the run; every finished trial failed is a warning at any count (with the
  top reason); some failures among fewer than 5 finished trials are too few to judge (info);
- a divergence region: a numeric hyperparameter with a threshold beyond which at least
  ``REGION_PURITY`` of the finished trials diverged, holding every diverged trial;
- still improving: a new best value among the last quarter of completed trials (in the order
  they finished); plateaued: no new best among the last half, with at least ``PLATEAU_MIN``
  completed trials.
"""

from __future__ import annotations

import statistics
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

from tuner.orchestrate.budget import FAILURE_WARNING_RATE
from tuner.report.findings import Finding, Level, fmt, of, ordinal, pct
from tuner.report.study_data import PhaseData, SlotState, TrialSlot

MIN_FINISHED_FOR_RATE = 5
REGION_PURITY = 0.8
PLATEAU_MIN = 10
IMPROVING_RULE = (
    "improving: a new best among the last quarter of completed trials (in the order they finished); "
    f"plateaued: none among the last half, with at least {PLATEAU_MIN} completed"
)

Trend = Literal["improving", "slowing", "plateaued", "too_few"]


@dataclass(frozen=True)
class FailureRate(Finding):
    kind: ClassVar[str] = "failure_rate"
    failed: int
    finished: int
    rate: float
    reasons: dict[str, int]


@dataclass(frozen=True)
class DivergenceRegion(Finding):
    kind: ClassVar[str] = "divergence_region"
    param: str
    side: Literal["above", "below"]
    threshold: float
    diverged: int
    beyond: int  # finished trials past the threshold
    total_diverged: int


@dataclass(frozen=True)
class DivergedScattered(Finding):
    kind: ClassVar[str] = "diverged_scattered"
    diverged: int
    finished: int


@dataclass(frozen=True)
class Progress(Finding):
    kind: ClassVar[str] = "progress"
    trend: Trend
    completed: int
    last_improvement: int | None  # 1-based position (in finishing order) of the trial that set the best
    recent_spread: float | None  # interquartile range of the last quarter's values


@dataclass
class HealthResult:
    counts: dict[str, int]
    reasons: dict[str, int]
    attempts: int
    best_so_far: list[tuple[int, float, float]]  # (slot, value, best so far) in finishing order
    findings: list[Finding] = field(default_factory=list)

    @property
    def trend(self) -> Trend:
        progress = next((f for f in self.findings if isinstance(f, Progress)), None)
        return progress.trend if progress is not None else "too_few"

    def to_json(self) -> dict[str, Any]:
        return {
            "counts": self.counts,
            "failure_reasons": self.reasons,
            "attempts": self.attempts,
            "rule": IMPROVING_RULE,
            "best_so_far": [{"trial": s, "value": v, "best": b} for s, v, b in self.best_so_far],
            "verdicts": [f.to_json() for f in self.findings],
        }


def diagnose_health(phase: PhaseData, *, trend: bool = True) -> HealthResult:
    """Counts, failure rate, divergence region; with ``trend`` (a phase that searches), whether
    the best value is still improving."""
    counts = Counter(str(s.state) for s in phase.slots)
    reasons = Counter(s.failure_reason or "crashed" for s in phase.with_state(SlotState.FAILED))
    history = _best_so_far(phase)
    result = HealthResult(
        {str(state): counts.get(str(state), 0) for state in SlotState},
        dict(sorted(reasons.items())),
        phase.attempts,
        history,
    )
    _failure_rate(phase, result)
    _divergence(phase, result)
    if trend:
        _progress(phase, history, result)
    return result


def _failure_rate(phase: PhaseData, result: HealthResult) -> None:
    failed = len(phase.with_state(SlotState.FAILED))
    finished = failed + len(phase.with_state(SlotState.COMPLETE, SlotState.STOPPED, SlotState.DIVERGED))
    rate = failed / finished if finished else 0.0
    rule = (
        f"a warning when every finished trial failed, or above {FAILURE_WARNING_RATE:.0%} of at least "
        f"{MIN_FINISHED_FOR_RATE} finished trials; under {MIN_FINISHED_FOR_RATE}, some failures are too few "
        "to judge"
    )
    why = ", ".join(f"{n} {reason}" for reason, n in result.reasons.items())
    fix = (
        "read the failed trials' error.log (tuner report --csv lists their run folders) and fix the "
        "cause before running more trials"
    )
    level: Level = Level.OK
    advice: str | None = None
    if finished and failed == finished:
        top, count = max(result.reasons.items(), key=lambda item: (item[1], item[0]))
        level, advice = Level.WARNING, fix
        every = "the only trial" if finished == 1 else f"all {finished} trials"
        detail = f": {why}" if len(result.reasons) > 1 else ""
        text = f"{every} failed (top reason: {top}, {of(count, finished)}{detail}): nothing was learned"
    elif finished >= MIN_FINISHED_FOR_RATE and rate > FAILURE_WARNING_RATE:
        level, advice = Level.WARNING, fix
        text = (
            f"{pct(rate)} of trials failed ({of(failed, finished)}: {why}): the machinery, not the search "
            "space, is deciding this phase"
        )
    else:
        text = f"failure rate {pct(rate)} ({of(failed, finished)} failed{': ' + why if why else ''})"
        if rate > FAILURE_WARNING_RATE:  # under MIN_FINISHED_FOR_RATE finished trials
            level = Level.INFO
            text += f": too few finished trials to judge the rate (needs {MIN_FINISHED_FOR_RATE})"
    result.findings.append(
        FailureRate(
            failed=failed,
            finished=finished,
            rate=rate,
            reasons=result.reasons,
            level=level,
            rule=rule,
            text=text,
            advice=advice,
        )
    )


def _divergence(phase: PhaseData, result: HealthResult) -> None:
    diverged = phase.with_state(SlotState.DIVERGED)
    if not diverged:
        return
    finished = phase.with_state(SlotState.COMPLETE, SlotState.DIVERGED)
    regions = [r for key in _numeric_keys(phase) if (r := _region(key, diverged, finished)) is not None]
    if regions:
        # the purest split first, then the one that explains the most trials
        best = max(regions, key=lambda r: (r.diverged / r.beyond, r.beyond))
        result.findings.append(best)
        return
    result.findings.append(
        DivergedScattered(
            diverged=len(diverged),
            finished=len(finished),
            level=Level.INFO,
            rule=f"no hyperparameter has a threshold past which {REGION_PURITY:.0%} of trials diverged",
            text=f"{of(len(diverged), len(finished))} diverged, spread over the search space (no one "
            "hyperparameter explains them)",
            advice="add warmup or gradient clipping (training.grad_clip_norm) if divergence costs "
            "many trials",
        )
    )


def _numeric_keys(phase: PhaseData) -> list[str]:
    if phase.plan is None:
        return []
    return [k for k, p in phase.plan.space.items() if p.get("type") in ("float", "int")]


def _region(key: str, diverged: list[TrialSlot], finished: list[TrialSlot]) -> DivergenceRegion | None:
    values = [float(s.params[key]) for s in diverged if key in s.params]
    if len(values) != len(diverged):
        return None
    for side in ("above", "below"):
        threshold = min(values) if side == "above" else max(values)
        beyond = [
            s
            for s in finished
            if key in s.params
            and (s.params[key] >= threshold if side == "above" else s.params[key] <= threshold)
        ]
        if beyond and len(values) / len(beyond) >= REGION_PURITY:
            # the frontier is between the last trial that did not diverge and the first that did
            word = ">=" if side == "above" else "<="
            share = "all" if len(values) == len(beyond) else of(len(values), len(beyond))
            return DivergenceRegion(
                param=key,
                side=side,  # type: ignore[arg-type]
                threshold=threshold,
                diverged=len(values),
                beyond=len(beyond),
                total_diverged=len(diverged),
                level=Level.WARNING if len(values) * 4 >= len(finished) else Level.INFO,
                rule=f"every diverged trial lies past the threshold, and at least {REGION_PURITY:.0%} of "
                "the finished trials past it diverged",
                text=f"{share} {key} {word} {fmt(threshold)} diverged ({len(values)} trials): "
                "a divergence region",
                advice=f"narrow {key}'s range to stay {'below' if side == 'above' else 'above'} "
                f"{fmt(threshold)}, or add warmup to make those values trainable",
            )
    return None


def _search_order(slot: TrialSlot) -> int:
    """Where the slot's result came in the search: its final attempt's trial number (the storage's
    one sequence for every worker), never ``datetime_complete``, which each worker stamps with
    its own clock (a machine minutes fast would reorder the trials it ran)."""
    return slot.final.number


def _best_so_far(phase: PhaseData) -> list[tuple[int, float, float]]:
    done = sorted(phase.completed, key=_search_order)
    history = []
    best: float | None = None
    for slot in done:
        value = float(slot.value or 0.0)
        if best is None or phase.better(value, best):
            best = value
        history.append((slot.slot, value, best))
    return history


def _progress(phase: PhaseData, history: list[tuple[int, float, float]], result: HealthResult) -> None:
    n = len(history)
    if n < 4:
        result.findings.append(
            Progress(
                trend="too_few",
                completed=n,
                last_improvement=None,
                recent_spread=None,
                level=Level.INFO,
                rule=IMPROVING_RULE,
                text=f"{n} completed trials: too few to tell whether the search is still improving",
            )
        )
        return
    # the last trial that set a strictly better value (a tie with the best is no progress)
    last = max(i for i in range(1, n + 1) if i == 1 or history[i - 1][2] != history[i - 2][2])
    quarter = history[-max(1, n // 4) :]
    spread = _iqr([v for _, v, _ in quarter])
    since = n - last
    common = {"completed": n, "last_improvement": last, "recent_spread": spread, "rule": IMPROVING_RULE}
    if last > n - max(1, n // 4):
        result.findings.append(
            Progress(
                trend="improving",
                level=Level.INFO,
                text=f"still improving: trial {history[last - 1][0]} (the {ordinal(last)} of {n} in "
                f"trial order) set the best value {fmt(history[last - 1][2])}",
                advice="continue: more trials of this space are likely to find better points "
                "(raise --trials and re-run)",
                **common,
            )
        )
    elif n >= PLATEAU_MIN and since >= n / 2:
        result.findings.append(
            Progress(
                trend="plateaued",
                level=Level.OK,
                text=f"plateaued: no new best in the last {since} of {n} completed trials (best "
                f"{fmt(history[last - 1][2])}, set by trial {history[last - 1][0]}, the {ordinal(last)} "
                "in trial order)",
                advice="stop this phase: more trials of the same space are unlikely to help; move to "
                "the next round, or change the search space if a boundary warning says so",
                **common,
            )
        )
    else:
        result.findings.append(
            Progress(
                trend="slowing",
                level=Level.INFO,
                text=f"slowing: the last new best came {since} trials ago (trial {history[last - 1][0]}, the "
                f"{ordinal(last)} of {n} in trial order)",
                advice="a few more trials may still help; stop once half the trials bring no new best",
                **common,
            )
        )


def _iqr(values: list[float]) -> float | None:
    if len(values) < 2:
        return None
    quartiles = statistics.quantiles(values, n=4, method="inclusive")
    return quartiles[2] - quartiles[0]
