"""Is a stretch of the learning curves falling, or rising, beyond their noise?

The length verdict reads where the best checkpoints fall, and the position alone misleads in two
ways, both measured on synthetic rounds (``benchmarks/calibrate_lengths.py``, docs/verdicts.md):

- *Still improving* (best steps in the last 25%): on a plateau the best of many equal evals lands
  there a quarter of the time, and a decaying learning rate improves the last evals of a run that
  was long enough as the schedule settles; "train longer" fired in 20% of plateau rounds and in
  most annealed ones. What tells them apart is the middle of training: a run cut short is still
  getting better there, a plateaued or settled one is flat. ``late_trend`` asks for a fall in
  ``(WINDOW_START, WINDOW_END]`` of training.
- *Worse after an early best*: the best of twenty noisy evals sits below the curve, so the last
  eval is "25% worse" than it by noise alone on a small validation split (9% of rounds whose
  curve rose by only 0.01). ``rise_after_best`` asks for a rise from each trial's best step to its
  end.

Both fit the least-squares slope of the error over training within each trial (its own level
removed: other points score differently), pooled over the trials, and ask for a one-sided p-value
under ``ALPHA``. The noise is the fit's own residual spread: a split of a few hundred examples
needs a larger change than one of a few thousand, without knowing its size. Too few evals to fit
leave the position's verdict as it is, and its text says the trend was not tested.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

WINDOW_START, WINDOW_END = 0.5, 0.75  # of training: after the fast start, before the last quarter
ALPHA = 0.01  # one-sided: the change must be this unlikely from a flat curve
MIN_SEGMENT_EVALS = 2  # a trial's evals in the stretch for its slope to count


@dataclass(frozen=True)
class CurveTrend:
    """The pooled within-trial change of the error over a stretch of training."""

    stretch: str  # which stretch, in words
    trials: int  # whose curves had evals enough in it
    evals: int  # in it, over those trials
    change: float  # the error's fitted change per whole run of training (negative: falling)
    p_falling: float | None  # one-sided p-values; None: too few evals to test
    p_rising: float | None

    @property
    def testable(self) -> bool:
        return self.p_falling is not None

    @property
    def falling(self) -> bool:
        return self.p_falling is not None and self.change < 0 and self.p_falling < ALPHA

    @property
    def rising(self) -> bool:
        return self.p_rising is not None and self.change > 0 and self.p_rising < ALPHA

    def describe(self) -> str:
        if self.p_falling is None or self.p_rising is None:
            return f"too few evals {self.stretch} to test the trend ({self.evals} over {self.trials} runs)"
        way = "falling" if self.falling else "rising" if self.rising else "flat within its noise"
        p = min(self.p_falling, self.p_rising)
        return (
            f"the validation error {self.stretch} was {way} ({self.change:+.3g} per run's length, "
            f"one-sided p = {p:.2g} over {self.trials} runs)"
        )


def late_trend(curves: Iterable[Mapping[int, float]], trial_steps: int, direction: str) -> CurveTrend:
    """The trend between ``WINDOW_START`` and ``WINDOW_END`` of training, from each curve's evals
    (step -> objective value) in a run of ``trial_steps``."""
    low, high = WINDOW_START * trial_steps, WINDOW_END * trial_steps
    segments = [_errors(curve, trial_steps, direction, lambda step: low < step <= high) for curve in curves]
    stretch = f"between {WINDOW_START:.0%} and {WINDOW_END:.0%} of training"
    return _pooled(stretch, segments)


def rise_after_best(
    curves: Iterable[tuple[int, Mapping[int, float]]], trial_steps: int, direction: str
) -> CurveTrend:
    """The trend after each curve's best step to its end (the best itself left out: the minimum of
    many noisy evals, it sits below the curve and would tilt the line up); ``curves``: (best step, curve)."""
    segments = [
        _errors(curve, trial_steps, direction, lambda step, best=best: step > best) for best, curve in curves
    ]
    return _pooled("after the best step", segments)


def _errors(curve: Mapping[int, float], trial_steps: int, direction: str, keep) -> list[tuple[float, float]]:
    sign = -1.0 if direction == "maximize" else 1.0  # as an error: lower is better
    points = [(step / trial_steps, sign * value) for step, value in curve.items() if keep(step)]
    return [(u, e) for u, e in points if math.isfinite(e)]


def _pooled(stretch: str, segments: list[list[tuple[float, float]]]) -> CurveTrend:
    # Student's t from ``scipy.special`` (``stats.t.cdf(x, df)`` is ``stdtr(df, x)``): importing
    # ``scipy.stats`` costs about half a second, paid by every ``tuner report``
    from scipy.special import stdtr

    sxx = sxy = 0.0
    groups: list[list[tuple[float, float]]] = []
    for points in segments:
        if len(points) < MIN_SEGMENT_EVALS:
            continue
        mean_u = sum(u for u, _ in points) / len(points)
        mean_e = sum(e for _, e in points) / len(points)
        centred = [(u - mean_u, e - mean_e) for u, e in points]
        sxx += sum(du * du for du, _ in centred)
        sxy += sum(du * de for du, de in centred)
        groups.append(centred)
    evals = sum(len(g) for g in groups)
    freedom = evals - len(groups) - 1  # one level per trial and the shared slope
    if not groups or freedom < 1 or sxx <= 0:
        return CurveTrend(stretch, len(groups), evals, 0.0, None, None)
    slope = sxy / sxx
    residual = sum((de - slope * du) ** 2 for g in groups for du, de in g)
    spread = math.sqrt(residual / freedom / sxx)
    if spread == 0:
        p_falling, p_rising = (0.0, 1.0) if slope < 0 else (1.0, 0.0) if slope > 0 else (1.0, 1.0)
    else:
        p_falling = float(stdtr(freedom, slope / spread))
        p_rising = float(stdtr(freedom, -slope / spread))
    return CurveTrend(stretch, len(groups), evals, slope, p_falling, p_rising)
