"""A best-step position verdict needs evals enough to mean anything.

With evals only at steps 100 and 120 of a 120-step trial, every best step lands in "the last
25%" by construction. The rule: at least 4 evals in a run for any position verdict, and at least
2 in the last 25% for "still improving"; otherwise "cannot tell", with an ``eval_every`` to use.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from tests.report_tests.builders import Built, add_trial, study
from tests.report_tests.test_verdicts import LR, kinds, only, report_of
from tuner.cli.app import app
from tuner.playbook.plan import load_plan


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
    assert unresolved.suggested_eval_every == 20  # the largest readable: 6 evals, 2 after step 90
    assert "cannot tell" in unresolved.text and "eval_every" in unresolved.advice
    found = kinds(best_step.findings)
    assert not {"best_step_late", "best_step_ok", "best_step_early", "best_step_coarse"} & set(found)
    assert {s.key: (s.old, s.new) for s in report.suggestions} == {"training.eval_every": (eval_every, 20)}


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


def test_the_suggested_eval_every_fits_the_shortest_round_and_says_its_evals_at_full_length(
    tmp_path: Path,
) -> None:
    # round 1: 120 of 600 steps. 120 / 20 = 6 would make a 600-step round 2 run 100 evals
    built = study(tmp_path, max_train_steps=600, eval_every=100, round1={"steps": 120})
    phase = built.start("round-1")
    for slot, step in enumerate([100, 120, 100, 100, 120, 100]):
        add_trial(phase, slot, 0.1 + 0.01 * slot, {LR: 0.05 + 0.01 * slot}, best_step=step)
    destination = tmp_path / "next.yaml"
    args = [
        "report",
        str(built.path),
        "--output-dir",
        str(built.output_dir),
        "--write-next",
        str(destination),
    ]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert yaml.safe_load(destination.read_text())["training"]["eval_every"] == 20
    unresolved = only(report_of(built).phases[0].best_step.findings, "best_step_unresolved")
    assert "100 -> 20 (6 evals a run of 120 steps, 2 in its last 25%; 30 at the full 600 steps)" in (
        unresolved.advice
    )


def test_a_full_length_round_suggests_an_eval_every_its_shorter_round_1_can_use(tmp_path: Path) -> None:
    # eval_every 300: 2 evals in round 2's 600 steps; round 1's 120 steps set the suggestion
    built = study(tmp_path, max_train_steps=600, eval_every=300, round1={"steps": 120}, round2={"top_k": 3})
    first = built.start("round-1")
    for slot in range(5):
        add_trial(first, slot, 0.1 + 0.01 * slot, {LR: 0.05 + 0.01 * slot}, best_step=120)
    second = built.start("round-2")
    plan = load_plan(second.user_attrs)
    assert plan is not None
    for slot, planned in enumerate(plan.slots):
        add_trial(second, slot, 0.1 + 0.01 * slot, planned.values, best_step=600, **planned.attrs)
    report = report_of(built)
    assert report.phases[0].phase == "round-2"
    best_step = report.phases[0].best_step
    assert best_step is not None
    unresolved = only(best_step.findings, "best_step_unresolved")
    assert unresolved.suggested_eval_every == 20
    assert "6 evals a run of 120 steps (the shortest round)" in unresolved.advice


@pytest.mark.parametrize(("steps", "expected"), [(120, 20), (600, 100), (1000, 200), (40, 8), (3, None)])
def test_suggested_eval_every_is_the_largest_readable_one_with_enough_evals(
    steps: int, expected: int | None
) -> None:
    from tuner.playbook.eval_grid import eval_counts, suggested_eval_every

    assert suggested_eval_every(steps) == expected
    if expected is None:  # too short for 4 evals at any eval_every
        return
    evals, late = eval_counts(expected, steps)
    assert evals >= 4 and late >= 2


def test_a_phase_with_no_completed_trial_gets_no_best_step_advice(tmp_path: Path) -> None:
    built = study(tmp_path, max_train_steps=120, eval_every=100, round1={"steps": 120})
    phase = built.start("round-1")
    add_trial(phase, 0, None, {LR: 0.05}, state="FAIL", failure_reason="crashed")
    add_trial(phase, 1, None, {LR: 0.06}, state="RUNNING")
    best_step = report_of(built).phases[0].best_step
    assert best_step is not None
    assert kinds(best_step.findings) == ["best_step_too_few"]
    assert best_step.findings[0].text == "no completed trial to judge"
    assert best_step.findings[0].advice is None
    result = CliRunner().invoke(app, ["report", str(built.path), "--output-dir", str(built.output_dir)])
    assert result.exit_code == 0, result.output
    assert "eval_every" not in result.output


def test_one_completed_trial_still_hears_that_the_first_eval_is_too_late(tmp_path: Path) -> None:
    built = study(tmp_path, max_train_steps=120, eval_every=100, round1={"steps": 120})
    add_trial(built.start("round-1"), 0, 0.1, {LR: 0.05}, best_step=100)
    best_step = report_of(built).phases[0].best_step
    assert best_step is not None
    assert kinds(best_step.findings) == ["best_step_coarse", "best_step_too_few"]


def test_a_first_eval_after_10_percent_suggests_a_readable_eval_every_that_sees_it(tmp_path: Path) -> None:
    # eval_every 20 of 120 steps: first eval at 17%; 10 is the largest readable value <= 12 (10%)
    best_step = report_of(_round(tmp_path, 20, [40, 60, 80, 60, 40, 80])).phases[0].best_step
    assert best_step is not None
    coarse = only(best_step.findings, "best_step_coarse")
    assert "lower training.eval_every (e.g. to 10)" in coarse.advice
