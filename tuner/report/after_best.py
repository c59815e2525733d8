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
position and how much worse the last eval is than the best, both said in its text; it also asks
their curves after the best for a rise beyond their noise, as large on the fitted line
(``tuner.playbook.curve_trend``), since the best of many noisy evals sits below the curve.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping
from dataclasses import dataclass
from typing import ClassVar

from tuner.report.findings import Finding, Level, Suggestion, pct
from tuner.report.length_cut import shorten
from tuner.report.noise import binomial_band, eval_examples
from tuner.report.study_data import PhaseData, TrialSlot

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


@dataclass(frozen=True)
class BestStepWorsens(Finding):
    """Validation gets clearly worse after an early best step (``after_best``), in the top trials."""

    kind: ClassVar[str] = "best_step_worsens"
    worsening_top: int
    top: int
    first_position: float
    last_position: float
    median_rise: float
    suggested_trial_steps: int
    suggested_max_train_steps: int | None


def worsening_top(
    phase: PhaseData, top: list[TrialSlot], curves: Mapping[int, Mapping[int, float]]
) -> list[AfterBest]:
    """The top trials whose validation gets clearly worse after an early best step."""
    examples = eval_examples(phase) if any(s.slot in curves for s in top) else None
    found = []
    for slot in top:
        if slot.best_step is None or slot.max_train_steps is None or slot.slot not in curves:
            continue
        curve = dict(curves[slot.slot])
        if slot.value is not None:
            curve.setdefault(slot.best_step, slot.value)
        measured = after_best(
            slot.slot, slot.best_step, slot.max_train_steps, curve, phase.direction, examples
        )
        if measured is not None and measured.worsens:
            found.append(measured)
    return found


def worsens_verdict(
    phase: PhaseData,
    worsening: list[AfterBest],
    top: int,
    trial_steps: int,
    rule_top: tuple[int, int],
    suggestions: list[Suggestion],
) -> BestStepWorsens:
    """The verdict on the top trials that worsen (``rule_top``: how many of how many best it needs)."""
    positions = [w.position for w in worsening]
    rise = statistics.median(w.rise for w in worsening)
    shown_rise = "from a perfect best" if rise == math.inf else f"{rise:.0%} worse"
    reason = (
        f"validation {shown_rise} at the last eval than at an early best step in {len(worsening)} of the "
        f"top {top} trials ({phase.phase})"
    )
    cut = shorten(phase, suggestions, max(w.best_step for w in worsening), top, reason, trial_steps)
    curves = ", ".join(f"{w.best:.4g} at step {w.best_step} -> {w.last:.4g}" for w in worsening[:3])
    return BestStepWorsens(
        worsening_top=len(worsening),
        top=top,
        first_position=min(positions),
        last_position=max(positions),
        median_rise=rise,
        suggested_trial_steps=cut.trial_steps,
        suggested_max_train_steps=cut.max_train_steps,
        level=Level.WARNING,
        rule=f"best step <= {HALF:.0%} of max_train_steps and the last eval >= {RISE:.0%} worse (as "
        f"an error) and outside the best's noise, in at least {rule_top[0]} of the {rule_top[1]} best "
        "trials; and the error after their best steps rising beyond the curves' noise by as much on the "
        "fitted line (where they allow a fit)",
        text=f"max_train_steps is too high: validation gets worse after an early best step in "
        f"{len(worsening)} of the top {top} trials (best at {pct(min(positions))}"
        + (f" to {pct(max(positions))}" if max(positions) > min(positions) else "")
        + f" of training; {curves}); the rest of each run is wasted, and may be memorising the "
        "training set (e.g. noisy labels)",
        advice=cut.advice,
    )
