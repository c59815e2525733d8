"""Were round 1's trials still improving when they ended? One verdict answers it: round 1's own
best-step verdict (calibrated, docs/verdicts.md). Round 2's transfer section quotes it when it says
so, and says nothing of round 1's length otherwise, so the two sections of one report never
disagree. A count of late best steps alone (9 of 12 in the last 25%) is not that verdict: where
the best trials peaked earlier, the best-step verdict says the length looks right."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.report_tests.builders import Built, add_trial, study
from tests.report_tests.test_verdicts import LR, kinds, only, report_of
from tuner.playbook.plan import load_plan
from tuner.report import StudyReport
from tuner.report.terminal import render_report

# the 5 best trials peak in the middle but for 2; the 7 others at the end: 9 of 12 late
SPREAD = [40, 100, 50, 100, 60, *[100] * 7]
ALL_LATE = [100] * 12


def _rounds(tmp_path: Path, best_steps: list[int], round2_values: list[float]) -> Built:
    """Round 1: 12 trials of 100 steps (of 500: short on purpose), best trial first, whose curves
    fall until their ``best_steps``; round 2: its 3 best points at full length, best mid-run."""
    built = study(
        tmp_path, max_train_steps=500, eval_every=10, round1={"trials": 12, "steps": 100}, round2={"top_k": 3}
    )
    first = built.start("round-1")
    for slot, step in enumerate(best_steps):
        add_trial(first, slot, 0.10 + 0.01 * slot, {LR: 0.05 + 0.01 * slot}, best_step=step)
    second = built.start("round-2")
    plan = load_plan(second.user_attrs)
    assert plan is not None
    for slot, value in enumerate(round2_values):
        add_trial(second, slot, value, plan.slots[slot].values, best_step=250, **plan.slots[slot].attrs)
    return built


def _text(report: StudyReport) -> str:
    return "\n".join(line.plain for line in render_report(report))


def test_late_best_steps_outside_the_top_trials_are_not_called_still_improving(tmp_path: Path) -> None:
    built = _rounds(tmp_path, SPREAD, [0.05, 0.07, 0.09])
    report = report_of(built)
    round1, round2 = report.phases[1], report.phases[0]
    assert round1.best_step is not None and round2.transfer is not None
    fine = only(round1.best_step.findings, "best_step_ok")
    assert (fine.late_all, fine.completed) == (9, 12) and "spread over training" in fine.text
    assert "source_too_short" not in kinds(round2.transfer.findings)
    assert only(round2.transfer.findings, "rank_correlation").quality == "good"
    text = _text(report)
    assert "9 in the last 25%, of 12 completed" in text
    assert "were still improving" not in text and "still improving when" not in text
    alone = report_of(built, ["round-2"])  # round 1 read only to compare with: the same answer
    assert alone.phases[0].transfer is not None
    assert "source_too_short" not in kinds(alone.phases[0].transfer.findings)


@pytest.mark.parametrize(
    ("round2_values", "quality", "level"),
    [([0.05, 0.07, 0.09], "good", "info"), ([0.09, 0.07, 0.05], "reversed", "warning")],
)
def test_the_transfer_quotes_round_1s_still_improving_verdict(
    tmp_path: Path, round2_values: list[float], quality: str, level: str
) -> None:
    built = _rounds(tmp_path, ALL_LATE, round2_values)
    report = report_of(built)
    round1, round2 = report.phases[1], report.phases[0]
    assert round1.best_step is not None and round2.transfer is not None
    late = only(round1.best_step.findings, "best_step_late")
    assert late.short_round and "still improving when they ended" in late.text
    assert only(round2.transfer.findings, "rank_correlation").quality == quality
    short = only(round2.transfer.findings, "source_too_short")
    assert (short.late, short.completed, short.late_top, short.top) == (12, 12, 5, 5)
    assert (short.late, short.completed) == (late.late_all, late.completed)
    assert (
        short.level == level
        and "round-1's best-step verdict says its trials were still improving" in short.text
    )
    assert late.rule in short.rule
    if quality == "good":
        assert short.advice is None and "yet their ranking held" in short.text
    else:
        assert "lengthen round-1" in short.advice
    alone = report_of(built, ["round-2"])  # round 1 not shown: its verdict built for the quote alone
    assert [p.phase for p in alone.phases] == ["round-2"] and alone.phases[0].transfer is not None
    assert only(alone.phases[0].transfer.findings, "source_too_short").text == short.text
    correlation = only(alone.phases[0].transfer.findings, "rank_correlation")
    assert (correlation.quality, correlation.best_stayed_best) == (quality, quality == "good")
