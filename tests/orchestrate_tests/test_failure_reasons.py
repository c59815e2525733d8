"""Every way a trial can die is recorded with its reason, and never takes its worker down."""

from __future__ import annotations

import json
import math
import time
from pathlib import Path

import pytest

from tests.orchestrate_tests.conftest import load_phase, run_tuner, sqlite_url, toy_study

MEASURED = "<measured>"


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


@pytest.mark.parametrize(
    ("fail", "reason", "error", "extra"),
    [
        ("segfault", "crashed", "died of signal SIGSEGV", ()),
        ("oom", "oom", "MemoryError: toy workload out of memory", ()),
        ("alloc", "oom", "can't allocate memory", ()),  # a real failed allocation, not a MemoryError
        ("raise_at_step", "crashed", "RuntimeError: toy workload fails at step 5", ()),
        # the limit applies to the healthy trials too: a multiple of what one takes here, now
        ("hang", "timeout", "no result within the {} s trial timeout", ("--trial-timeout", MEASURED)),
    ],
)
def test_a_dying_trial_is_recorded_with_its_reason_and_the_next_trial_still_runs(
    tmp_path: Path, output_dir: Path, fail: str, reason: str, error: str, extra: tuple[str, ...]
) -> None:
    if MEASURED in extra:
        limit = _trial_timeout_for_this_machine(tmp_path / "measure")
        extra = tuple(str(limit) if arg == MEASURED else arg for arg in extra)
        error = error.format(limit)
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
