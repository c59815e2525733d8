"""Every way a trial can die is recorded with its reason, and never takes its worker down."""

from __future__ import annotations

import json
import math
import time
from pathlib import Path
from typing import Any

from tests.orchestrate_tests.conftest import load_phase, run_tuner, sqlite_url, toy_study


def _trial_timeout_for_this_machine(folder: Path) -> int:
    """4x the time a healthy toy trial takes on this machine at this moment (at least 6 s).

    Measured as a whole ``tuner train`` of the same study: its interpreter start-up and imports
    make it longer than a trial forked from a worker, so the healthy trials of the round finish
    within the limit however loaded the machine is, while the hanging one still times out.
    """
    study = toy_study(folder)
    started = time.monotonic()
    done = run_tuner("train", str(study), "--output-dir", str(folder / "runs"), "--no-progress")
    assert done.returncode == 0, done.stdout + done.stderr
    return max(6, math.ceil(4 * (time.monotonic() - started)))


#: what the toy workload does -> the reason recorded, and a line of the error
DEATHS = {
    "segfault": ("crashed", "died of signal SIGSEGV"),
    "oom": ("oom", "MemoryError: toy workload out of memory"),
    "alloc": ("oom", "can't allocate memory"),  # a real failed allocation, not a MemoryError
    "raise_at_step": ("crashed", "RuntimeError: toy workload fails at step 5"),
}


def _round_of(tmp_path: Path, output_dir: Path, choices: list[str], trials: int, *extra: str) -> Any:
    """A round 1 whose ``workload.fail`` is searched over ``choices`` ("" trains healthily)."""
    space = {"workload.fail": {"type": "categorical", "choices": choices}}
    study = toy_study(tmp_path, options={"fail": "", "fail_at_step": 5}, search_space=space)
    done = run_tuner(
        "run-round", str(study), "--round", "1", "--workers", "1", "--trials", str(trials),
        "--max-failed", str(trials), "--max-retries", "0", "--output-dir", str(output_dir), *extra,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    return done


def _assert_died_of(trial: Any, reason: str, error: str) -> None:
    assert trial.state.name == "FAIL"
    assert trial.user_attrs["failure_reason"] == reason
    assert error in trial.user_attrs["error"]
    # the run folder says what happened, even when its process was killed (timeout)
    status = json.loads((Path(trial.user_attrs["run_dir"]) / "status.json").read_text())
    assert status["status"] in ("failed", "timeout")
    if reason == "timeout":
        assert status["status"] == "timeout"
    assert error.split(":")[0] in (Path(trial.user_attrs["run_dir"]) / "error.log").read_text()


def test_every_way_a_trial_dies_is_recorded_with_its_reason_and_the_next_trial_still_runs(
    tmp_path: Path, output_dir: Path
) -> None:
    # one worker, 6 quasi-random points of seed 0: segfault, alloc, oom, "", oom, raise_at_step;
    # the healthy trial runs after three deaths in the same worker
    done = _round_of(tmp_path, output_dir, [*DEATHS, ""], 6)
    trials = load_phase(sqlite_url(output_dir), "toy").trials
    by_fail: dict[str, list[Any]] = {}
    for trial in trials:
        by_fail.setdefault(trial.params["workload.fail"], []).append(trial)
    assert set(by_fail) == {*DEATHS, ""} and len(trials) == 6  # every way, and a healthy one
    assert all(t.state.name == "COMPLETE" for t in by_fail[""])  # the worker survived every death
    for fail, (reason, error) in DEATHS.items():
        for trial in by_fail[fail]:
            _assert_died_of(trial, reason, error)
    crashed = len(by_fail["segfault"]) + len(by_fail["raise_at_step"])
    oom = len(by_fail["oom"]) + len(by_fail["alloc"])
    assert f"{crashed} crashed, {oom} oom" in done.stdout


def test_a_hanging_trial_times_out_and_the_next_trial_still_runs(tmp_path: Path, output_dir: Path) -> None:
    # the limit applies to the healthy trials too: a multiple of what one takes here, now
    limit = _trial_timeout_for_this_machine(tmp_path / "measure")
    done = _round_of(tmp_path, output_dir, ["hang", ""], 4, "--trial-timeout", str(limit))
    trials = load_phase(sqlite_url(output_dir), "toy").trials
    failed = [t for t in trials if t.params["workload.fail"] == "hang"]
    healthy = [t for t in trials if t.params["workload.fail"] == ""]
    assert failed and healthy and len(trials) == 4
    assert all(t.state.name == "COMPLETE" for t in healthy)
    for trial in failed:
        _assert_died_of(trial, "timeout", f"no result within the {limit} s trial timeout")
    assert f"{len(failed)} timeout" in done.stdout
