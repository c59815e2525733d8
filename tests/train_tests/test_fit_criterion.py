"""FitCriterion: stop at the first eval that meets a threshold (status ``target_reached``)."""

from __future__ import annotations

import csv
import math
from pathlib import Path
from typing import Any

import pytest
import torch

from tuner.errors import WorkloadError
from tuner.train import (
    Callback,
    FitCriterion,
    StopReason,
    StopTraining,
    metric_direction,
    read_status,
    run_training,
)


class StopAt(Callback):
    """Stops the run at ``step`` the way a signal does (status ``interrupted``, resumable)."""

    def __init__(self, step: int) -> None:
        self.step = step

    def on_train_step_end(self, loop: Any) -> None:
        if loop.step == self.step:
            raise StopTraining(StopReason.INTERRUPTED)


def _train(loaded: Any, run_dir: Path, *callbacks: Callback):
    return run_training(
        loaded.spec, run_dir, base_dir=loaded.base_dir, extra_callbacks=callbacks, progress=False
    )


def _evals(run_dir: Path) -> list[dict[str, str]]:
    with (run_dir / "metrics.csv").open() as handle:
        return [row for row in csv.DictReader(handle) if row["train/accuracy"]]


FIELDS = {"max_train_steps": 200, "eval_every": 5}


def test_training_stops_at_the_first_eval_that_meets_the_threshold(make_study, tmp_path: Path) -> None:
    loaded = make_study(**FIELDS)
    fit = FitCriterion("train/accuracy", 0.5)
    result = _train(loaded, tmp_path / "run", fit)

    evals = _evals(tmp_path / "run")
    accuracies = [float(row["train/accuracy"]) for row in evals]
    assert accuracies[0] < 0.5 <= accuracies[-1]  # it had to train a while: the stop is real
    assert all(a < 0.5 for a in accuracies[:-1])
    assert result.status == "target_reached" and result.step == fit.fit_step == int(evals[-1]["step"]) < 200
    assert fit.trial_attrs() == {"fit_step": result.step, "best_fit_value": max(accuracies)}
    assert "train/accuracy" in result.message

    errors = [float(row["val/error_rate"]) for row in evals]
    assert result.best_value == min(errors)
    assert result.best_step == int(evals[errors.index(min(errors))]["step"])
    status = read_status(tmp_path / "run")
    assert status["status"] == "target_reached"
    assert (status["best_value"], status["best_step"], status["step"]) == (
        result.best_value,
        result.best_step,
        result.step,
    )
    saved = torch.load(tmp_path / "run" / "checkpoints" / "latest.pt", weights_only=True)
    assert saved["step"] == result.step  # the final checkpoint is of the stop step

    # a finished run is never trained further, with or without the criterion
    for callbacks in ([FitCriterion("train/accuracy", 0.5)], []):
        again = _train(loaded, tmp_path / "run", *callbacks)
        assert (again.status, again.step, again.best_value) == (
            "target_reached",
            result.step,
            result.best_value,
        )
        assert len(_evals(tmp_path / "run")) == len(evals)
        assert read_status(tmp_path / "run")["status"] == "target_reached"


def test_a_threshold_never_met_trains_to_the_end(make_study, tmp_path: Path) -> None:
    loaded = make_study(max_train_steps=20, eval_every=10)
    fit = FitCriterion("val/loss", 1e-9)  # minimize: loss <= 1e-9 never happens in 20 steps
    result = _train(loaded, tmp_path / "run", fit)
    assert (result.status, result.step, fit.fit_step) == ("completed", 20, None)
    losses = [float(row["val/loss"]) for row in _evals(tmp_path / "run")]
    assert fit.direction == "minimize" and fit.best_value == min(losses)


def test_the_fit_survives_a_resume(make_study, tmp_path: Path) -> None:
    loaded = make_study(**FIELDS)
    straight = FitCriterion("train/accuracy", 0.5)
    _train(loaded, tmp_path / "straight", straight)
    assert straight.fit_step is not None and straight.fit_step > 5
    first = _train(loaded, tmp_path / "resumed", FitCriterion("train/accuracy", 0.5), StopAt(5))
    assert first.status == "interrupted"
    resumed = FitCriterion("train/accuracy", 0.5)
    assert _train(loaded, tmp_path / "resumed", resumed).status == "target_reached"
    assert resumed.trial_attrs() == straight.trial_attrs()


def test_a_metric_the_workload_does_not_compute_names_those_it_does(make_study, tmp_path: Path) -> None:
    loaded = make_study(max_train_steps=12, eval_every=6)
    with pytest.raises(WorkloadError, match=r"val/perplexity.*it computes: val/loss, val/accuracy"):
        _train(loaded, tmp_path / "run", FitCriterion("val/perplexity", 1.0))


def test_state_dict_round_trip_and_threshold_sides() -> None:
    fit = FitCriterion("train/accuracy", 0.9)
    fit.fit_step, fit.best_value = 40, 0.93
    copy = FitCriterion("train/accuracy", 0.9)
    copy.load_state_dict(fit.state_dict())
    assert copy.trial_attrs() == {"fit_step": 40, "best_fit_value": 0.93}
    assert fit.met(0.9) and not fit.met(0.89) and not fit.met(math.nan)
    low = FitCriterion("train/accuracy", 0.1, direction="minimize")
    assert low.met(0.1) and not low.met(0.2)
    with pytest.raises(ValueError):
        FitCriterion("train/accuracy", 0.9, direction="up")


@pytest.mark.parametrize(
    ("name", "direction"),
    [
        ("train/accuracy", "maximize"),
        ("val/top5_accuracy", "maximize"),
        ("val/mcc", "maximize"),
        ("val/class_3_recall", "maximize"),
        ("train/loss", "minimize"),
        ("val/error_rate", "minimize"),
        ("val/perplexity", "minimize"),
        ("loss", "minimize"),
    ],
)
def test_metric_direction(name: str, direction: str) -> None:
    assert metric_direction(name) == direction
