"""Round 1 trains ``length_fraction`` 0.2 of ``max_train_steps`` by default, also when the study
file sets only its budget (``round1: {trials: 4}``): setting how many trials is not setting how
long they train."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.spec_tests._support import BASE_YAML, invoke, write_study
from tuner.playbook import start_round
from tuner.spec import load_study


@pytest.mark.parametrize(
    ("round1", "steps"),
    [
        ("  round1: {trials: 4}\n", 20),  # the budget alone keeps the default 0.2 of 100 steps
        ("  round1: {trials: 4, length_fraction: 0.5}\n", 50),
        ("  round1: {trials: 4, steps: 30}\n", 30),
        ("  round1: {trials: 4, length_fraction: 1.0}\n", 100),  # full length, when asked for
    ],
)
def test_round_1_length_with_its_budget_set(tmp_path: Path, round1: str, steps: int) -> None:
    path = write_study(tmp_path, BASE_YAML + "rounds:\n" + round1)
    result = invoke("validate", str(path))
    assert result.exit_code == 0, result.output
    assert f"round 1: 4 trials of {steps} steps" in result.output
    plan = start_round(load_study(path), "round-1", tmp_path / "runs").plan
    assert plan.trial_steps == steps
