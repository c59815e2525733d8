"""Search-space boundaries: do the best trials sit at an edge of a range the search could not cross?

The playbook (section "Identifying bad search space boundaries"): when the best points of a
hyperparameter lie near the edge of its range, the optimum may be beyond it; move the range.
Unless that edge is where training diverges: then it is a frontier to stay behind.

Rules (stated in every verdict):
- the best trials are the top ``k = max(3, 10% of completed)``;
- position: a numeric range's edge zone is its outer ``EDGE_ZONE`` (20%), measured in log space
  for ``log: true``; a range is at an edge when the best trial and at least half of the top k lie
  in that edge's zone;
- trend (``range_trend``): with few trials that zone holds one or two points, so a range is also
  at an edge when the rank correlation of the objective with the parameter over every completed
  trial points to it (clear p <= 0.05, likely p <= 0.2) and the best trial lies in the outer third
  on that side; a hint of a trend toward the best trial's edge (p <= 0.5) is "cannot tell: run
  more trials", neither a move nor an OK; above that there is no trend, and the range is fine;
- a divergence frontier: among the finished trials beyond the top k toward that edge, at least
  one and at least half diverged;
- the suggested range moves by half its width toward the edge (log space for log ranges), keeping
  every top trial inside, and stops at what the field accepts (a dropout is never negative);
- categorical (``categorical_space``): a value never tried is named; a value tried by 3 completed
  trials, none in the top k, is suggested for dropping; all top trials sharing one value is noted.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, ClassVar

from tuner.report.categorical_space import MIN_TOP, TOP_RULE, TOP_SHARE, categorical
from tuner.report.findings import Finding, Level, Suggestion, fmt, of, pct
from tuner.report.learning import NOT_JUDGED
from tuner.report.range_moves import Edge, FitsCheck, moved_range, unit
from tuner.report.range_trend import TREND_RULE, UNSURE_P, Certainty, Trend, best_near, rank_trend
from tuner.report.study_data import PhaseData, SlotState, TrialSlot

EDGE_ZONE = 0.2
EDGE_RULE = (
    f"the best trial and at least half of {TOP_RULE} lie in the outer {EDGE_ZONE:.0%} of the range "
    "(log space for log ranges)"
)
FINE_RULE = (
    f"at an edge by neither position ({EDGE_ZONE:.0%} zone) nor trend (Spearman toward an edge with "
    f"p <= {UNSURE_P:g} and the best trial in the outer third there)"
)


@dataclass(frozen=True)
class AtEdge(Finding):
    kind: ClassVar[str] = "range_edge"
    param: str
    edge: Edge
    low: float
    high: float
    log: bool
    top_k: int
    in_zone: int
    best_value: float
    suggested_low: float | None
    suggested_high: float | None
    basis: str = "position"  # "position" (the outer 20%) or "trend" (the rank correlation)
    certainty: str | None = None  # a trend's: "clear" or "likely"
    spearman: float | None = None  # of the objective with the position, over every completed trial
    p_value: float | None = None
    trials: int | None = None


@dataclass(frozen=True)
class EdgeUnsure(Finding):
    """The best trial sits near an edge and the trend points there, too weakly to say: more trials."""

    kind: ClassVar[str] = "range_edge_unsure"
    param: str
    edge: Edge
    spearman: float
    p_value: float
    trials: int


@dataclass(frozen=True)
class DivergenceFrontier(Finding):
    kind: ClassVar[str] = "divergence_frontier"
    param: str
    edge: Edge
    threshold: float  # the most extreme top-k value toward the edge
    beyond: int  # finished trials beyond it
    diverged: int


@dataclass(frozen=True)
class AtFieldLimit(Finding):
    """The edge is the end of what the field accepts (dropout 0): nothing to extend into."""

    kind: ClassVar[str] = "range_edge_at_field_limit"
    param: str
    edge: Edge
    limit: float


@dataclass(frozen=True)
class RangeFine(Finding):
    kind: ClassVar[str] = "range_ok"
    param: str
    top_low: float
    top_high: float


@dataclass(frozen=True)
class TooFewForRanges(Finding):
    kind: ClassVar[str] = "ranges_too_few"
    completed: int
    needed: int


@dataclass
class BoundaryResult:
    top_k: int
    findings: list[Finding] = field(default_factory=list)
    suggestions: list[Suggestion] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "rule": f"{EDGE_RULE}; or {TREND_RULE}",
            "top_k": self.top_k,
            "verdicts": [f.to_json() for f in self.findings],
        }

    @property
    def warnings(self) -> list[Finding]:
        return [f for f in self.findings if f.level is Level.WARNING]


def top_k_size(completed: int) -> int:
    return min(completed, max(MIN_TOP, math.ceil(TOP_SHARE * completed)))


def diagnose_boundaries(phase: PhaseData, fits: FitsCheck, judge: bool = True) -> BoundaryResult:
    """Edges of every searched range, for a phase whose points came from a search (none when not
    ``judge``: the trials learned nothing, and a range moved on noise points nowhere)."""
    assert phase.plan is not None
    ranked = phase.completed
    k = top_k_size(len(ranked))
    result = BoundaryResult(k)
    if not judge:
        result.findings.append(NOT_JUDGED)
        return result
    if len(ranked) < MIN_TOP:
        result.findings.append(
            TooFewForRanges(
                completed=len(ranked),
                needed=MIN_TOP,
                text=f"{len(ranked)} completed trials: too few to judge the search space's edges "
                f"(needs {MIN_TOP})",
            )
        )
        return result
    top = ranked[:k]
    for key, param in phase.plan.search_space().items():
        if param.type == "categorical":
            categorical(phase, key, param, top, result.findings, result.suggestions)
        else:
            _numeric(phase, key, param, top, result, fits)
    return result


def _numeric(
    phase: PhaseData, key: str, param: Any, top: list[TrialSlot], result: BoundaryResult, fits: FitsCheck
) -> None:
    low, high, log = float(param.low), float(param.high), bool(param.log)
    values = [float(s.params[key]) for s in top if key in s.params]
    if not values:
        return
    units = [unit(v, low, high, log) for v in values]
    best_u = units[0]
    trend = _trend(phase, key, low, high, log)
    for edge in ("high", "low"):
        in_zone = [u for u in units if (u >= 1 - EDGE_ZONE if edge == "high" else u <= EDGE_ZONE)]
        best_in = best_u >= 1 - EDGE_ZONE if edge == "high" else best_u <= EDGE_ZONE
        if best_in and len(in_zone) >= math.ceil(len(units) / 2):
            _at_edge(phase, key, param, edge, values, units, result, fits, None)
            return
    if trend is not None and best_near(trend.better_toward, best_u):
        if trend.certainty in (Certainty.CLEAR, Certainty.LIKELY):
            _at_edge(phase, key, param, trend.better_toward, values, units, result, fits, trend)
            return
        if trend.certainty is Certainty.UNSURE:
            result.findings.append(_unsure(phase, key, trend, best_u))
            return
    shape = f"; {trend.words()}" if trend is not None else ""
    result.findings.append(
        RangeFine(
            param=key,
            top_low=min(values),
            top_high=max(values),
            level=Level.OK,
            rule=FINE_RULE,
            text=f"{key}: the top {len(values)} trials lie inside the range ({fmt(min(values))} .. "
            f"{fmt(max(values))} of {fmt(low)} .. {fmt(high)}{shape})",
        )
    )


def _trend(phase: PhaseData, key: str, low: float, high: float, log: bool) -> Trend | None:
    """The objective's rank trend along ``key`` over every completed trial that has it."""
    points = [(unit(float(s.params[key]), low, high, log), float(s.value or 0.0)) for s in phase.completed
              if key in s.params]  # fmt: skip
    return rank_trend([u for u, _ in points], [v for _, v in points], phase.minimize)


