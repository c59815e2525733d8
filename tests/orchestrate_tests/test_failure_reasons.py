"""Every way a trial can die is recorded with its reason, and never takes its worker down."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.orchestrate_tests.conftest import load_phase, run_tuner, sqlite_url, toy_study


@pytest.mark.parametrize(
    ("fail", "reason", "error", "extra"),
    [
        ("segfault", "crashed", "died of signal SIGSEGV", ()),
        ("oom", "oom", "MemoryError: toy workload out of memory", ()),
        ("alloc", "oom", "can't allocate memory", ()),  # a real failed allocation, not a MemoryError
        ("raise_at_step", "crashed", "RuntimeError: toy workload fails at step 5", ()),
        # the limit applies to the healthy trials too: ~20x what one takes on a quiet machine (6 s
        # timed healthy trials out at a load of 6 on 2 cores)
        ("hang", "timeout", "no result within the 25 s trial timeout", ("--trial-timeout", "25")),
    ],
)
def test_a_dying_trial_is_recorded_with_its_reason_and_the_next_trial_still_runs(
    tmp_path: Path, output_dir: Path, fail: str, reason: str, error: str, extra: tuple[str, ...]
) -> None:
    space = {"workload.fail": {"type": "categorical", "choices": [fail, ""]}}
    study = toy_study(tmp_path, options={"fail": "", "fail_at_step": 5}, search_space=space)
    done = run_tuner(
        "run-round", str(study), "--round", "1", "--workers", "1", "--trials", "4", "--max-failed", "4",
        "--max-retries", "0", "--output-dir", str(output_dir), *extra,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    trials = load_phase(sqlite_url(output_dir), "toy").trials
    failed = [t for t in trials if t.params["workload.fail"] == fail]
    healthy = [t for t in trials if t.params["workload.fail"] == ""]
    assert failed and healthy and len(trials) == 4
    assert all(t.state.name == "COMPLETE" for t in healthy)  # the worker survived every death
    for trial in failed:
        assert trial.state.name == "FAIL"
        assert trial.user_attrs["failure_reason"] == reason
        assert error in trial.user_attrs["error"]
        # the run folder says what happened, even when its process was killed (timeout)
        status = json.loads((Path(trial.user_attrs["run_dir"]) / "status.json").read_text())
        assert status["status"] in ("failed", "timeout") and status["status"] != "running"
        if reason == "timeout":
            assert status["status"] == "timeout"
        assert error.split(":")[0] in (Path(trial.user_attrs["run_dir"]) / "error.log").read_text()
    assert f"{len(failed)} {reason}" in done.stdout
