"""``tuner tune STUDY --budget N``: the whole procedure within one budget (issue 19, section 2).

Real runs on the toy workload with budgets of a few hundred steps: round 1 of 10-step trials,
round 2 at the full 40 steps.
"""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path

import pytest
import yaml

from tests.orchestrate_tests.conftest import run_tuner, sqlite_url, start_tuner, toy_study
from tests.spec_tests._support import invoke, single_error


def tune_study(folder: Path, **round2: int) -> Path:
    path = toy_study(folder, round1={"steps": 10, "trials": 4})
    if round2:
        document = yaml.safe_load(path.read_text())
        document["rounds"]["round2"] = round2
        path.write_text(yaml.safe_dump(document, sort_keys=False))
    return path


def state(output_dir: Path, study: str = "toy") -> dict:
    """The tune state as the storage holds it (stages and decisions)."""
    from tuner.orchestrate import open_storage
    from tuner.playbook.decision_log import load_state

    loaded = load_state(open_storage(sqlite_url(output_dir, study)), study)
    assert loaded is not None
    return loaded.to_json()


def trained_steps(output_dir: Path) -> int:
    """Every run folder's trained steps (its status.json), all phases and studies."""
    return sum(
        int(json.loads(status.read_text()).get("step") or 0)
        for status in output_dir.glob("*/*/trial-*/status.json")
    )


@pytest.mark.parametrize(
    ("budget", "expected"),
    [
        ("0", "--budget 0: must be more than 0 training steps"),
        ("abc", "--budget abc: expected training steps (e.g. 5000) or a duration (e.g. 2h, 30m, 90s)"),
        ("2x", "--budget 2x: expected training steps (e.g. 5000) or a duration (e.g. 2h, 30m, 90s)"),
    ],
)
def test_a_bad_budget_is_one_line_and_exit_2(tmp_path: Path, budget: str, expected: str) -> None:
    path = tune_study(tmp_path)
    result = invoke("tune", str(path), "--budget", budget, "--output-dir", str(tmp_path / "runs"))
    assert single_error(result) == expected
    assert not (tmp_path / "runs").exists()


def test_a_budget_too_small_for_round_2_says_what_it_needs(tmp_path: Path) -> None:
    path = tune_study(tmp_path)
    result = invoke("tune", str(path), "--budget", "30", "--dry-run", "--output-dir", str(tmp_path / "runs"))
    assert "round 2 needs at least 40 (one run of 40 steps); raise --budget" in single_error(result)


def test_dry_run_prints_the_plan_within_the_budget_and_runs_nothing(tmp_path: Path) -> None:
    path = tune_study(tmp_path)
    result = invoke(
        "tune", str(path), "--budget", "400", "--dry-run", "--json", "--output-dir", str(tmp_path / "runs")
    )
    assert result.exit_code == 0, result.output
    plan = json.loads(result.stdout)["plan"]
    phases = {p["phase"]: p for p in plan["phases"]}
    # later rounds at the file's seeds: 3 x 40; round 1 half of the rest (a next search may follow)
    assert phases["toy/round-1"]["trials"] == 14 and phases["toy/round-1"]["steps_per_trial"] == 10
    # if the report suggests nothing, round 2's seeds take the reserve: 2 seeds of 3 points
    assert phases["toy/round-2"]["steps"] == 240
    assert plan["steps"] == 140 + 240 <= 400
    assert not (tmp_path / "runs").exists()


def test_end_to_end_within_a_tiny_budget_delivers_the_model(tmp_path: Path) -> None:
    path = tune_study(tmp_path, top_k=1)
    output_dir = tmp_path / "runs"
    done = run_tuner(
        "tune", str(path), "--budget", "80", "--no-apply-suggestions", "--json",
        "--no-progress", "--workers", "2", "--output-dir", str(output_dir),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    payload = json.loads(done.stdout)
    assert payload["plan"]["steps_ran"] <= 80
    assert trained_steps(output_dir) <= 80
    kinds = [d["kind"] for d in payload["decisions"]]
    assert kinds[:2] == ["budget", "round1_trials"]
    assert "round2_shape" in kinds and kinds[-1] == "delivered"
    model = payload["delivered_model"]
    assert model["delivered"] and model["phase"] == "round-2"
    assert Path(model["checkpoint"]).is_file()
    assert model["reproduce"].startswith("tuner train ")
    assert model["seeds"]["seeds"] >= 1
    assert "delivered    val/error_rate" in done.stderr and "checkpoint" in done.stderr


def test_ctrl_c_then_the_same_command_continues_without_redoing_phases(tmp_path: Path) -> None:
    path = tune_study(tmp_path, top_k=1)
    output_dir = tmp_path / "runs"
    args = ("tune", str(path), "--budget", "80", "--no-apply-suggestions", "--no-progress",
            "--workers", "1", "--output-dir", str(output_dir))  # fmt: skip
    first = start_tuner(*args)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:  # until round 1 is done: the state says so
        if (output_dir / "toy" / "study.db").exists():
            try:
                stages = state(output_dir)["stages"]
            except Exception:  # the storage is being created
                stages = []
            if any(s["phase"] == "round-1" and s["done"] for s in stages):
                break
        time.sleep(0.2)
    first.send_signal(signal.SIGINT)
    first.wait(timeout=120)
    round1 = next(s for s in state(output_dir)["stages"] if s["phase"] == "round-1")
    again = run_tuner(*args)
    assert again.returncode == 0, again.stderr
    assert "toy/round-1: done in an earlier run, not run again" in again.stdout
    assert "delivered    val/error_rate" in again.stdout
    from tests.orchestrate_tests.conftest import load_phase

    trials = load_phase(sqlite_url(output_dir), "toy", "round-1").get_trials(deepcopy=False)
    assert len(trials) == round1["trials"]  # not one trial more: round 1 ran once
    decisions = [d["kind"] for d in state(output_dir)["decisions"]]
    assert decisions.count("round1_trials") == 1  # decided once, not again on the re-run
    assert trained_steps(output_dir) <= 80
