"""Processes die; trials do not get lost: kill -9 of workers and of the whole command, Ctrl-C."""

from __future__ import annotations

import contextlib
import json
import math
import os
import signal
import sqlite3
import subprocess
import time
from pathlib import Path
from typing import Any

from tests._processes import finish, wait_for
from tests._warm_processes import WarmTuner, spawn_warm_tuner
from tests.orchestrate_tests.conftest import (
    load_phase,
    run_tuner,
    sqlite_url,
    start_tuner,
    toy_study,
    tuner_env,
)
from tuner.orchestrate.pool import DIE_WITH_PARENT_ENV
from tuner.playbook import start_round
from tuner.spec import load_study

SLOW = {"step_sleep_s": 0.03}  # 60 steps ~ 2 s per trial: long enough to be caught mid-run
QUICK_GRACE = {"TUNER_HEARTBEAT_GRACE_S": "6"}  # a dead worker's trial is retried after 6 s, not 12
GRACE_BEATS = 4  # a measured grace: this many of the longest beat seen (see measured_grace)


def measured_grace(url: str, sample_s: float = 4.0, floor_s: int = 4) -> dict[str, str]:
    """``TUNER_HEARTBEAT_GRACE_S`` for workers started now: ``GRACE_BEATS`` x the longest interval
    seen between two heartbeats of a running trial over ``sample_s`` (the 1 s beat, as late as
    this machine's load makes it at the moment), at least ``floor_s``.

    A fixed grace of a few beats declares live trials dead on a busy machine, whose heartbeat
    threads and SQLite writes wait for a core; one measured on the spot holds there and stays
    short (fast takeovers) on a quiet one.
    """
    path = url.split("sqlite:///", 1)[1]
    seen: dict[int, tuple[str, float]] = {}  # trial id -> (its last beat, when we saw it change)
    longest, end = 1.0, time.monotonic() + sample_s
    while time.monotonic() < end:
        with contextlib.closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=60)) as db:
            rows = db.execute("SELECT trial_id, heartbeat FROM trial_heartbeats").fetchall()
        now = time.monotonic()
        for trial_id, beat in rows:
            if trial_id in seen and seen[trial_id][0] != beat:
                longest = max(longest, now - seen[trial_id][1])
            if seen.get(trial_id, ("",))[0] != beat:
                seen[trial_id] = (beat, now)
        time.sleep(0.1)
    return {"TUNER_HEARTBEAT_GRACE_S": str(max(floor_s, math.ceil(GRACE_BEATS * longest)))}


def _trials(url: str) -> list[Any]:
    """The phase's trials, or none while the command is still creating it."""
    if not Path(url.split("sqlite:///", 1)[1]).exists():
        return []  # opening it here would create it, racing the command
    try:
        return load_phase(url, "toy").trials
    except KeyError:  # the file exists, the phase not yet
        return []


def _progress(url: str) -> tuple[tuple[int, str], ...]:
    """Each trial's state: what changes while a phase gets on (``finish`` waits while it does)."""
    return tuple((t.number, t.state.name) for t in _trials(url))


def _worker_status(output_dir: Path, label: str, study: str = "toy") -> dict[str, Any]:
    try:
        return json.loads((output_dir / study / "round-1" / ".workers" / f"{label}.json").read_text())
    except (OSError, ValueError):
        return {}


def _processes_running(fragment: str) -> list[int]:
    """PIDs whose command line mentions ``fragment`` (orphans of a killed command would)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            state = (entry / "stat").read_text().split()[2]
        except OSError:
            continue
        if fragment in cmdline and state != "Z":
            found.append(int(entry.name))
    return found


def _assert_budget_met(trials: list[Any], slots: int) -> None:
    states = [t.state.name for t in trials]
    assert "RUNNING" not in states and "WAITING" not in states
    assert len({t.number for t in trials}) == len(trials)
    done = {t.user_attrs["slot"] for t in trials if t.state.name == "COMPLETE"}
    assert done == set(range(slots))


def _assert_retries_resumed(trials: list[Any]) -> list[int]:
    """Each retry started from its predecessor's last checkpoint; returns those steps."""
    steps = []
    for retry in (t for t in trials if "retry_of" in t.user_attrs and "resumed_from_step" in t.user_attrs):
        before = trials[retry.user_attrs["retry_of"]]
        assert before.user_attrs["retried"]
        assert retry.user_attrs["run_dir"] == before.user_attrs["run_dir"]
        # the recorded step is read from checkpoints/index.json, which lags latest.pt by a rename:
        # a trial stopped between the two resumes from a later step than its record says
        assert retry.user_attrs["resumed_from_step"] >= (before.user_attrs.get("last_checkpoint_step") or 0)
        steps.append(retry.user_attrs["resumed_from_step"])
    return steps


