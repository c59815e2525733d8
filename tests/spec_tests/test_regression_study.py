"""A regression study file: its objective's direction follows the metric when left out, and the
classifier's default fit metric (train/accuracy) is judged only where a sweep reads it."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tuner.errors import SpecError
from tuner.spec import load_study
from tuner.spec._templates import render_template
from tuner.workloads import check_study


def _study(folder: Path, **changes: object) -> Path:
    document = yaml.safe_load(render_template("regression"))
    for key, value in changes.items():
        if value is None:
            document.pop(key)
        else:
            document[key] = value
    path = folder / "reg.yaml"
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    return path


@pytest.mark.parametrize(("metric", "direction"), [("val/r2", "maximize"), ("val/mae", "minimize")])
def test_an_objective_without_a_direction_takes_its_metrics(
    tmp_path: Path, metric: str, direction: str
) -> None:
    loaded = load_study(_study(tmp_path, objective={"metric": metric}))
    assert loaded.spec.objective.direction == direction


def test_a_direction_given_is_kept(tmp_path: Path) -> None:
    loaded = load_study(_study(tmp_path, objective={"metric": "val/r2", "direction": "minimize"}))
    assert loaded.spec.objective.direction == "minimize"


def test_a_regression_with_a_length_needs_no_sweep_section(tmp_path: Path) -> None:
    check_study(load_study(_study(tmp_path, sweep_lr=None)))  # raises nothing


def test_a_regression_that_sweep_lr_must_measure_names_its_fit_metric(tmp_path: Path) -> None:
    path = _study(tmp_path, sweep_lr=None)
    with pytest.raises(SpecError, match=r"sweep_lr\.fit_metric: 'train/accuracy' is not a metric regression"):
        check_study(load_study(path, ["max_train_steps=null"]))
