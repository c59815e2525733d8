"""``sweep_lr.max_total_steps`` (``tuner sweep-lr --max-total-steps``): the sweep's share of a
budget lowers every LR's cap up front and is never exceeded; caps too small are refused."""

from __future__ import annotations

from pathlib import Path

import optuna
import pytest

from tests.orchestrate_tests.conftest import run_tuner, sqlite_url
from tests.playbook_tests.test_estimate import STUDY
from tests.playbook_tests.test_sweep_lr_command import _sweep, _trials
from tests.playbook_tests.test_sweep_lr_stops import _study
from tests.spec_tests._support import write_study
from tuner.orchestrate import open_storage
from tuner.playbook.estimate import planned_phases
from tuner.spec import load_study


def test_a_total_cap_lowers_every_lrs_cap_and_the_sweep_stays_within_it(tmp_path: Path) -> None:
    # nothing fits (no LR is told to), so every trial trains to its cap: the worst case
    path = _study(tmp_path, [[5.0, 1]])
    done = _sweep(path, "--max-total-steps", "125")
    assert done.returncode == 0, done.stderr
    # 125 // 3 trials = 41, down to the eval grid (10): 40 each, not sweep_lr.max_steps' 60
    assert "sweep-lr: 3 trials of 40 steps" in done.stderr
    line = (
        "sweep_lr.max_total_steps 125: each of the 3 grid trials trains at most 40 steps (not 60), 120 in all"
    )
    assert line in done.stderr
    trials = _trials(path)
    assert {t.user_attrs["max_train_steps"] for t in trials} == {40}
    assert sum(t.user_attrs["final_step"] for t in trials) == 120 <= 125
    assert "within 40 steps" in done.stdout  # the verdict speaks of the cap trained with


def test_validate_shows_the_lowered_cap(tmp_path: Path) -> None:
    path = _study(tmp_path)
    done = run_tuner("validate", str(path), "--set", "sweep_lr.max_total_steps=90", "--no-build")
    assert done.returncode == 0, done.stderr
    assert "3 LRs (0.01 .. 1), up to 30 steps each" in done.stdout
    assert "each of the 3 grid trials trains at most 30 steps (not 60), 90 in all" in done.stdout


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (("validate", "--set", "sweep_lr.max_total_steps=89"), "too small for 3 grid trials"),
        (("validate", "--set", "sweep_lr.max_total_steps=0"), "expected a positive integer, got 0"),
        (("sweep-lr", "--max-total-steps", "0"), "--max-total-steps expects a positive whole number"),
        (("sweep-lr", "--max-total-steps", "lots"), "--max-total-steps expects a positive whole number"),
        (("sweep-lr", "--max-total-steps", "60"), "give at least 90"),
    ],
)
def test_bad_caps_are_refused_in_one_line(tmp_path: Path, args: tuple[str, ...], says: str) -> None:
    path = _study(tmp_path)
    command, *rest = args
    done = run_tuner(command, str(path), "--output-dir", str(tmp_path / "runs"), *rest)
    assert done.returncode == 2, done.stderr
    assert says in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr
    database = tmp_path / "runs" / "toy" / "study.db"
    if database.exists():  # refused before the phase was created
        assert "toy/sweep-lr" not in optuna.get_all_study_names(open_storage(sqlite_url(tmp_path / "runs")))


def test_estimate_plans_the_sweep_with_the_lowered_cap(tmp_path: Path) -> None:
    # 6 LRs x 2 seeds = 12 trials; 12000 steps in all: 1000 each instead of max_steps' 2000
    text = STUDY.replace("  max_steps: 2000\n", "  max_steps: 2000\n  max_total_steps: 12000\n")
    sweep = planned_phases(load_study(write_study(tmp_path, text)).spec)[0]
    assert (sweep.trials, sweep.steps) == (12, 1000)
    without_max_steps = STUDY.replace("  max_steps: 2000\n", "  max_total_steps: 6000\n")
    sweep = planned_phases(load_study(write_study(tmp_path, without_max_steps)).spec)[0]
    assert (sweep.trials, sweep.steps) == (12, 500)  # the total cap alone sets it
