"""Does validation get clearly worse after a trial's best step? (training past an early best)

The position rule alone ("best step in the first 10%") missed a run whose best steps came at 100,
100 and 150 of 950 (10.5% to 16%: just past the bound) while its validation error rose from
0.053 to 0.145 after them: the rest of each run was wasted, and worse, it memorised noise. A
trial *worsens after its best* when, all bounds inclusive:
- its best step is in the first half of training (``best_step <= HALF x max_train_steps``), and
- its last eval is at least ``RISE`` (25%) worse than its best, measured as an error (the value
  itself for a metric to minimise, ``1 - value`` for one to maximise, such as an accuracy or an
  MCC): ``last_error >= (1 + RISE) x best_error``, and
- where the noise is measured (an error rate or accuracy whose eval-set size is known), the two
  values' 95% Wilson intervals do not overlap: a rise within the noise of one eval is no rise.
The best-step verdict asks this of the top trials (``best_step.py``): what decides it is the
position and how much worse the last eval is than the best, both said in its text.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from tuner.report.noise import binomial_band

HALF = 0.5  # best step <= 50% of training
RISE = 0.25  # last eval's error >= 1.25 x the best's
_ROUNDING = 1e-9  # 0.125 vs 0.1 is 25% worse, though (0.125 - 0.1) / 0.1 computes to 0.24999...


@dataclass(frozen=True)
class AfterBest:
    """One trial's curve after its best step."""

    slot: int
    best_step: int
    position: float  # best_step / max_train_steps
    best: float  # the objective at the best step
    last: float  # the objective at the last eval
    rise: float  # (last error - best error) / best error; inf when the best error is 0

    @property
    def worsens(self) -> bool:
        return self.position <= HALF + _ROUNDING and self.rise >= RISE - _ROUNDING


def error_of(value: float, direction: str) -> float:
    """The value as an error (lower is better, 0 is perfect for a rate)."""
    return 1.0 - value if direction == "maximize" else value


def after_best(
    slot: int,
    best_step: int,
    max_train_steps: int,
    curve: Mapping[int, float],
    direction: str,
    examples: int | None,
) -> AfterBest | None:
    """The trial's rise after its best step; None when its curve does not show one: no eval
    after the best step, or a last eval within the noise of the best."""
    if not curve or max_train_steps <= 0 or best_step not in curve:
        return None
    last_step = max(curve)
    if last_step <= best_step:
        return None
    best, last = curve[best_step], curve[last_step]
    best_error, last_error = error_of(best, direction), error_of(last, direction)
    if last_error <= best_error:
        return None
    bands = binomial_band(best, examples), binomial_band(last, examples)
    if bands[0] is not None and bands[1] is not None and not bands[0].apart(bands[1]):
        return None  # within one eval's sampling noise
    rise = (last_error - best_error) / best_error if best_error > 0 else float("inf")
    return AfterBest(slot, best_step, best_step / max_train_steps, best, last, rise)