def test_kill_9_of_busy_workers_loses_no_trial_and_no_checkpointed_step(
    tmp_path: Path, output_dir: Path
) -> None:
    study = toy_study(tmp_path, options=SLOW, round1={"trials": 8, "steps": 60, "max_retries": 6})
    start_round(load_study(study), "round-1", output_dir)
    workers: dict[str, WarmTuner] = {}
    url = sqlite_url(output_dir)

    def start(label: str, env: dict[str, str]) -> None:
        workers[label] = spawn_warm_tuner(
            "worker", str(study), "--phase", "round-1", "--output-dir", str(output_dir), "--label", label,
            env=env,
        )  # fmt: skip

    start("w0", tuner_env())
    start("w1", tuner_env())
    wait_for(lambda: any(t.state.name == "RUNNING" for t in _trials(url)), what="a running trial")
    grace = tuner_env(**measured_grace(url))  # the replacements take over the killed workers' trials
    for kill in range(3):
        # a worker mid-trial, between two checkpoints (its trial has passed an eval)
        def busy() -> str | None:
            for label, process in workers.items():
                status = _worker_status(output_dir, label)
                if (  # past a checkpoint, far from the end (a trial that just finished is no victim)
                    process.poll() is None
                    and status.get("state") == "training"
                    and 10 <= status.get("step", 0) <= 40
                ):
                    return label
            return None

        victim = wait_for(busy, what="a busy worker")
        time.sleep(0.12)
        workers[victim].kill()
        workers[victim].wait()
        start(f"w{kill + 2}", grace)
    for label, process in workers.items():
        if process.returncode is None:
            output, _ = finish(process, lambda: _progress(url), what=f"worker {label}")
            assert process.returncode == 0, f"{label}: {output}"
            assert "Traceback" not in output
    trials = load_phase(sqlite_url(output_dir), "toy").trials
    _assert_budget_met(trials, 8)
    killed = [t for t in trials if t.user_attrs.get("failure_reason") == "killed"]
    assert len(killed) >= 3
    resumed = _assert_retries_resumed(trials)
    assert len(resumed) == len(killed) and sum(step > 0 for step in resumed) >= 2


def test_kill_9_of_the_command_leaves_no_orphan_and_a_rerun_finishes(
    tmp_path: Path, output_dir: Path
) -> None:
    # 60 steps of 0.06 s: a trial seen with a checkpoint at step 10..30 still has >= 1.8 s to run
    # when the command is killed, so it cannot finish before its worker stops it (CI once saw a
    # trial caught at step 50 of 0.03 s steps complete first, and no retry had a step to resume)
    study = toy_study(tmp_path, options={"step_sleep_s": 0.06}, round1={"trials": 6, "steps": 60})
    args = ("run-round", str(study), "--round", "1", "--workers", "2", "--output-dir", str(output_dir))
    command = start_tuner(*args)
    url = sqlite_url(output_dir)

    def finished_and_running_with_checkpoint() -> bool:
        # a running trial past a checkpoint, so that its retry has a step to resume from
        trials = _trials(url)
        return any(t.state.name == "COMPLETE" for t in trials) and any(
            t.state.name == "RUNNING" and 0 < (t.user_attrs.get("last_checkpoint_step") or 0) <= 30
            for t in trials
        )

    wait_for(finished_and_running_with_checkpoint, what="a finished trial, a checkpointed one")
    command.kill()  # the command only: its workers and their trials must go with it
    command.wait()
    wait_for(lambda: not _processes_running(str(study)), 120, "the workers and trials to exit")

    again = run_tuner(*args)
    assert again.returncode == 0, again.stdout + again.stderr
    trials = load_phase(url, "toy").trials
    _assert_budget_met(trials, 6)
    assert [t.user_attrs["failure_reason"] for t in trials if t.state.name == "FAIL"]
    assert any(step > 0 for step in _assert_retries_resumed(trials))


