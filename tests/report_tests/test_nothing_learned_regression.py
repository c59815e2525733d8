"""A regression's chance level is predicting the training mean: the scores the run recorded.

The same rule as a classifier's (the best trial must close 10% of the way from chance to a
perfect score), read from ``status.json``'s ``chance`` rather than a class count: an mse that
stays near what the training mean scores learned nothing, whatever its trend.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tests.report_tests.builders import Built, add_trial, run_folder, study
from tests.report_tests.test_range_trend import POSITIONS
from tests.report_tests.test_verdicts import LR, kinds, only, report_of

#: What always predicting the training mean scored: an mse of 2.0 on validation, r2 just below 0.
CHANCE = {"task": "regression", "chance": {"val": {"mse": 2.0, "mae": 1.1, "r2": -0.01}, "train": {}}}


def _round(tmp_path: Path, metric: str, values: list[float], status: dict | None = CHANCE) -> Built:
    """Round 1 on ``metric`` whose value improves as the LR rises (a trend toward the range's top)."""
    built = study(tmp_path)
    document = yaml.safe_load(built.path.read_text())
    document["objective"] = {
        "metric": metric,
        "direction": "maximize" if metric.endswith("r2") else "minimize",
    }
    built.path.write_text(yaml.safe_dump(document, sort_keys=False))
    phase = built.start("round-1")
    for slot, (u, value) in enumerate(zip(POSITIONS, values, strict=True)):
        folder = run_folder(tmp_path / f"trial-{slot}", best_step=20, metrics={metric: value}, status=status)
        add_trial(phase, slot, value, {LR: 0.01 * 100**u}, best_step=20, run_dir=folder)
    return built


def _toward(best: float, step: float) -> list[float]:
    return [round(best - step * (len(POSITIONS) - 1 - i), 4) for i in range(len(POSITIONS))]


@pytest.mark.parametrize(("best", "learned"), [(1.85, False), (1.75, True)])
def test_an_mse_must_close_a_tenth_of_the_way_from_the_training_mean_to_zero(
    tmp_path: Path, best: float, learned: bool
) -> None:
    # chance 2.0: 10% of the way to 0 is 1.8; 1.85 is short of it, 1.75 past it
    report = report_of(_round(tmp_path, "val/mse", _toward(best, -0.01)))
    phase = report.phases[0]
    assert phase.learning is not None and phase.boundaries is not None
    if learned:
        found = only(phase.learning.findings, "learned")
        assert found.classes is None and found.chance == 2.0
        assert "always predicting the training mean" in found.text
        assert only(phase.boundaries.findings, "range_edge").edge == "high"
    else:
        nothing = only(phase.learning.findings, "nothing_learned")
        assert (nothing.chance, nothing.perfect, nothing.level) == (2.0, 0.0, "warning")
        assert kinds(phase.boundaries.findings) == ["not_judged_nothing_learned"]
        assert report.suggestions == []


def test_an_r2_is_judged_from_its_chance_toward_one(tmp_path: Path) -> None:
    # chance -0.01: 10% of the way to 1 is 0.091; 0.05 is short of it
    report = report_of(_round(tmp_path, "val/r2", _toward(0.05, 0.002)))
    nothing = only(report.phases[0].learning.findings, "nothing_learned")
    assert (nothing.chance, nothing.perfect) == (-0.01, 1.0)


def test_a_regression_whose_run_recorded_no_chance_gets_no_learning_verdict(tmp_path: Path) -> None:
    """A dataset tuner cannot read the targets of at once (not a TensorDataset): no chance level,
    so no verdict, rather than a classifier's guessed from a class count it does not have."""
    report = report_of(
        _round(tmp_path, "val/mse", _toward(1.85, -0.01), {"task": "regression", "chance": {}})
    )
    assert report.phases[0].learning is None
