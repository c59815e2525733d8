"""No verdict on ranges or lengths from trials that learned nothing.

Every trial at chance level (0.88-0.94 error with 10 classes) once got "move the LR range up":
a trend in noise. The rule: the best trial must close at least 10% of the way from chance (the
error of always guessing the most common class, from the class count the run recorded) to a
perfect score; otherwise the report says first that nothing learned, and judges neither ranges
nor best steps.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.report_tests.builders import Built, add_trial, run_folder, study
from tests.report_tests.test_range_trend import POSITIONS
from tests.report_tests.test_verdicts import LR, kinds, only, report_of
from tuner.report.learning import chance_level


def _round(tmp_path: Path, errors: list[float], status: dict[str, object] | None) -> Built:
    """Round 1 whose error falls as the LR rises (a clear trend toward the top of the range)."""
    built = study(tmp_path)
    phase = built.start("round-1")
    for slot, (u, error) in enumerate(zip(POSITIONS, errors, strict=True)):
        folder = run_folder(
            tmp_path / f"trial-{slot}", best_step=20, metrics={"val/error_rate": error}, status=status
        )
        add_trial(phase, slot, error, {LR: 0.01 * 100**u}, best_step=20, run_dir=folder)
    return built


def _falling(best: float) -> list[float]:
    return [round(best + 0.06 - 0.005 * i, 4) for i in range(len(POSITIONS) - 1)] + [best]


def test_every_trial_at_chance_level_says_nothing_learned_and_moves_no_range(tmp_path: Path) -> None:
    errors = [0.94, 0.94, 0.93, 0.93, 0.93, 0.92, 0.92, 0.91, 0.90, 0.90, 0.89, 0.88]
    report = report_of(_round(tmp_path, errors, {"num_classes": 10}))
    phase = report.phases[0]
    assert phase.learning is not None
    nothing = only(phase.learning.findings, "nothing_learned")
    assert (nothing.level, nothing.classes, nothing.best_value) == ("warning", 10, 0.88)
    assert nothing.chance == pytest.approx(0.9)
    assert "nothing learned" in nothing.text and "chance" in nothing.text
    assert phase.boundaries is not None and phase.best_step is not None
    assert kinds(phase.boundaries.findings) == ["not_judged_nothing_learned"]
    assert kinds(phase.best_step.findings) == ["not_judged_nothing_learned"]
    assert report.suggestions == []
    assert phase.next_steps[0] == nothing.advice and len(phase.next_steps) == 1
    assert phase.findings[0] is nothing  # said first


@pytest.mark.parametrize(("best", "learned"), [(0.82, False), (0.80, True)])
def test_the_margin_is_a_tenth_of_the_way_from_chance_to_perfect(
    tmp_path: Path, best: float, learned: bool
) -> None:
    # chance 0.9: 10% of the way to 0 is 0.81; 0.82 is above it, 0.80 below
    report = report_of(_round(tmp_path, _falling(best), {"num_classes": 10}))
    phase = report.phases[0]
    assert phase.learning is not None and phase.boundaries is not None
    if learned:
        assert only(phase.learning.findings, "learned").level == "ok"
        assert only(phase.boundaries.findings, "range_edge").edge == "high"
        assert report.suggestions
    else:
        assert only(phase.learning.findings, "nothing_learned").level == "warning"
        assert report.suggestions == []


def test_the_chance_level_of_imbalanced_classes_is_the_majority_guess(tmp_path: Path) -> None:
    # 90% of validation examples in class 0: always guessing it errs 10% of the time
    counts = {"val": [90, 10], "train": [720, 80]}
    report = report_of(_round(tmp_path, _falling(0.095), {"num_classes": 2, "class_counts": counts}))
    assert report.phases[0].learning is not None
    nothing = only(report.phases[0].learning.findings, "nothing_learned")
    assert nothing.chance == pytest.approx(0.1)


def test_without_a_recorded_class_count_the_ranges_are_judged_as_before(tmp_path: Path) -> None:
    report = report_of(
        _round(tmp_path, [0.95, 0.945, 0.94, 0.935, 0.93, 0.925, 0.92, 0.91, 0.90, 0.89, 0.885, 0.88], None)
    )
    assert report.phases[0].learning is None
    assert report.phases[0].boundaries is not None
    assert "range_edge" in kinds(report.phases[0].boundaries.findings)


@pytest.mark.parametrize(
    ("metric", "classes", "chance"),
    [
        ("val/error_rate", 10, 0.9),
        ("val/accuracy", 4, 0.25),
        ("val/loss", 2, 0.6931),
        ("val/perplexity", 65, 65.0),
        ("val/top5_accuracy", 10, 0.5),
        ("val/mcc", 3, 0.0),
        ("val/my_score", 10, None),
    ],
)
def test_the_chance_level_of_each_known_metric(metric: str, classes: int, chance: float | None) -> None:
    level = chance_level(metric, classes, None)
    if chance is None:
        assert level is None
    else:
        assert level is not None and level.chance == pytest.approx(chance, abs=1e-4)
