"""Health on small phases: a phase where every trial failed is an error naming the top reason, never
a tick; a phase with too few completed trials is "too few to judge", never "all fine"."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.report_tests.builders import Built, add_trial, study
from tests.report_tests.test_verdicts import LR, only, report_of
from tests.spec_tests._support import invoke, plain


def _round(tmp_path: Path, outcomes: list[str | float]) -> Built:
    """Round 1 with one trial per outcome: a value (completed) or a failure reason."""
    built = study(tmp_path, round1={"trials": max(4, len(outcomes))})
    phase = built.start("round-1")
    for slot, outcome in enumerate(outcomes):
        if isinstance(outcome, str):
            add_trial(phase, slot, None, {LR: 0.1 + slot / 100}, state="FAIL", failure_reason=outcome)
        else:
            add_trial(phase, slot, outcome, {LR: 0.1 + slot / 100}, best_step=20)
    return built


@pytest.mark.parametrize(
    ("outcomes", "top"),
    [(["oom", "oom"], "oom"), (["crashed", "oom", "oom", "timeout", "oom"], "oom"), (["timeout"], "timeout")],
)
def test_a_phase_where_every_trial_failed_is_an_error_with_its_top_reason(
    tmp_path: Path, outcomes: list[str | float], top: str
) -> None:
    report = report_of(_round(tmp_path, outcomes)).phases[0]
    rate = only(report.health.findings, "failure_rate")
    n = len(outcomes)
    assert (rate.level, rate.failed, rate.finished) == ("warning", n, n)
    assert (
        "the only trial" if n == 1 else f"all {n} trials"
    ) in rate.text and f"top reason: {top}" in rate.text
    assert "error.log" in report.next_steps[0]


def test_every_trial_failed_is_shown_as_an_error_not_a_tick(tmp_path: Path) -> None:
    built = _round(tmp_path, ["oom", "oom"])
    shown = invoke("report", str(built.path), "--output-dir", str(built.output_dir))
    text = plain(shown.stdout)
    assert "✓ failure rate" not in text and "all 2 trials failed" in text, text
    assert "nothing to change" not in text


def test_some_failures_among_few_trials_are_too_few_to_judge_and_none_is_fine(tmp_path: Path) -> None:
    some = only(report_of(_round(tmp_path / "some", [0.3, "oom"])).phases[0].health.findings, "failure_rate")
    assert some.level == "info" and "too few" in some.text
    none = only(report_of(_round(tmp_path / "none", [0.3, 0.2])).phases[0].health.findings, "failure_rate")
    assert none.level == "ok"
    # from 5 finished trials the rate is judged: 2 of 5 is a warning, 1 of 5 is fine
    two = only(
        report_of(_round(tmp_path / "two", [0.3, 0.2, 0.1, "oom", "oom"])).phases[0].health.findings,
        "failure_rate",
    )
    assert two.level == "warning" and "all" not in two.text
    one = only(
        report_of(_round(tmp_path / "one", [0.3, 0.2, 0.1, 0.4, "oom"])).phases[0].health.findings,
        "failure_rate",
    )
    assert one.level == "ok"


@pytest.mark.parametrize("completed", [1, 2])
def test_too_few_completed_trials_are_too_few_to_judge_not_all_fine(tmp_path: Path, completed: int) -> None:
    report = report_of(_round(tmp_path, [0.3 - i / 10 for i in range(completed)])).phases[0]
    assert not any("nothing to change" in step for step in report.next_steps)
    assert any("too few" in step and f"{completed} completed" in step for step in report.next_steps)


def test_three_completed_trials_with_no_warning_are_judged_fine(tmp_path: Path) -> None:
    report = report_of(_round(tmp_path, [0.3, 0.25, 0.2])).phases[0]
    assert report.next_steps == ["nothing to change: this phase's verdicts are all fine"]
