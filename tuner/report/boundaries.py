"""Search-space boundaries: do the best trials sit at an edge of a range the search could not cross?

The playbook (section "Identifying bad search space boundaries"): when the best points of a
hyperparameter lie near the edge of its range, the optimum may be beyond it; move the range.
Unless that edge is where training diverges: then it is a frontier to stay behind.

Rules (stated in every verdict), each chosen by ``benchmarks/calibrate_ranges.py`` (synthetic
rounds whose optimum is known, hundreds of repetitions: the table is in ``docs/verdicts.md``):
- the best trials are the top ``k = max(3, 10% of completed)``;
- a range moves only when the objective still improves toward an edge within the half of the
  range next to it: the Spearman rank correlation over the completed trials there (log axis for
  ``log: true``), one-sided p <= ``EDGE_P``, and the best trial in the outer third on that side.
  Neither the position (the best trials in the outer ``EDGE_ZONE``, 20%) nor the trend over the
  whole range moves a range by itself: on noise, or an optimum inside the range at 72% of it with
  the lower values bad, each moved it in 20% to 80% of the repetitions;
- either of those alone (the best trial and half of the top k in the outer 20%; or the whole
  trend toward the best trial's edge with p <= 0.5) is "cannot tell: run more trials", neither a
  move nor an OK; with neither, the range is fine;
- a divergence frontier: among the finished trials beyond the top k toward that edge, at least
  one and at least half diverged;
- the suggested range moves by half its width toward the edge, at most one decade for a log range
  (``range_moves``), keeping every top trial inside and the best one outside the new range's outer
  fifth, and stops at what the field accepts (a dropout is never negative) and below what the
  optimizer trains at (a learning rate of 1 for Adam and AdamW);
- categorical (``categorical_space``): a value never tried is named; a value tried by 3 completed
  trials, none in the top k, is suggested for dropping; all top trials sharing one value is noted.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, ClassVar

from tuner.report.categorical_space import MIN_TOP, TOP_SHARE, categorical
from tuner.report.findings import Finding, Level, Suggestion, fmt, of, pct
from tuner.report.learning import NOT_JUDGED
from tuner.report.range_moves import Edge, FitsCheck, moved_range, unit
from tuner.report.range_trend import (
    EDGE_RULE_TEXT,
    UNSURE_P,
    Certainty,
    Trend,
    best_near,
    edge_trend,
    rank_trend,
)
from tuner.report.study_data import PhaseData, SlotState, TrialSlot
from tuner.report.unlearned_lr import loss_toward_edge

EDGE_ZONE = 0.2
LR_KEY = "optimizer.lr"
#: Adam's and AdamW's update moves every weight by about the LR each step: at 1 no network trains.
ADAPTIVE_LR_CEILING = 1.0
FINE_RULE = (
    f"leaning toward an edge by neither position ({EDGE_ZONE:.0%} zone) nor trend (Spearman toward an "
    f"edge with p <= {UNSURE_P:g} and the best trial in the outer third there)"
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
    spearman: float  # of the objective with the position, over the completed trials in the edge's half
    p_value: float  # one-sided, toward the edge
    trials: int  # completed trials in the edge's half of the range


@dataclass(frozen=True)
class EdgeUnsure(Finding):
    """The best trials lean toward an edge, too weakly to say the range should move: more trials."""

    kind: ClassVar[str] = "range_edge_unsure"
    param: str
    edge: Edge
    spearman: float | None  # over the trials in the edge's half of the range (None: fewer than 3 there)
    p_value: float | None
    trials: int | None


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
            "rule": EDGE_RULE_TEXT,
            "top_k": self.top_k,
            "verdicts": [f.to_json() for f in self.findings],
        }

    @property
    def warnings(self) -> list[Finding]:
        return [f for f in self.findings if f.level is Level.WARNING]


def top_k_size(completed: int) -> int:
    return min(completed, max(MIN_TOP, math.ceil(TOP_SHARE * completed)))


def diagnose_boundaries(phase: PhaseData, fits: FitsCheck, judge: bool = True) -> BoundaryResult:
    """Edges of every searched range, for a phase whose points came from a search (when not
    ``judge``, the trials learned nothing and their ranking is noise: only the training loss can
    still move the LR range, ``unlearned_lr``)."""
    assert phase.plan is not None
    ranked = phase.completed
    k = top_k_size(len(ranked))
    result = BoundaryResult(k)
    if not judge:
        result.findings.append(NOT_JUDGED)
        lr = phase.plan.search_space().get(LR_KEY)
        if lr is not None and lr.type != "categorical":
            move = loss_toward_edge(phase, LR_KEY, lr, fits, _ceiling(phase, LR_KEY))
            if move is not None:
                result.findings.append(move.finding)
                result.suggestions += move.suggestions
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
    every = _positions(phase, key, low, high, log)
    near: dict[Edge, Trend | None] = {}
    for edge in ("high", "low"):
        if best_near(edge, best_u):
            near[edge] = edge_trend(every[0], every[1], phase.minimize, edge)
            found = near[edge]
            if found is not None and found.certainty is Certainty.CLEAR:
                _at_edge(phase, key, param, edge, values, units, result, fits, found)
                return
    trend = rank_trend(every[0], every[1], phase.minimize)
    hint = _hint(units, trend)
    if hint is not None:
        _at_edge(phase, key, param, hint, values, units, result, fits, near.get(hint), clear=False)
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


def _hint(units: list[float], trend: Trend | None) -> Edge | None:
    """The edge the best trials lean toward, by position (the best and half the top k in the outer
    20%) or by the whole trend (p <= ``UNSURE_P``, the best in the outer third): reasons to look
    again with more trials, never to move (measured: each alone moves ranges on noise)."""
    for edge in ("high", "low"):
        in_zone = [u for u in units if (u >= 1 - EDGE_ZONE if edge == "high" else u <= EDGE_ZONE)]
        best_in = units[0] >= 1 - EDGE_ZONE if edge == "high" else units[0] <= EDGE_ZONE
        if best_in and len(in_zone) >= math.ceil(len(units) / 2):
            return edge
    if (
        trend is not None
        and best_near(trend.better_toward, units[0])
        and trend.certainty is not Certainty.NONE
    ):
        return trend.better_toward
    return None


def _positions(
    phase: PhaseData, key: str, low: float, high: float, log: bool
) -> tuple[list[float], list[float]]:
    """Every completed trial's position along ``key`` (0..1) and its objective value."""
    points = [(unit(float(s.params[key]), low, high, log), float(s.value or 0.0)) for s in phase.completed
              if key in s.params]  # fmt: skip
    return [u for u, _ in points], [v for _, v in points]