def _more_trials(phase: PhaseData, trend: Trend) -> str:
    return f"e.g. {phase.round_key}.trials {2 * trend.trials}; {trend.trials} completed now"


def _unsure(phase: PhaseData, key: str, trend: Trend, best_u: float) -> EdgeUnsure:
    word = "top" if trend.better_toward == "high" else "bottom"
    return EdgeUnsure(
        param=key,
        edge=trend.better_toward,
        spearman=trend.spearman,
        p_value=trend.p_value,
        trials=trend.trials,
        level=Level.INFO,
        rule=TREND_RULE,
        text=f"{key}: cannot tell whether better values lie beyond the {word} of the range: the best "
        f"trial sits at {pct(best_u)} of it and the objective improves toward it, but too weakly to "
        f"say with this many trials ({trend.words()})",
        advice=f"run more trials before moving the range ({_more_trials(phase, trend)})",
    )


def _at_edge(
    phase: PhaseData,
    key: str,
    param: Any,
    edge: Edge,
    values: list[float],
    units: list[float],
    result: BoundaryResult,
    fits: FitsCheck,
    trend: Trend | None,
) -> None:
    """At ``edge`` by position (``trend`` None) or by the trend: a frontier, a field limit, or a move."""
    low, high, log = float(param.low), float(param.high), bool(param.log)
    word = "top" if edge == "high" else "bottom"
    extreme = max(values) if edge == "high" else min(values)
    in_zone = sum(1 for u in units if (u >= 1 - EDGE_ZONE if edge == "high" else u <= EDGE_ZONE))
    numbers = f"best {fmt(values[0])}; {in_zone} of the top {len(values)} in the outer {EDGE_ZONE:.0%}"
    rule = EDGE_RULE
    if trend is not None:
        rule = TREND_RULE
        numbers = (
            f"best {fmt(values[0])} at {pct(units[0])} of the range; {trend.certainty} trend: {trend.words()}"
        )
    beyond = [
        s
        for s in phase.with_state(SlotState.COMPLETE, SlotState.DIVERGED)
        if key in s.params and (s.params[key] > extreme if edge == "high" else s.params[key] < extreme)
    ]
    diverged = sum(1 for s in beyond if s.state is SlotState.DIVERGED)
    if diverged and diverged >= len(beyond) / 2:
        side = ">" if edge == "high" else "<"
        result.findings.append(
            DivergenceFrontier(
                param=key,
                edge=edge,
                threshold=extreme,
                beyond=len(beyond),
                diverged=diverged,
                level=Level.OK,
                rule=f"{rule}; frontier: at least half the finished trials beyond the top k diverged",
                text=f"{key}: the best trials sit at the {word} of the range ({numbers}), but "
                f"{of(diverged, len(beyond))} with {key} {side} {fmt(extreme)} diverged: that edge is a "
                "divergence frontier, not a boundary to extend",
                advice=f"keep the {word} of the range where it is; the best {key} is just short of "
                "where training diverges",
            )
        )
        return
    new_low, new_high, limit = moved_range(key, param, edge, units, fits)
    if new_low is None or new_high is None:
        result.findings.append(
            AtFieldLimit(
                param=key,
                edge=edge,
                limit=limit,
                level=Level.INFO,
                rule=rule,
                text=f"{key}: the best trials sit at the {word} of the range ({numbers}), which is "
                f"as far as {key} goes ({fmt(limit)})",
                advice=f"{key} at {fmt(limit)} is best: consider fixing it there and searching "
                "something else",
            )
        )
        return
    reason = f"the best trials sit at the {word} of the range ({numbers}; {phase.phase})"
    advice = (
        f"move the range {'up' if edge == 'high' else 'down'}: {key} "
        f"{fmt(low)} .. {fmt(high)} -> {fmt(new_low)} .. {fmt(new_high)}"
    )
    if trend is not None and trend.certainty is Certainty.LIKELY:
        advice += f" (likely, not sure: more trials would make it sure, {_more_trials(phase, trend)})"
    result.findings.append(
        AtEdge(
            param=key,
            edge=edge,
            low=low,
            high=high,
            log=log,
            top_k=len(values),
            in_zone=in_zone,
            best_value=values[0],
            suggested_low=new_low,
            suggested_high=new_high,
            basis="position" if trend is None else "trend",
            certainty=None if trend is None else str(trend.certainty),
            spearman=None if trend is None else trend.spearman,
            p_value=None if trend is None else trend.p_value,
            trials=None if trend is None else trend.trials,
            level=Level.WARNING,
            rule=rule,
            text=f"{key}: the best trials sit at the {word} of the range {fmt(low)} .. {fmt(high)} "
            f"({numbers}); better values may lie beyond it",
            advice=advice,
        )
    )
    if new_low != low:
        result.suggestions.append(Suggestion(("search_space", key, "low"), param.low, new_low, reason))
    if new_high != high:
        result.suggestions.append(Suggestion(("search_space", key, "high"), param.high, new_high, reason))
