"""Where a phase's ``max_train_steps`` comes from, as its plan stores it and its header says
(``max_train_steps 200 (from ...)``): the study file, the user's ``--set``, sweep-lr's
recommendation, or sweep-lr's cap that ``tuner tune`` trains when no LR fit within it."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tests.orchestrate_tests.conftest import sqlite_url, toy_study
from tuner.playbook import start_round
from tuner.playbook.plan import load_plan
from tuner.spec import load_study


def _study_without_length(folder: Path) -> Path:
    path = toy_study(folder, round1={"steps": 10, "trials": 2})
    document = yaml.safe_load(path.read_text())
    del document["training"]["max_train_steps"]
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    return path


def _source(path: Path, output_dir: Path, sets: list[str]) -> tuple[int | None, str]:
    """Round 1's stored ``max_train_steps`` and its source, the phase created as run-round does."""
    plan = load_plan(start_round(load_study(path, sets), "round-1", output_dir).study.user_attrs)
    assert plan is not None
    return plan.max_train_steps, plan.max_train_steps_source


def test_a_length_in_the_file_is_the_study_files(tmp_path: Path) -> None:
    path = toy_study(tmp_path, round1={"steps": 10, "trials": 2})
    assert _source(path, tmp_path / "runs", []) == (40, "the study file")


@pytest.mark.parametrize("in_file", [True, False])
def test_a_length_given_with_set_is_the_set_not_the_file(tmp_path: Path, in_file: bool) -> None:
    path = (
        toy_study(tmp_path, round1={"steps": 10, "trials": 2}) if in_file else _study_without_length(tmp_path)
    )
    sets = ["max_train_steps=60"]
    assert _source(path, tmp_path / "runs", sets) == (60, "--set max_train_steps=60")


def test_sweep_lrs_stored_recommendation_is_sweep_lrs(tmp_path: Path) -> None:
    from tuner.orchestrate import PhaseSettings, open_storage, start_phase
    from tuner.playbook.study_results import store_recommendation

    path = _study_without_length(tmp_path)
    output_dir = tmp_path / "runs"
    sweep = start_phase(
        open_storage(sqlite_url(output_dir)), "toy", "sweep-lr", PhaseSettings.build(3), direction="minimize"
    )
    store_recommendation(sweep, 80)
    assert _source(path, output_dir, []) == (80, "tuner sweep-lr")


def test_the_cap_tune_trains_when_no_lr_fit_is_sweep_lrs_not_the_study_files(tmp_path: Path) -> None:
    """tune stored its fallback decision (no LR fit within the cap of 100 steps) and runs the
    rounds with ``--set max_train_steps=100``; the file leaves the field out."""
    from tuner.orchestrate import open_storage
    from tuner.playbook.budget import parse_budget
    from tuner.playbook.decision_log import Decision, Stage, TuneState, save_state

    path = _study_without_length(tmp_path)
    output_dir = tmp_path / "runs"
    sweep = Stage("toy", "sweep-lr", str(path), [], 3, 300, True, done=True, steps_per_trial=100)
    fallback = Decision("max_train_steps_fallback", sweep.key, "no LR fit", {"max_train_steps": 100})
    state = TuneState(parse_budget("900"), 900, [sweep], [fallback])
    save_state(open_storage(sqlite_url(output_dir)), "toy", state)
    cap = (100, "tuner sweep-lr's cap: no LR fit within it")
    assert _source(path, output_dir, ["max_train_steps=100"]) == cap
