"""Round lengths fall on the eval grid, so every round scores its trials on steps the others share.

Round 1 at 20% of 950 steps is 190: with ``eval_every`` 50 its trials were last scored at step
190, an eval that round 2 (950 steps: 150, 200, ...) never makes, and round 1's top points could
look tied there. A length derived from ``length_fraction`` moves to the nearest multiple of
``eval_every``; one the user gives in ``steps`` is kept, and ``tuner validate`` says it is off the
grid; the production length (``max_train_steps``) is never moved.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.orchestrate_tests.conftest import run_tuner, toy_study
from tuner.playbook import start_round
from tuner.spec import load_study


def _study(folder: Path, round1: dict[str, Any], **training: Any) -> Path:
    path = toy_study(folder, round1={"trials": 2, **round1}, **training)
    document = yaml.safe_load(path.read_text())
    if "steps" not in round1:
        del document["rounds"]["round1"]["steps"]  # the toy study sets it; these tests derive it
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    return path


@pytest.mark.parametrize(
    ("max_train_steps", "fraction", "expected"),
    [
        (950, 0.2, 200),  # 190 -> 200: the nearer multiple of 50
        (950, 0.17, 150),  # 162 -> 150
        (1000, 0.2, 200),  # already on the grid
        (950, 0.99, 950),  # 941 -> 950, the full length itself
    ],
)
def test_a_fraction_of_the_length_is_moved_to_the_nearest_eval(
    tmp_path: Path, max_train_steps: int, fraction: float, expected: int
) -> None:
    path = _study(tmp_path, {"length_fraction": fraction}, max_train_steps=max_train_steps, eval_every=50)
    plan = start_round(load_study(path), "round-1", tmp_path / "runs").plan
    assert plan.trial_steps == expected
    shown = run_tuner("validate", str(path), "--no-build")
    assert shown.returncode == 0, shown.stderr
    assert f"round 1: 2 trials of {expected} steps" in shown.stdout
    assert "off the eval grid" not in shown.stdout


def test_steps_given_off_the_grid_are_kept_and_validate_says_so(tmp_path: Path) -> None:
    path = _study(tmp_path, {"steps": 190}, max_train_steps=950, eval_every=50)
    assert start_round(load_study(path), "round-1", tmp_path / "runs").plan.trial_steps == 190
    shown = run_tuner("validate", str(path), "--no-build")
    assert shown.returncode == 0, shown.stderr
    assert (
        "note: rounds.round1.steps 190 is off the eval grid (eval_every 50): its trials are last scored "
        "at step 190, an eval no full-length run makes, so their ranking may not carry over; 200 steps "
        "would be on it"
    ) in shown.stdout
    on_grid = run_tuner(
        "validate",
        str(_study(tmp_path / "on", {"steps": 200}, max_train_steps=950, eval_every=50)),
        "--no-build",
    )
    assert "off the eval grid" not in on_grid.stdout


def test_the_full_length_is_never_moved_and_growing_rounds_land_on_the_grid(tmp_path: Path) -> None:
    path = _study(tmp_path, {"length_fraction": 0.1}, max_train_steps=955, eval_every=50)
    document = yaml.safe_load(path.read_text())
    document["rounds"]["round2"] = {"top_k": 1}
    document["rounds"]["round3"] = {"top_k": 1}
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    shown = run_tuner("validate", str(path), "--no-build")
    assert shown.returncode == 0, shown.stderr
    # round 1: 96 -> 100; round 2 grows geometrically towards 955 (309) and lands on 300; round 3
    # is the production length, 955, as the file says
    assert "round 1: 2 trials of 100 steps" in shown.stdout
    assert "= 1 trial of 300 steps" in shown.stdout
    assert "= 1 trial of 955 steps" in shown.stdout


def test_a_round_shorter_than_one_eval_stays_short_and_validate_says_so(tmp_path: Path) -> None:
    # half of 10 steps is 5; the next eval, at 10, is the full length: round 1 must stay shorter
    path = _study(tmp_path, {"length_fraction": 0.5}, max_train_steps=10, eval_every=10)
    assert start_round(load_study(path), "round-1", tmp_path / "runs").plan.trial_steps == 5
    shown = run_tuner("validate", str(path), "--no-build")
    assert shown.returncode == 0, shown.stderr
    assert (
        "note: round 1's length (5 steps) is off the eval grid (eval_every 10): its trials are last "
        "scored at step 5, an eval no full-length run makes, so their ranking may not carry over; lower "
        "training.eval_every to a divisor of 5"
    ) in shown.stdout
