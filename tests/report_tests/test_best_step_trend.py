"""The length verdict reads the curves, not only where their best step fell.

"Train longer" needs the error still falling between 50% and 75% of training: a plateau whose
best eval lands late by noise, and a decaying schedule that settles at the end, are not runs cut
short. "Worse after an early best" needs the error after the best step rising beyond the curves'
noise, by as much as the rule's 25%: the best of many noisy evals sits below the curve. The cases
are curves of known shape with fixed noise; the rates over hundreds of them are on the verdicts
page (``benchmarks/calibrate_lengths.py``).
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.report_tests.builders import add_trial, study
from tests.report_tests.test_verdicts import LR, kinds, only, report_of

STEPS, EVAL_EVERY = 400, 20


def _round(tmp_path: Path, shape: Callable[[float], float], noise: float, direction: str = "minimize"):
    """Five full-length trials of ``shape`` (error over the position in training), each with its
    own level and fixed noise; values as the objective sees them (1 - error when maximising)."""
    built = study(tmp_path, max_train_steps=STEPS, eval_every=EVAL_EVERY, round1={"steps": STEPS})
    if direction == "maximize":
        text = built.path.read_text().replace("metric: val/error_rate", "metric: val/accuracy")
        built.path.write_text(text.replace("direction: minimize", "direction: maximize"))
    phase = built.start("round-1")
    rng = random.Random(7)
    for slot in range(5):
        errors = {
            s: shape(s / STEPS) + 0.01 * slot + rng.gauss(0.0, noise)
            for s in range(EVAL_EVERY, STEPS + 1, EVAL_EVERY)
        }
        best_step = min(errors, key=lambda s: (errors[s], s))
        curve = errors if direction == "minimize" else {s: 1.0 - e for s, e in errors.items()}
        add_trial(phase, slot, curve[best_step], {LR: 0.05 + 0.01 * slot}, best_step=best_step, curve=curve)
    return report_of(built).phases[0].best_step


def _improving(u: float) -> float:
    return 0.1 + 0.1 * ((1.5 - u) / 1.5) ** 2


def _plateau(u: float) -> float:
    return 0.1 + 0.1 * max(0.0, (0.4 - u) / 0.4) ** 2


def _annealed(u: float) -> float:
    return _plateau(u * 0.4 / 0.3) + 0.01 * min(1.0, max(0.0, (1.0 - u) / 0.2))


def _late_best(shape: Callable[[float], float]) -> Callable[[float], float]:
    """The shape, with the last eval a hair better: every best step lands at the end."""
    return lambda u: shape(u) - (0.02 if u >= 1.0 else 0.0)


def test_runs_still_falling_through_the_middle_say_train_longer(tmp_path: Path) -> None:
    best_step = _round(tmp_path, _improving, noise=0.002)
    assert best_step is not None
    late = only(best_step.findings, "best_step_late")
    assert late.trend_tested and late.suggested_max_train_steps == 600
    assert "between 50% and 75% of training was falling" in late.text


def test_a_plateau_whose_best_eval_lands_last_is_not_too_short(tmp_path: Path) -> None:
    best_step = _round(tmp_path, _late_best(_plateau), noise=0.002)
    assert best_step is not None
    assert "best_step_late" not in kinds(best_step.findings)
    fine = only(best_step.findings, "best_step_ok")
    assert fine.late_but_flat and fine.late_all == 5
    assert "flat within its noise" in fine.text and "not runs cut short" in fine.text


def test_a_schedule_settling_at_the_end_is_not_too_short(tmp_path: Path) -> None:
    best_step = _round(tmp_path, _annealed, noise=0.001)
    assert best_step is not None
    assert best_step.positions and all(p > 0.75 for _, p in best_step.positions)  # late by position
    assert only(best_step.findings, "best_step_ok").late_but_flat


def test_an_accuracy_still_rising_says_train_longer(tmp_path: Path) -> None:
    best_step = _round(tmp_path, _improving, noise=0.002, direction="maximize")
    assert best_step is not None
    assert only(best_step.findings, "best_step_late").trend_tested


def test_a_noisy_best_above_a_small_rise_is_not_worse_after_an_early_best(tmp_path: Path) -> None:
    """The error rises by 0.01 after the middle; noise 0.01 puts each best eval about 0.02 below
    the curve, so the last eval reads 25% worse than it, but the fitted rise is 10%."""

    def middle(u: float) -> float:
        return 0.1 + (0.1 * ((0.5 - u) / 0.5) ** 2 if u <= 0.5 else 0.01 * ((u - 0.5) / 0.5) ** 2)

    def dipped(u: float) -> float:  # the noise's minimum: one eval just before the middle
        return middle(u) - (0.03 if abs(u - 0.45) < 1e-9 else 0.0)

    best_step = _round(tmp_path, dipped, noise=0.003)
    assert best_step is not None
    assert "best_step_worsens" not in kinds(best_step.findings)
    assert "best_step_ok" in kinds(best_step.findings)


# ``falling_late``: the runs still getting better late, wherever their best steps fell (what the
# extra round asks of a length sweep-lr measured with the regularisation off)


def test_runs_still_falling_late_are_falling_late_though_their_best_is_not_in_the_last_quarter(
    tmp_path: Path,
) -> None:
    """Best at 70% (a decaying schedule's settling, or regularisation slowing training): the
    position says the length looks right, the middle of training says the runs were still falling."""

    def still_falling(u: float) -> float:
        return 0.1 + (0.1 * ((0.7 - u) / 0.7) ** 2 if u <= 0.7 else 0.002 * (u - 0.7) / 0.3)

    best_step = _round(tmp_path, still_falling, noise=0.001)
    assert best_step is not None
    assert "best_step_late" not in kinds(best_step.findings) and "best_step_ok" in kinds(best_step.findings)
    falling = best_step.falling_late
    assert falling is not None and falling.trials == 5
    assert "between 50% and 75% of training was falling" in falling.describe()


def test_runs_that_peak_at_half_their_length_and_stay_flat_are_not_falling_late(tmp_path: Path) -> None:
    """Better until the middle, flat after within the noise: more steps change nothing."""

    def peak_at_half(u: float) -> float:
        return 0.1 + 0.1 * max(0.0, (0.5 - u) / 0.5) ** 2

    best_step = _round(tmp_path, peak_at_half, noise=0.003)
    assert best_step is not None and best_step.late_trend is not None
    assert best_step.late_trend.testable and not best_step.late_trend.falling
    assert best_step.falling_late is None


def test_runs_too_long_are_not_falling_late_though_their_middle_falls(tmp_path: Path) -> None:
    """Best at 5%, then worse, then falling back part of the way through the middle: the length is
    too long (best steps early), whatever the middle does."""

    def early_then_back(u: float) -> float:
        if u <= 0.05:
            return 0.1 + 0.1 * (0.05 - u) / 0.05
        return 0.2 - 0.05 * (u - 0.3) / 0.7 if u > 0.3 else 0.1 + 0.1 * (u - 0.05) / 0.25

    best_step = _round(tmp_path, early_then_back, noise=0.001)
    assert best_step is not None and best_step.late_trend is not None
    assert best_step.late_trend.falling  # the middle falls...
    assert "best_step_early" in kinds(best_step.findings)
    assert best_step.falling_late is None  # ... but the length is too long


def test_the_pooled_trend_is_a_regression_with_one_level_per_trial_and_scipys_t() -> None:
    """The slope, its one-sided p-values and their degrees of freedom are those of a least-squares
    fit with a level per trial and one shared slope, read against ``scipy.stats.t`` (the module
    computes it with ``scipy.special`` alone)."""
    import numpy as np
    from scipy import stats

    from tuner.playbook.curve_trend import late_trend

    rng = random.Random(3)
    curves = [
        {
            s: 0.5 - 0.0004 * s + 0.02 * k + rng.gauss(0.0, 0.01)
            for s in range(EVAL_EVERY, STEPS + 1, EVAL_EVERY)
        }
        for k in range(4)
    ]
    trend = late_trend(curves, STEPS, "minimize")
    rows, errors = [], []
    for k, curve in enumerate(curves):
        for step, value in curve.items():
            if 0.5 * STEPS < step <= 0.75 * STEPS:
                rows.append([step / STEPS] + [1.0 if j == k else 0.0 for j in range(len(curves))])
                errors.append(value)
    x, y = np.array(rows), np.array(errors)
    coef, residual, *_ = np.linalg.lstsq(x, y, rcond=None)
    freedom = len(y) - x.shape[1]
    covariance = residual[0] / freedom * np.linalg.inv(x.T @ x)
    t_value = coef[0] / math.sqrt(covariance[0, 0])
    assert trend.change == pytest.approx(coef[0], rel=1e-9)
    assert trend.p_falling == pytest.approx(stats.t.cdf(t_value, freedom), rel=1e-9)
    assert trend.p_rising == pytest.approx(stats.t.sf(t_value, freedom), rel=1e-9)
    assert trend.falling
