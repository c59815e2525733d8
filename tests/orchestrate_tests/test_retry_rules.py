"""Budget rules the README states, each held by a real phase: retries of a deterministic error,
and ``max_parallel`` across workers."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

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


def _failed(number: int, slot: int, attempt: int, code: str, **attrs: object) -> Any:
    from optuna.trial import TrialState, create_trial

    trial = create_trial(
        state=TrialState.FAIL,
        user_attrs={"slot": slot, "attempt": attempt, "workload_code": code, "failure_reason": "crashed",
                    "retried": False, **attrs},
    )  # fmt: skip
    trial.number = number
    return trial


def test_machines_whose_workload_files_differ_run_a_failed_slot_once_in_each_code_not_for_ever() -> None:
    """Machine A (code a) failed slot 0; machine B (code b) sees a's code as changed and runs it
    again, which fails too. A then sees b's failure as of other code, but slot 0 already ran in
    a: it stands, for A and for B. A fix (code c) runs it once more."""
    from tuner.orchestrate.failures import missing_retries

    first = _failed(0, 0, 0, "a")
    assert [t.number for t in missing_retries([first], "b")] == [0]  # B runs it again
    second = _failed(1, 0, 1, "b", retry_of=0, code_changed=True)
    trials = [first, second]
    assert missing_retries(trials, "a") == [] and missing_retries(trials, "b") == []
    assert [t.number for t in missing_retries(trials, "c")] == [1]  # the fix: one more run


def test_a_slot_run_again_for_changed_code_starts_over_and_a_retry_resumes(tmp_path: Path) -> None:
    """The failed attempt's checkpoint holds the weights the old code trained: a run of changed
    code starts in a folder of its own; a plain retry (same code) resumes in its predecessor's."""
    import optuna

    from tuner.orchestrate.failures import enqueue_missing_retries

    storage = optuna.storages.InMemoryStorage()
    study = optuna.create_study(storage=storage)
    old_code = _failed(0, 0, 0, "a", run_dir=str(tmp_path / "trial-0000"))
    crashed = _failed(1, 1, 0, "b", run_dir=str(tmp_path / "trial-0001"), retried=True)
    for trial in (old_code, crashed):
        study.add_trial(trial)
    enqueue_missing_retries(storage, study, code="b")
    waiting = {t.user_attrs["slot"]: t.user_attrs for t in study.get_trials() if t.state.name == "WAITING"}
    assert waiting[0]["code_changed"] and "resume_dir" not in waiting[0]
    assert waiting[1]["resume_dir"] == str(tmp_path / "trial-0001")
