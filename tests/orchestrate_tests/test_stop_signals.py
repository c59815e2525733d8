"""One Ctrl-C or SIGTERM ends ``run-round`` within seconds, even while a trial hangs in workload
code (where it never reaches the step at which it would obey); the trial is left resumable."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.orchestrate_tests.conftest import load_phase, run_tuner, sqlite_url, start_tuner, toy_study

STARTED_WAIT_S = 180.0  # progress, not a duration: a loaded machine may take long to get there
EXIT_WAIT_S = 90.0  # a generous bound; the stop itself takes about 10 s (STOP_RESPONSE_S)


def _wait_for(found: object, process: subprocess.Popen[str], timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while not found():  # type: ignore[operator]
        assert process.poll() is None, process.communicate()[0]
        assert time.monotonic() < deadline, "the trial never started hanging"
        time.sleep(0.2)


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_one_signal_ends_run_round_while_a_trial_hangs_and_a_rerun_continues(
    tmp_path: Path, output_dir: Path, signum: int
) -> None:
    markers = tmp_path / "markers"
    markers.mkdir()
    study = toy_study(tmp_path, options={"fail": "hang_once", "fail_at_step": 3, "marker_dir": str(markers)})
    args = (
        "run-round", str(study), "--round", "1", "--workers", "1", "--trials", "2",
        "--max-retries", "0", "--output-dir", str(output_dir),
    )  # fmt: skip
    process = start_tuner(*args, start_new_session=True)
    try:
        _wait_for(lambda: any(markers.glob("hung-*")), process, STARTED_WAIT_S)  # hung in the workload
        process.send_signal(signum)  # once
        output, _ = process.communicate(timeout=EXIT_WAIT_S)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    assert process.returncode == 130, output
    assert "interrupted" in output
    hung = load_phase(sqlite_url(output_dir), "toy").trials[0]
    assert hung.state.name == "FAIL"
    assert hung.user_attrs["failure_reason"] == "interrupted"  # not a failure: no retry spent
    # with --max-retries 0 a counted failure would lose the slot: the re-run completes both
    again = run_tuner(*args)
    assert again.returncode == 0, again.stdout + again.stderr
    trials = load_phase(sqlite_url(output_dir), "toy").trials
    completed = {t.user_attrs["slot"] for t in trials if t.state.name == "COMPLETE"}
    assert completed == {0, 1}
