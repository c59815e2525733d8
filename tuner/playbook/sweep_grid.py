"""sweep-lr's grid of learning rates: the default half-decades, rounding, and extending an edge."""

from __future__ import annotations

import math
from typing import Literal

from tuner.errors import UsageError

LR_PARAM = "optimizer.lr"
#: Half a decade: the default grid's step, as the playbook's LR sweeps use.
HALF_DECADE = math.sqrt(10.0)
_SIGNIFICANT = 3  # grid points are rounded to 3 significant digits: readable, and stable in YAML

# -- the grid ---------------------------------------------------------------------------------


def round_lr(lr: float) -> float:
    """At most 3 significant digits, fewer when within 0.5%: 0.0099928 is 0.01, not 0.00999."""
    for digits in range(1, _SIGNIFICANT):
        short = float(f"{lr:.{digits}g}")
        if abs(short - lr) <= 0.005 * lr:
            return short
    return float(f"{lr:.{_SIGNIFICANT}g}")


def _snap_ratio(ratio: float) -> float:
    """A ratio within 1% of a sixth-of-a-decade power (x10, x sqrt(10), ...) is taken as exactly that.

    Grid points are rounded, so ``0.000316 / 0.0001`` is 3.16, not sqrt(10); extending by the
    rounded ratio would drift (3.17e-06 three points out). A user's x3 or x2 grid is kept as is.
    """
    sixths = math.log10(ratio) * 6
    if abs(sixths - round(sixths)) * math.log(10) / 6 < 0.01:
        return 10 ** (round(sixths) / 6)
    return ratio


def format_lr(lr: float) -> str:
    """An LR as users read it: ``0.003``, ``0.000316``, ``1e-05``."""
    return f"{lr:.{_SIGNIFICANT}g}"


def default_grid(lr: float) -> list[float]:
    """Five log-spaced points half a decade apart, centred on ``optimizer.lr``.

    ``default_grid(1e-3) == [0.0001, 0.000316, 0.001, 0.00316, 0.01]``: two below and two above, so
    the base LR is tested against a full decade either side.
    """
    if not (lr > 0 and math.isfinite(lr)):
        raise UsageError(f"the default LR grid needs a positive optimizer.lr, got {lr}")
    return [round_lr(lr * HALF_DECADE**k) for k in (-2, -1, 0, 1, 2)]


def extend_grid(grid: list[float], edge: Literal["low", "high"], count: int = 2) -> list[float]:
    """The next ``count`` points beyond ``edge``, ascending, spaced like the grid at that edge.

    The ratio between the two outermost points at that edge is kept (a user's grid may be
    non-uniform: ``[1e-4, 1e-3, 3e-3]`` extends high by x3 and low by x10).
    """
    points = sorted(grid)
    if len(points) < 2 or points[0] <= 0:
        raise UsageError("extending an LR grid needs at least 2 positive points")
    if count < 1:
        raise UsageError(f"extend the grid by at least 1 point, not {count}")
    if edge == "high":
        ratio = _snap_ratio(points[-1] / points[-2])
        return [round_lr(points[-1] * ratio**k) for k in range(1, count + 1)]
    if edge == "low":
        ratio = _snap_ratio(points[1] / points[0])
        return [round_lr(points[0] / ratio**k) for k in range(count, 0, -1)]
    raise UsageError(f"the grid's edge is 'low' or 'high', not {edge!r}")
