"""sweep-lr says when validation was best long before the training set was fit.

Digits with 30% of its training labels wrong: the sweep set max_train_steps to the 850-950 steps
it took to memorise the noise, while validation error bottomed at 100-150 steps and then more than
doubled; nothing said so. The rule (inclusive): the fastest LR's objective best step, median over
its seeds, at or before half its fit step.
"""

from __future__ import annotations

import pytest

from tests.playbook_tests.test_sweep_lr_verdicts import FIT, NOT_FIT, analyze, trial
from tuner.playbook.sweep_lr import render_lines


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
