"""Search-space boundaries: do the best trials sit at an edge of a range the search could not cross?

The playbook (section "Identifying bad search space boundaries"): when the best points of a
hyperparameter lie near the edge of its range, the optimum may be beyond it; move the range.
Unless that edge is where training diverges: then it is a frontier to stay behind.

Rules (stated in every verdict):
- the best trials are the top ``k = max(3, 10% of completed)``;
- a numeric range's edge zone is its outer ``EDGE_ZONE`` (20%), measured in log space for
  ``log: true``; a range is at an edge when the best trial and at least half of the top k lie in
  that edge's zone;
- a divergence frontier: among the finished trials beyond the top k toward that edge, at least
  one and at least half diverged;
- the suggested range moves by half its width toward the edge (log space for log ranges), keeping
  every top trial inside, and stops at what the field accepts (a dropout is never negative);
- categorical: a value never tried is named; a value tried by ``DROP_AFTER`` completed trials, none
  in the top k, is suggested for dropping; all top trials sharing one value is noted.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

from tuner.report.findings import Finding, Level, Suggestion, fmt, of
from tuner.report.study_data import PhaseData, SlotState, TrialSlot

EDGE_ZONE = 0.2
TOP_SHARE = 0.10
MIN_TOP = 3
SHIFT = 0.5  # of the range's width (in log space for log ranges)
MIN_MOVE = 0.01  # of the width: a field limit closer than this to the edge leaves nothing to move into
DROP_AFTER = 3
TOP_RULE = f"the top k = max({MIN_TOP}, {TOP_SHARE:.0%} of completed) trials"
EDGE_RULE = (
    f"the best trial and at least half of {TOP_RULE} lie in the outer {EDGE_ZONE:.0%} of the range "
    "(log space for log ranges)"
)

Edge = Literal["low", "high"]
FitsCheck = Callable[[str, Any], bool]  # does value fit the field of this search-space key?


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
class NeverTried(Finding):
    kind: ClassVar[str] = "categorical_never_tried"
    param: str
    values: list[Any]
    trials: int


@dataclass(frozen=True)
class NeverWon(Finding):
    kind: ClassVar[str] = "categorical_never_won"
    param: str
    value: Any
    tried: int
    top_k: int


@dataclass(frozen=True)
class OneValueWins(Finding):
    kind: ClassVar[str] = "categorical_one_value"
    param: str
    value: Any
    top_k: int


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
            "rule": EDGE_RULE,
            "top_k": self.top_k,
            "verdicts": [f.to_json() for f in self.findings],
        }

    @property
    def warnings(self) -> list[Finding]:
        return [f for f in self.findings if f.level is Level.WARNING]


def top_k_size(completed: int) -> int:
    return min(completed, max(MIN_TOP, math.ceil(TOP_SHARE * completed)))


def unit(value: float, low: float, high: float, log: bool) -> float:
    """Where ``value`` sits in [low, high]: 0 at low, 1 at high (log space for log ranges)."""
    if log:
        return (math.log(value) - math.log(low)) / (math.log(high) - math.log(low))
    return (value - low) / (high - low)


def from_unit(u: float, low: float, high: float, log: bool) -> float:
    if log:
        return math.exp(math.log(low) + u * (math.log(high) - math.log(low)))
    return low + u * (high - low)


def diagnose_boundaries(phase: PhaseData, fits: FitsCheck) -> BoundaryResult:
    """Edges of every searched range, for a phase whose points came from a search."""
    assert phase.plan is not None
    ranked = phase.completed
    k = top_k_size(len(ranked))
    result = BoundaryResult(k)
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
            _categorical(phase, key, param, top, result)
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
    for edge in ("high", "low"):
        in_zone = [u for u in units if (u >= 1 - EDGE_ZONE if edge == "high" else u <= EDGE_ZONE)]
        best_in = best_u >= 1 - EDGE_ZONE if edge == "high" else best_u <= EDGE_ZONE
        if best_in and len(in_zone) >= math.ceil(len(units) / 2):
            _at_edge(phase, key, param, edge, values, units, result, fits)
            return
    result.findings.append(
        RangeFine(
            param=key,
            top_low=min(values),
            top_high=max(values),
            level=Level.OK,
            rule=EDGE_RULE,
            text=f"{key}: the top {len(values)} trials lie inside the range ({fmt(min(values))} .. "
            f"{fmt(max(values))} of {fmt(low)} .. {fmt(high)})",
        )
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
) -> None:
    low, high, log = float(param.low), float(param.high), bool(param.log)
    word = "top" if edge == "high" else "bottom"
    extreme = max(values) if edge == "high" else min(values)
    in_zone = sum(1 for u in units if (u >= 1 - EDGE_ZONE if edge == "high" else u <= EDGE_ZONE))
    numbers = f"best {fmt(values[0])}; {in_zone} of the top {len(values)} in the outer {EDGE_ZONE:.0%}"
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
                rule=f"{EDGE_RULE}; frontier: at least half the finished trials beyond the top k diverged",
                text=f"{key}: the best trials sit at the {word} of the range ({numbers}), but "
                f"{of(diverged, len(beyond))} with {key} {side} {fmt(extreme)} diverged: that edge is a "
                "divergence frontier, not a boundary to extend",
                advice=f"keep the {word} of the range where it is; the best {key} is just short of "
                "where training diverges",
            )
        )
        return
    new_low, new_high, limit = _moved_range(key, param, edge, units, fits)
    if new_low is None or new_high is None:
        result.findings.append(
            AtFieldLimit(
                param=key,
                edge=edge,
                limit=limit,
                level=Level.INFO,
                rule=EDGE_RULE,
                text=f"{key}: the best trials sit at the {word} of the range ({numbers}), which is "
                f"as far as {key} goes ({fmt(limit)})",
                advice=f"{key} at {fmt(limit)} is best: consider fixing it there and searching "
                "something else",
            )
        )
        return
    reason = f"the best trials sit at the {word} of the range ({numbers}; {phase.phase})"
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
            level=Level.WARNING,
            rule=EDGE_RULE,
            text=f"{key}: the best trials sit at the {word} of the range {fmt(low)} .. {fmt(high)} "
            f"({numbers}); better values may lie beyond it",
            advice=f"move the range {'up' if edge == 'high' else 'down'}: {key} "
            f"{fmt(low)} .. {fmt(high)} -> {fmt(new_low)} .. {fmt(new_high)}",
        )
    )
    if new_low != low:
        result.suggestions.append(Suggestion(("search_space", key, "low"), param.low, new_low, reason))
    if new_high != high:
        result.suggestions.append(Suggestion(("search_space", key, "high"), param.high, new_high, reason))


def _moved_range(
    key: str, param: Any, edge: Edge, units: list[float], fits: FitsCheck
) -> tuple[float | None, float | None, float]:
    """The range moved by ``SHIFT`` of its width toward ``edge``, or as far as the field accepts
    (``None`` ends when that is nowhere), never leaving a top trial outside; and the edge itself.

    Both ends are rounded the same way (down when moving up, up when moving down): the far end
    away from the top trials, so it still holds them, and the moved end back toward the edge, so it
    stays a value the field accepts; to 3 significant digits, or onto an integer range's ``step``
    grid.
    """
    low, high, log = float(param.low), float(param.high), bool(param.log)
    edge_value = high if edge == "high" else low
    moved = _reachable(key, param, edge, fits)
    if moved is None:
        return None, None, edge_value
    shift = unit(moved, low, high, log) - 1 if edge == "high" else -unit(moved, low, high, log)
    if edge == "high":
        new_low, new_high = from_unit(min(shift, min(units)), low, high, log), moved
    else:
        new_low, new_high = moved, from_unit(max(1 - shift, max(units)), low, high, log)
    up = edge == "low"
    if param.type == "int":
        new_low, new_high = _on_grid(new_low, param, up=up), _on_grid(new_high, param, up=up)
    else:
        new_low, new_high = _significant(new_low, up=up), _significant(new_high, up=up)
    moved = new_high if edge == "high" else new_low
    if moved == edge_value or new_low >= new_high or not fits(key, moved):
        return None, None, edge_value
    return new_low, new_high, edge_value


def _reachable(key: str, param: Any, edge: Edge, fits: FitsCheck) -> float | None:
    """Where the moved end goes: ``SHIFT`` of the width beyond ``edge``, else the farthest value
    toward it the field accepts (found by bisection: a momentum stops short of 1); None when the
    field accepts nothing meaningfully beyond the edge. A linear range of non-negative values never
    crosses 0 (a dropout, a weight decay: the check cannot know a user workload's options)."""
    low, high, log = float(param.low), float(param.high), bool(param.log)
    edge_u = 1.0 if edge == "high" else 0.0

    def value_at(u: float) -> float:
        value = from_unit(u, low, high, log)
        if not log and low >= 0:
            value = max(value, 0.0)
        if param.type == "int":  # toward the edge: an int field takes whole numbers only
            value = math.floor(value + 1e-9) if edge == "high" else math.ceil(value - 1e-9)
            value = max(value, 1) if log else value
        return value

    target_u = edge_u + (SHIFT if edge == "high" else -SHIFT)
    if value_at(target_u) == value_at(edge_u):
        return None
    if fits(key, value_at(target_u)):
        return value_at(target_u)
    good_u, bad_u = edge_u, target_u
    for _ in range(30):
        middle = (good_u + bad_u) / 2
        if fits(key, value_at(middle)):
            good_u = middle
        else:
            bad_u = middle
    if abs(good_u - edge_u) < MIN_MOVE or value_at(good_u) == value_at(edge_u):
        return None
    return value_at(good_u)


def _significant(value: float, *, up: bool) -> float:
    """``value`` rounded up (or down) to 3 significant digits: a range a person would write
    (0.0474 rather than 0.047313...), on the side that keeps what it must hold."""
    if value == 0 or not math.isfinite(value):
        return value
    scale = 10.0 ** (math.floor(math.log10(abs(value))) - 2)
    digits = value / scale
    rounded = math.ceil(digits - 1e-9) if up else math.floor(digits + 1e-9)
    return float(f"{rounded * scale:.3g}")


def _on_grid(value: float, param: Any, *, up: bool) -> int:
    """An integer range's end on its ``step`` grid (``low + k * step``), rounded up or down."""
    low, step = int(param.low), int(param.step)
    k = (value - low) / step
    return low + step * (math.ceil(k - 1e-9) if up else math.floor(k + 1e-9))


def _categorical(
    phase: PhaseData, key: str, param: Any, top: list[TrialSlot], result: BoundaryResult
) -> None:
    from tuner.orchestrate.search_space import to_config_values

    choices = list(param.choices)

    def chosen(slot: TrialSlot) -> str:  # Optuna keeps a list choice as JSON text: decode it
        return repr(to_config_values({key: param}, {key: slot.params[key]})[key])

    started = [s for s in phase.slots if key in s.params and s.state is not SlotState.WAITING]
    tried = {repr(c): 0 for c in choices}
    completed = {repr(c): 0 for c in choices}
    for slot in started:
        tried[chosen(slot)] = tried.get(chosen(slot), 0) + 1
        if slot.state is SlotState.COMPLETE:
            completed[chosen(slot)] = completed.get(chosen(slot), 0) + 1
    never = [c for c in choices if tried[repr(c)] == 0]
    if never:
        result.findings.append(
            NeverTried(
                param=key,
                values=never,
                trials=len(started),
                level=Level.WARNING,
                rule="a choice no started trial used",
                text=f"{key}: {', '.join(map(repr, never))} never tried in {len(started)} trials, so the "
                "search says nothing about it",
                advice="run more trials (or drop the value if you know it is not worth trying)",
            )
        )
    winners = [to_config_values({key: param}, {key: s.params[key]})[key] for s in top if key in s.params]
    if len(winners) >= MIN_TOP and len(choices) > 1 and len({repr(w) for w in winners}) == 1:
        result.findings.append(
            OneValueWins(
                param=key,
                value=winners[0],
                top_k=len(top),
                level=Level.INFO,
                rule=f"all of {TOP_RULE} share one value",
                text=f"{key}: all of the top {len(top)} trials use {winners[0]!r}",
                advice=f"consider fixing {key} to {winners[0]!r} and searching something else",
            )
        )
    won = {repr(w) for w in winners}
    for choice in choices:
        count = completed[repr(choice)]
        if repr(choice) in won or count < DROP_AFTER:
            continue
        reason = f"{key} = {choice!r}: {count} completed trials, none in the top {len(top)} ({phase.phase})"
        result.findings.append(
            NeverWon(
                param=key,
                value=choice,
                tried=count,
                top_k=len(top),
                level=Level.WARNING,
                rule=f"tried by at least {DROP_AFTER} completed trials, none in {TOP_RULE}",
                text=f"{key}: {choice!r} never made the top {len(top)} in {count} completed trials",
                advice=f"drop {choice!r} from {key}'s choices",
            )
        )
        result.suggestions.append(
            Suggestion(("search_space", key, "choices"), choices, None, reason, drop=choice)
        )
