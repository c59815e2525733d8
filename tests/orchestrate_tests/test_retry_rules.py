"""Budget rules the README states, each held by a real phase: retries of a deterministic error,
and ``max_parallel`` across workers."""

from __future__ import annotations

import itertools
from pathlib import Path

from tests.orchestrate_tests.conftest import load_phase, run_tuner, sqlite_url, toy_study


def test_the_same_exception_twice_is_not_retried_again_whatever_max_retries(
    tmp_path: Path, output_dir: Path
) -> None:
    # the workload raises the very same RuntimeError at step 5 every time: a third attempt
    # would only repeat it, so max_retries 3 still gives one retry, not three
    study = toy_study(tmp_path, options={"fail": "raise_at_step", "fail_at_step": 5})
    done = run_tuner(
        "run-round", str(study), "--round", "1", "--workers", "1", "--trials", "1", "--max-failed", "1",
        "--max-retries", "3", "--output-dir", str(output_dir),
    )  # fmt: skip
    assert done.returncode == 1, done.stdout + done.stderr  # the failure budget (1) is spent
    trials = load_phase(sqlite_url(output_dir), "toy").trials
    assert [t.state.name for t in trials] == ["FAIL", "FAIL"], [t.user_attrs for t in trials]
    first, retry = trials
    assert first.user_attrs["retried"] is True and retry.user_attrs["retried"] is False
    assert retry.user_attrs["slot"] == first.user_attrs["slot"] == 0
    assert retry.user_attrs["attempt"] == 1
    assert first.user_attrs["error"] == retry.user_attrs["error"]
    assert "RuntimeError: toy workload fails at step 5" in retry.user_attrs["error"]


def test_max_parallel_one_never_runs_two_trials_at_once_with_two_workers(
    tmp_path: Path, output_dir: Path
) -> None:
    study = toy_study(tmp_path, options={"step_sleep_s": 0.02}, round1={"trials": 4, "steps": 20})
    done = run_tuner(
        "run-round", str(study), "--round", "1", "--workers", "2", "--max-parallel", "1",
        "--output-dir", str(output_dir), "--no-progress",
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    trials = sorted(load_phase(sqlite_url(output_dir), "toy").trials, key=lambda t: t.datetime_start)
    assert [t.state.name for t in trials] == ["COMPLETE"] * 4
    for before, after in itertools.pairwise(trials):
        # a trial starts only once the one before it has been recorded complete
        assert after.datetime_start >= before.datetime_complete, (before.number, after.number)
