"""The progress watchdog: a trial hung in workload code is noticed without any trial timeout.

The rule (docs/guide/scale-out.md, "Failures"): no new training step for max(stall_multiple x the trial's own
median step time, stall_min_s) means ``stalled``: the trial is killed and recorded as such. The
study file sets the floor small here; the default (5 minutes) is what a user gets.
"""

from __future__ import annotations

import json
from pathlib import Path

from tests.orchestrate_tests.conftest import load_phase, run_tuner, sqlite_url, toy_study


def test_a_trial_that_stops_stepping_is_killed_as_stalled_without_a_trial_timeout(
    tmp_path: Path, output_dir: Path
) -> None:
    space = {"workload.fail": {"type": "categorical", "choices": ["hang", ""]}}
    study = toy_study(
        tmp_path,
        options={"fail": "", "fail_at_step": 5},
        search_space=space,
        round1={"stall_min_s": 4},  # healthy toy steps take milliseconds: 4 s idle is a hang
    )
    done = run_tuner(
        "run-round", str(study), "--round", "1", "--workers", "1", "--trials", "4", "--max-failed", "4",
        "--max-retries", "0", "--output-dir", str(output_dir), timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    trials = load_phase(sqlite_url(output_dir), "toy").trials
    hung = [t for t in trials if t.params["workload.fail"] == "hang"]
    healthy = [t for t in trials if t.params["workload.fail"] == ""]
    assert hung and healthy and len(trials) == 4
    assert all(t.state.name == "COMPLETE" for t in healthy)
    for trial in hung:
        assert trial.state.name == "FAIL"
        assert trial.user_attrs["failure_reason"] == "stalled"
        assert "no training step for" in trial.user_attrs["error"]
        assert "after step 4" in trial.user_attrs["error"]  # the last step it finished
        run_dir = Path(trial.user_attrs["run_dir"])
        status = json.loads((run_dir / "status.json").read_text())
        assert status["status"] == "failed" and status["failure_reason"] == "stalled"
        # the error log shows where the trial hung: the stacks dumped before it was killed
        assert "toy_workload.py" in (run_dir / "error.log").read_text()
    assert f"{len(hung)} stalled" in done.stdout
