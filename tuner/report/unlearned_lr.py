"""When nothing was learned: does the training loss still point along the learning rate's range?

Why: a round whose every trial sits at chance has no ranking to read, so the range verdict
(``boundaries``) judges nothing on it. The training loss can still say where learning begins:
with the LR range 1e-6 .. 3e-5 for Adam on digits, every trial of a short round is at chance, and
its final training loss falls steadily as the LR rises. The range is then too low, and moving it
up is the remedy; "run sweep-lr" alone would leave the user to find that out.

Rule (``RULE``): over the completed trials' final training loss (``final_train_loss``, which every
worker records), the Spearman rank correlation with the LR's position (log axis for ``log: true``)
points to an edge with a one-sided p <= ``EDGE_P``, the range verdict's own bound (so a flat loss
moves the range in at most 2 x 2.5% of rounds: ``benchmarks/calibrate_ranges.py`` measures it),
the lowest loss lies in the outer third of the range there, and no trial beyond it diverged (then
that edge is where training breaks, not where it begins). The move is the range verdict's
(``range_moves``): half the width, at most a decade, below Adam's ceiling.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, ClassVar

from tuner.report.findings import Finding, Level, Suggestion, fmt, pct
from tuner.report.range_moves import Edge, FitsCheck, moved_range, unit
from tuner.report.range_trend import EDGE_P, Certainty, best_near, edge_trend
from tuner.report.study_data import PhaseData, SlotState

LOSS_ATTR = "final_train_loss"
MIN_TRIALS = 6  # completed trials with a finite loss: 3 would need a perfect order for p <= 0.17
LOWEST = 3  # the lowest-loss trials a moved range keeps inside it
RULE = (
    f"nothing learned, but the final training loss falls toward an edge of the LR range: Spearman rank "
    f"correlation over the completed trials, one-sided p <= {EDGE_P:g} (log axis for log ranges), the "
    "lowest loss in the outer third there, and no trial beyond it diverged"
)


@dataclass(frozen=True)
class LossTowardEdge(Finding):
    """The trials learned nothing, but their training loss falls toward one edge of the LR range."""

    kind: ClassVar[str] = "range_edge_nothing_learned"
    param: str
    edge: Edge
    spearman: float  # of the final training loss with the LR's position
    p_value: float  # one-sided, toward the edge
    trials: int
    lowest_loss: float
    suggested_low: float
    suggested_high: float


@dataclass(frozen=True)
class LossMove:
    """The verdict, and what ``--write-next`` writes for it."""

    finding: LossTowardEdge
    suggestions: list[Suggestion]


def loss_toward_edge(
    phase: PhaseData, key: str, param: Any, fits: FitsCheck, ceiling: float | None
) -> LossMove | None:
    """The move of ``key``'s range that the training loss points to, when nothing was learned."""
    low, high, log = float(param.low), float(param.high), bool(param.log)
    points = sorted(
        (loss, unit(float(s.params[key]), low, high, log), float(s.params[key]))
        for s in phase.completed
        if key in s.params and _finite(loss := s.attrs.get(LOSS_ATTR))
    )
    if len(points) < MIN_TRIALS:
        return None
    losses, units = [p[0] for p in points], [p[1] for p in points]
    lowest = units[0]
    for edge in ("high", "low"):
        trend = edge_trend(units, losses, True, edge, within=1.0)
        if trend is None or trend.certainty is not Certainty.CLEAR or not best_near(edge, lowest):
            continue
        if _diverged_beyond(phase, key, points[0][2], edge):
            return None
        new_low, new_high, _ = moved_range(key, param, edge, units[:LOWEST], fits, ceiling)
        if new_low is None or new_high is None:
            return None
        word, way = ("low", "rises") if edge == "high" else ("high", "falls")
        numbers = f"{trend.words()}, one-sided; lowest {fmt(losses[0])} at {pct(lowest)} of the range"
        reason = f"nothing learned, but the training loss falls as {key} {way} ({numbers}; {phase.phase})"
        finding = LossTowardEdge(
            param=key,
            edge=edge,
            spearman=trend.spearman,
            p_value=trend.p_value,
            trials=trend.trials,
            lowest_loss=losses[0],
            suggested_low=new_low,
            suggested_high=new_high,
            level=Level.WARNING,
            rule=RULE,
            text=f"{key}: the range {fmt(low)} .. {fmt(high)} is probably too {word}: no trial learned, "
            f"but the final training loss falls as {key} {way} ({numbers})",
            advice=f"move the range {'up' if edge == 'high' else 'down'}: {key} {fmt(low)} .. {fmt(high)} "
            f"-> {fmt(new_low)} .. {fmt(new_high)}, then run round 1 again (or find an LR that learns "
            "with tuner sweep-lr)",
        )
        suggestions = [
            Suggestion(("search_space", key, end), old, new, reason)
            for end, old, new in (("low", param.low, new_low), ("high", param.high, new_high))
            if new != float(old)
        ]
        return LossMove(finding, suggestions)
    return None


def _finite(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _diverged_beyond(phase: PhaseData, key: str, value: float, edge: Edge) -> bool:
    """A trial beyond the lowest loss toward ``edge`` diverged: that edge is where training breaks."""
    return any(
        key in s.params and (s.params[key] > value if edge == "high" else s.params[key] < value)
        for s in phase.with_state(SlotState.DIVERGED)
    )