def test_kill_9_of_everything_is_healed_by_heartbeats_on_rerun(tmp_path: Path, output_dir: Path) -> None:
    # 60 steps of 0.06 s, and a trial caught with its checkpoint at step 10..30: it has >= 1.8 s
    # left when everything is killed (under the suite and stress-ng on both cores, a trial caught
    # later on 0.03 s steps once finished first, and no retry had a step to resume from)
    study = toy_study(tmp_path, options={"step_sleep_s": 0.06}, round1={"trials": 4, "steps": 60})
    args = ("run-round", str(study), "--round", "1", "--workers", "2", "--output-dir", str(output_dir))
    command = start_tuner(*args, start_new_session=True)
    url = sqlite_url(output_dir)

    def running_with_checkpoint() -> bool:
        return any(
            t.state.name == "RUNNING" and 10 <= (t.user_attrs.get("last_checkpoint_step") or 0) <= 30
            for t in _trials(url)
        )

    wait_for(running_with_checkpoint, what="a running trial with a checkpoint")
    time.sleep(0.12)
    for pid in _processes_running(str(study)):  # command, workers, trials: all at once, no clean-up
        os.kill(pid, signal.SIGKILL)
    command.wait()
    stuck = [t for t in load_phase(url, "toy").trials if t.state.name == "RUNNING"]
    assert stuck  # nobody was left to record them

    again = run_tuner(*args, env=tuner_env(**QUICK_GRACE))
    assert again.returncode == 0, again.stdout + again.stderr
    trials = load_phase(url, "toy").trials
    _assert_budget_met(trials, 4)
    for trial in stuck:
        after = trials[trial.number]
        assert after.state.name == "FAIL" and after.user_attrs["failure_reason"] == "killed"
    assert any(step > 0 for step in _assert_retries_resumed(trials))


def test_ctrl_c_stops_trials_with_a_checkpoint_and_the_rerun_continues(
    tmp_path: Path, output_dir: Path
) -> None:
    # 6 trials on 2 workers: after the first checkpoint 2 rounds of trials are still to come, so
    # the Ctrl-C lands mid-run even when this test's polling is starved on a busy machine (with 3,
    # CI under load saw the round finish first and end 0)
    study = toy_study(tmp_path, options=SLOW, round1={"trials": 6, "steps": 60})
    args = ("run-round", str(study), "--round", "1", "--workers", "2", "--output-dir", str(output_dir))
    command = start_tuner(*args)
    url = sqlite_url(output_dir)
    wait_for(lambda: any(t.user_attrs.get("last_checkpoint_step") for t in _trials(url)), what="a checkpoint")
    command.send_signal(signal.SIGINT)
    output, _ = finish(command, lambda: _progress(url), what="the interrupted run-round")
    assert command.returncode == 130, output
    assert "run the same command again to continue" in output and "Traceback" not in output
    trials = load_phase(url, "toy").trials
    assert not [t for t in trials if t.state.name == "RUNNING"]
    interrupted = [t for t in trials if t.user_attrs.get("failure_reason") == "interrupted"]
    assert interrupted and all(t.user_attrs["retried"] for t in interrupted)

    again = run_tuner(*args)
    assert again.returncode == 0, again.stdout + again.stderr
    trials = load_phase(url, "toy").trials
    _assert_budget_met(trials, 6)
    # the trial that had checkpointed goes on from there (a trial claimed just as Ctrl-C came
    # had nothing to keep, and its retry rightly starts at 0)
    assert any(step > 0 for step in _assert_retries_resumed(trials))


def test_a_worker_whose_run_round_is_already_gone_stops_at_once(tmp_path: Path, output_dir: Path) -> None:
    """The parent-death signal covers only deaths after it is armed: a worker whose run-round
    died while it started up must notice (it would otherwise wait for the phase, then serve it)."""
    study = toy_study(tmp_path)
    gone = subprocess.Popen(["true"])
    gone.wait()  # a pid that is not our worker's parent any more
    env = tuner_env(**{DIE_WITH_PARENT_ENV: str(gone.pid)})
    worker = start_tuner(
        "worker", str(study), "--phase", "round-1", "--output-dir", str(output_dir), env=env, cold=True
    )
    output, _ = finish(worker, lambda: 0, what="the orphaned worker")
    assert worker.returncode == 130, output
    assert "Traceback" not in output


def test_a_worker_stopped_while_it_starts_up_exits_as_interrupted(tmp_path: Path, output_dir: Path) -> None:
    """run-round forwards Ctrl-C as SIGTERM, maybe while a worker still imports torch."""
    study = toy_study(tmp_path)
    # as run-round starts it: it waits for the phase (not created here) instead of failing
    env = tuner_env(**{DIE_WITH_PARENT_ENV: str(os.getpid())})  # we are its parent
    worker = start_tuner(
        "worker", str(study), "--phase", "round-1", "--output-dir", str(output_dir), env=env, cold=True
    )
    time.sleep(3)  # importing, or waiting for the phase: either is right (no progress to wait on)
    worker.send_signal(signal.SIGTERM)
    output, _ = finish(worker, lambda: 0, what="the stopped worker")
    assert worker.returncode == 130, output
    assert "interrupted; run the same command again to continue" in output and "Traceback" not in output
