"""Where a range at an edge moves: half its width toward the edge and at most one decade for a log
range, as far as the field accepts and below a ceiling the caller knows (a learning rate of 1
for Adam), on values a person would write (3 significant digits, an integer range's ``step`` grid).

Why at most a decade: half the width of a four-decade LR range is two decades, and a move from
1e-5 .. 1e-1 to 1e-3 .. 10 had the next search spend a fifth of its budget at learning rates no
optimizer trains at. The evidence that a range should move is about the values next to its edge,
so the new range reaches one decade past it, then looks again.

Split from ``boundaries`` (which decides *whether* a range is at an edge): this decides *where* it
goes, and knows nothing about why.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, Literal

SHIFT = 0.5  # of the range's width (in log space for log ranges)
MAX_LOG_SHIFT = math.log(10.0)  # a log range's end moves one decade at most
BEST_MARGIN = 0.2  # the best trial lies at least this share of the new range from its far end
MIN_MOVE = 0.01  # of the width: a field limit closer than this to the edge leaves nothing to move into

Edge = Literal["low", "high"]
FitsCheck = Callable[[str, Any], bool]  # does value fit the field of this search-space key?


def unit(value: float, low: float, high: float, log: bool) -> float:
    """Where ``value`` sits in [low, high]: 0 at low, 1 at high (log space for log ranges)."""
    if log:
        return (math.log(value) - math.log(low)) / (math.log(high) - math.log(low))
    return (value - low) / (high - low)


def from_unit(u: float, low: float, high: float, log: bool) -> float:
    if log:
        return math.exp(math.log(low) + u * (math.log(high) - math.log(low)))
    return low + u * (high - low)


def shift_of(param: Any) -> float:
    """How far the moved end goes, as a share of the range's width: ``SHIFT``, at most a decade."""
    if param.log:
        return min(SHIFT, MAX_LOG_SHIFT / (math.log(float(param.high)) - math.log(float(param.low))))
    return SHIFT


def moved_range(
    key: str, param: Any, edge: Edge, units: list[float], fits: FitsCheck, ceiling: float | None = None
) -> tuple[float | None, float | None, float]:
    """The range moved by ``shift_of`` its width toward ``edge``, or as far as the field accepts
    and stays below ``ceiling`` (toward the high edge; ``None`` ends when that is nowhere), never
    leaving a top trial (``units``, the best first) outside and the best at least ``BEST_MARGIN``
    of the new range from its far end; and the edge itself.

    Both ends are rounded the same way (down when moving up, up when moving down): the far end
    away from the top trials, so it still holds them, and the moved end back toward the edge, so it
    stays a value the field accepts; to 3 significant digits, or onto an integer range's ``step``
    grid.
    """
    low, high, log = float(param.low), float(param.high), bool(param.log)
    edge_value = high if edge == "high" else low
    moved = _reachable(key, param, edge, fits)
    if moved is not None and ceiling is not None and edge == "high" and moved >= ceiling:
        below = _significant(ceiling * (1 - 1e-9), up=False)
        moved = below if below > high else None
    if moved is None:
        return None, None, edge_value
    moved_u = unit(moved, low, high, log)
    best = units[0]
    if edge == "high":
        shift = moved_u - 1
        far = min(shift, min(units), (best - BEST_MARGIN * moved_u) / (1 - BEST_MARGIN))
        new_low, new_high = from_unit(far, low, high, log), moved
    else:
        shift = -moved_u
        far = max(1 - shift, max(units), (best - BEST_MARGIN * moved_u) / (1 - BEST_MARGIN))
        new_low, new_high = moved, from_unit(far, low, high, log)
    if not log and low >= 0:  # a linear range of non-negative values never crosses 0
        new_low = max(new_low, 0.0)
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

    shift = shift_of(param)
    target_u = edge_u + (shift if edge == "high" else -shift)
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
