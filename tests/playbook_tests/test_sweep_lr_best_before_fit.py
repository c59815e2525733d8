"""sweep-lr says when validation was best long before the training set was fit.

Digits with 30% of its training labels wrong: the sweep set max_train_steps to the 850-950 steps
it took to memorise the noise, while validation error bottomed at 100-150 steps and then more than
doubled; nothing said so. The rule (inclusive): the fastest LR's objective best step, median over
its seeds, at or before half its fit step.
"""

from __future__ import annotations

import dataclasses

import pytest

from tests.playbook_tests.sweep_builders import FIT, NOT_FIT, analyze, trial
from tuner.playbook.sweep_lr import SweepTrial, render_lines


def _kinds(result) -> list[str]:
    return [v.kind for v in result.verdicts]


def test_validation_best_long_before_the_fit_is_said_with_the_length_that_follows() -> None:
    trials = [
        trial(0.001, FIT, 900, seed=0, best_step=100),
        trial(0.001, FIT, 900, seed=1, best_step=150),
        trial(0.0001, NOT_FIT, best_step=1000, seed=0),
        trial(0.0001, NOT_FIT, best_step=1000, seed=1),
    ]
    result = analyze(trials, grid=[0.0001, 0.001], seeds=2, objective="val/error_rate")
    assert result.recommended_max_train_steps == 900  # the playbook's rule stands
    (said,) = [v for v in result.verdicts if v.kind == "best_long_before_fit"]
    assert (said.lr, said.best_step, said.fit_step, said.noisy_labels_steps) == (0.001, 125, 900, 300)
    assert said.text.startswith(
        "val/error_rate was best at step 125 with lr 0.001, long before the training set was fit (step 900)"
    )
    assert "noisy" in said.text and "--set max_train_steps=300" in said.advice
    table = "\n".join(render_lines(result, "train/accuracy", 1.0, 1000))
    assert "val best at" in table and "125" in table


@pytest.mark.parametrize(("best_step", "said"), [(450, True), (460, False)])
def test_half_the_fit_step_is_inside_the_bound(best_step: int, said: bool) -> None:
    result = analyze([trial(0.001, FIT, 900, best_step=best_step)], grid=[0.0001, 0.001])
    assert ("best_long_before_fit" in _kinds(result)) is said


def test_no_best_step_recorded_says_nothing_and_shows_no_column() -> None:
    result = analyze([trial(0.001, FIT, 900)], grid=[0.0001, 0.001])
    assert "best_long_before_fit" not in _kinds(result)
    assert "val best at" not in "\n".join(render_lines(result, "train/accuracy", 1.0, 1000))


def _with_curve(made: SweepTrial, curve: dict[int, float]) -> SweepTrial:
    return dataclasses.replace(
        made, curve=tuple(sorted(curve.items())), best_step=min(curve, key=curve.__getitem__)
    )


# validation error at every 50 steps of a 1,000-step fit: a plateau from 400 whose lowest eval
# falls at 450 by noise, and a bottom at 250 then a rise (labels being memorised)
_NOISE = [0.002, -0.001, 0.0, 0.001, -0.002, 0.001, -0.001, 0.002, 0.0, -0.001] * 2
PLATEAU = {s: 0.1 + max(0.0, 0.4 - s / 1000) / 4 + _NOISE[i] for i, s in enumerate(range(50, 1001, 50))}
PLATEAU[450] = 0.095
MEMORISING = {s: 0.1 + abs(s - 250) / 5000 + _NOISE[i] for i, s in enumerate(range(50, 1001, 50))}


def test_a_best_eval_early_on_a_plateau_is_not_validation_best_long_before_the_fit() -> None:
    """The best of many equal evals lands anywhere on a plateau: the position alone said
    "memorised" there; the curve after the best, flat within its noise, does not."""
    plateau = _with_curve(trial(0.001, FIT, 1000), PLATEAU)
    assert plateau.best_step == 450
    assert "best_long_before_fit" not in _kinds(analyze([plateau], grid=[0.0001, 0.001]))
    without_curve = dataclasses.replace(plateau, curve=())  # a reader without curves: the position decides
    assert "best_long_before_fit" in _kinds(analyze([without_curve], grid=[0.0001, 0.001]))


def test_a_curve_rising_after_an_early_best_is_validation_best_long_before_the_fit() -> None:
    rising = _with_curve(trial(0.001, FIT, 1000), MEMORISING)
    assert rising.best_step == 250
    result = analyze([rising], grid=[0.0001, 0.001], objective_direction="minimize")
    assert "best_long_before_fit" in _kinds(result)
    # the same curve as an accuracy (1 - error) to maximise rises too
    accuracy = _with_curve(trial(0.001, FIT, 1000), {s: 1 - v for s, v in MEMORISING.items()})
    accuracy = dataclasses.replace(accuracy, best_step=250)
    assert "best_long_before_fit" in _kinds(
        analyze([accuracy], grid=[0.0001, 0.001], objective_direction="maximize")
    )
    assert "best_long_before_fit" not in _kinds(
        analyze([accuracy], grid=[0.0001, 0.001])
    )  # read as an error: falls