def _more_trials(phase: PhaseData, near: Trend | None) -> str:
    completed = len(phase.completed)
    return f"e.g. {phase.round_key}.trials {2 * completed}; {completed} completed now"


def _unsure(phase: PhaseData, key: str, edge: Edge, near: Trend | None, units: list[float]) -> EdgeUnsure:
    word = "top" if edge == "high" else "bottom"
    if near is None:
        why = f"too few trials lie in the {word} half of the range to tell whether it still improves there"
    else:
        why = (
            f"the trials in the {word} half of the range do not clearly improve toward it "
            f"({near.words()}, one-sided)"
        )
    return EdgeUnsure(
        param=key,
        edge=edge,
        spearman=None if near is None else near.spearman,
        p_value=None if near is None else near.p_value,
        trials=None if near is None else near.trials,
        level=Level.INFO,
        rule=EDGE_RULE_TEXT,
        text=f"{key}: cannot tell whether better values lie beyond the {word} of the range: the best "
        f"trial sits at {pct(units[0])} of it, but {why}",
        advice=f"run more trials before moving the range ({_more_trials(phase, near)})",
    )


def _ceiling(phase: PhaseData, key: str) -> float | None:
    """Where a learning rate's range stops going up: ``ADAPTIVE_LR_CEILING`` for Adam and AdamW.
    (Trials that diverged above the best ones are the frontier verdict's, which moves nothing.)"""
    if key != LR_KEY or phase.plan is None:
        return None
    optimizer = phase.plan.config.get("training", {}).get("optimizer", {}).get("name", "adamw")
    return ADAPTIVE_LR_CEILING if optimizer in ("adam", "adamw") else None


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
    *,
    clear: bool = True,
) -> None:
    """Toward ``edge``: a frontier or a field limit (either on a hint), a move (only on a ``clear``
    trend next to the edge), or "cannot tell"."""
    low, high, log = float(param.low), float(param.high), bool(param.log)
    word = "top" if edge == "high" else "bottom"
    extreme = max(values) if edge == "high" else min(values)
    in_zone = sum(1 for u in units if (u >= 1 - EDGE_ZONE if edge == "high" else u <= EDGE_ZONE))
    numbers = f"best {fmt(values[0])} at {pct(units[0])} of the range"
    if trend is not None:
        numbers += f"; in its {word} half {trend.words()}, one-sided"
    rule = EDGE_RULE_TEXT
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
    new_low, new_high, limit = moved_range(key, param, edge, units, fits, _ceiling(phase, key))
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
    if not clear or trend is None:
        result.findings.append(_unsure(phase, key, edge, trend, units))
        return
    reason = f"the best trials sit at the {word} of the range ({numbers}; {phase.phase})"
    advice = (
        f"move the range {'up' if edge == 'high' else 'down'}: {key} "
        f"{fmt(low)} .. {fmt(high)} -> {fmt(new_low)} .. {fmt(new_high)}"
    )
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
            spearman=trend.spearman,
            p_value=trend.p_value,
            trials=trend.trials,
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
