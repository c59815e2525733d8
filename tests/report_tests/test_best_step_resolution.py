"""A best-step position verdict needs evals enough to mean anything.

With evals only at steps 100 and 120 of a 120-step trial, every best step lands in "the last
25%" by construction. The rule: at least 4 evals in a run for any position verdict, and at least
2 in the last 25% for "still improving"; otherwise "cannot tell", with an ``eval_every`` to use.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.report_tests.builders import Built, add_trial, study
from tests.report_tests.test_verdicts import LR, kinds, only, report_of


def _round(tmp_path: Path, eval_every: int, best_steps: list[int], steps: int = 120) -> Built:
    built = study(tmp_path, max_train_steps=steps, eval_every=eval_every, round1={"steps": steps})
    phase = built.start("round-1")
    for slot, step in enumerate(best_steps):
        add_trial(phase, slot, 0.1 + 0.01 * slot, {LR: 0.05 + 0.01 * slot}, best_step=step)
    return built


@pytest.mark.parametrize(
    ("eval_every", "best_steps", "evals", "late_evals"),
    [
        (100, [100, 120, 100, 100, 120, 100], 2, 2),  # evals at 100 and 120: both in the last 25%
        (40, [40, 80, 120, 80, 40, 120], 3, 1),  # 3 evals: too few for any position verdict
        (30, [120, 120, 120, 90, 120, 120], 4, 1),  # 4 evals, only step 120 after 90: late unseen
    ],
)
def test_too_few_evals_cannot_tell_and_suggest_eval_every(
    tmp_path: Path, eval_every: int, best_steps: list[int], evals: int, late_evals: int
) -> None:
    report = report_of(_round(tmp_path, eval_every, best_steps))
    best_step = report.phases[0].best_step
    assert best_step is not None
    unresolved = only(best_step.findings, "best_step_unresolved")
    assert (unresolved.evals, unresolved.late_evals, unresolved.level) == (evals, late_evals, "warning")
    assert unresolved.suggested_eval_every == 6  # 120 / 20: 20 evals a run, 5 in its last 25%
    assert "cannot tell" in unresolved.text and "eval_every" in unresolved.advice
    found = kinds(best_step.findings)
    assert not {"best_step_late", "best_step_ok", "best_step_early", "best_step_coarse"} & set(found)
    assert {s.key: (s.old, s.new) for s in report.suggestions} == {"training.eval_every": (eval_every, 6)}


def test_two_evals_in_the_last_quarter_are_enough_to_say_still_improving(tmp_path: Path) -> None:
    # eval_every 20: 6 evals, 2 of them (100, 120) after step 90
    best_step = report_of(_round(tmp_path, 20, [120, 100, 120, 120, 100, 120])).phases[0].best_step
    assert best_step is not None
    assert only(best_step.findings, "best_step_late").level == "warning"
    assert "best_step_unresolved" not in kinds(best_step.findings)


def test_four_evals_are_enough_to_say_best_steps_spread_over_training(tmp_path: Path) -> None:
    # eval_every 30: 4 evals; the best steps are not late, so the one eval after step 90 is enough
    best_step = report_of(_round(tmp_path, 30, [30, 60, 90, 60, 30, 90])).phases[0].best_step
    assert best_step is not None
    assert kinds(best_step.findings) == ["best_step_coarse", "best_step_ok"]
