"""Ctrl-C of a 2-process ``tuner train`` at its awkward moments: while the ranks start, and just
after the run completed. Either way the command ends as one process does: 130 and resumable
(``status.json`` "interrupted", never "failed"), or 0 when the run had already completed.

The moments are reached by progress, not by sleeps: a workload whose build waits on a gate file
(both ranks are then inside their start-up), ``status.json`` of the launcher, its "completed".
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.orchestrate_tests.conftest import run_tuner, start_tuner
from tests.train_tests.test_distributed import HERE, ddp_study
from tuner.train import read_status

#: ddp_workload, whose build first says it is building and then waits while the gate file exists
GATED = """

_ddp_build = build


def build(ctx):
    options = dict(ctx.options)
    gate = options.pop("gate")
    open(f"{gate}.building-{os.environ.get('RANK', 0)}", "w").close()
    while os.path.exists(gate):
        time.sleep(0.01)
    return _ddp_build(type(ctx)(options=options, seed=ctx.seed, base_dir=ctx.base_dir))
"""

TIMEOUT_S = 240


def _wait_for(condition: Callable[[], bool], command: subprocess.Popen[str], what: str) -> None:
    deadline = time.monotonic() + TIMEOUT_S
    while not condition():
        if command.poll() is not None:
            pytest.fail(f"tuner train ended before {what}: {command.communicate()[0]}")
        if time.monotonic() > deadline:
            _kill(command)
            pytest.fail(f"no {what} within {TIMEOUT_S} s")
        time.sleep(0.02)


def _kill(command: subprocess.Popen[str]) -> None:
    """The command and its ranks (they run in process groups of their own, and die with it)."""
    if command.poll() is None:
        command.kill()
    command.communicate()


def _interrupt(command: subprocess.Popen[str]) -> tuple[int, str]:
    command.send_signal(signal.SIGINT)  # Ctrl-C, as the terminal sends it to the command
    try:
        output, _ = command.communicate(timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        _kill(command)
        pytest.fail("one Ctrl-C did not end tuner train")
    return command.returncode, output


def _gated_study(folder: Path, gate: Path) -> Path:
    study = ddp_study(folder, {"gate": str(gate)})
    (folder / "ddp_workload.py").write_text((HERE / "ddp_workload.py").read_text() + GATED)
    return study


def _args(study: Path, runs: Path) -> tuple[str, ...]:
    return ("train", str(study), "--output-dir", str(runs), "--no-progress")


@pytest.mark.parametrize("moment", ["ranks-starting", "ranks-building"])
def test_ctrl_c_while_the_ranks_start_is_130_and_resumable(tmp_path: Path, moment: str) -> None:
    gate = tmp_path / "gate"
    gate.touch()
    study = _gated_study(tmp_path / "study", gate)
    runs = tmp_path / "runs"
    run_dir = runs / "ddp" / "train" / "run-001"
    command = start_tuner(*_args(study, runs), start_new_session=True)
    try:
        if moment == "ranks-starting":  # the launcher wrote status.json: the ranks start now
            _wait_for(lambda: read_status(run_dir).get("status") == "running", command, "status.json")
        else:  # both ranks are inside their start-up (the workload's build)
            building = [Path(f"{gate}.building-{rank}") for rank in (0, 1)]
            _wait_for(lambda: all(p.exists() for p in building), command, "both ranks building")
        code, output = _interrupt(command)
    finally:
        _kill(command)
    assert code == 130, output
    assert "Traceback" not in output and "killed by" not in output, output
    assert read_status(run_dir)["status"] == "interrupted", read_status(run_dir)
    gate.unlink()
    again = run_tuner(*_args(study, runs))
    assert again.returncode == 0, again.stdout + again.stderr
    assert f"run folder   {run_dir}" in again.stdout or "run-001" in again.stdout, again.stdout
    assert read_status(run_dir)["status"] == "completed"


def _children(pid: int) -> list[str]:
    try:
        return Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    except OSError:  # it has exited
        return []


@pytest.mark.parametrize("moment", ["rank-0-wrote-completed", "ranks-exited"])
def test_ctrl_c_just_after_completion_leaves_the_run_completed(tmp_path: Path, moment: str) -> None:
    """Nothing is left to stop: the command ends as a completed run (exit 0), never "failed" nor
    "interrupted", whether the Ctrl-C lands while the ranks end or after (the command then only
    says its result; it may be over before the Ctrl-C, which then proves less, never more)."""
    study = ddp_study(tmp_path / "study")
    runs = tmp_path / "runs"
    run_dir = runs / "ddp" / "train" / "run-001"
    command = start_tuner(*_args(study, runs), start_new_session=True)
    try:
        _wait_for(lambda: read_status(run_dir).get("status") == "completed", command, "completion")
        if moment == "ranks-exited":
            deadline = time.monotonic() + TIMEOUT_S
            while _children(command.pid) and command.poll() is None and time.monotonic() < deadline:
                time.sleep(0.001)
        code, output = _interrupt(command)
    finally:
        _kill(command)
    assert code == 0, output
    assert "stopped      completed at step 24/24" in output, output
    assert read_status(run_dir)["status"] == "completed"
    assert os.path.exists(run_dir / "checkpoints" / "latest.pt")
