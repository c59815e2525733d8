"""Chaos on one machine: trial processes killed at random, the whole command killed and re-run,
a worker frozen (SIGSTOP) past the heartbeat grace. Small on purpose: a toy workload, few steps.
"""

from __future__ import annotations

import fcntl
import os
import random
import signal
import sqlite3
import time
from pathlib import Path
from typing import Any

from tests._processes import PATIENCE_S, finish, wait_for
from tests._warm_processes import WarmTuner, spawn_warm_tuner
from tests.orchestrate_tests.conftest import (
    load_phase,
    run_tuner,
    sqlite_url,
    start_tuner,
    toy_study,
    tuner_env,
)
from tests.orchestrate_tests.test_preemption import (
    _processes_running,
    _progress,
    _trials,
    _worker_status,
    measured_grace,
)
from tuner.orchestrate import count_trials
from tuner.orchestrate.budget import counted
from tuner.playbook import start_round
from tuner.spec import load_study

SLOW = {"step_sleep_s": 0.03}  # 60 steps ~ 2 s per trial
QUICK_GRACE = {"TUNER_HEARTBEAT_GRACE_S": "4"}  # a frozen worker's trial is declared dead in 4 s
#: for a worker that never needs to declare another's trial dead: a busy machine's late beats
#: must not make it declare a live one dead
NO_TAKEOVER = {"TUNER_HEARTBEAT_GRACE_S": "120"}


def _children(pid: int) -> list[int]:
    """Live (not zombie) child processes of ``pid``."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid and fields[0] != "Z":
            found.append(int(entry.name))
    return found


def _trials_table(trials: list[Any]) -> str:
    """One line a trial, to read a failure by: its slot, attempt, state and why it ended."""
    keys = ("slot", "attempt", "worker", "failure_reason", "retried", "duplicate_of", "retry_of")
    return "\n".join(
        f"#{t.number} {t.state.name} " + " ".join(f"{k}={t.user_attrs.get(k)}" for k in keys) for t in trials
    )


def _assert_each_slot_done_once(trials: list[Any], slots: int) -> None:
    assert len({t.number for t in trials}) == len(trials)
    assert not [t for t in trials if t.state.name in ("RUNNING", "WAITING")], _trials_table(trials)
    done = sorted(t.user_attrs["slot"] for t in counted(trials) if t.state.name == "COMPLETE")
    assert done == list(range(slots)), [(t.number, t.state.name, t.user_attrs) for t in trials]
    counts = count_trials(trials)
    assert (counts.slots, counts.completed, counts.failed) == (slots, slots, 0)


def _assert_retries_resumed_from_the_last_checkpoint(trials: list[Any], checkpoint_every: int = 10) -> int:
    """Every retry started from its predecessor's last checkpoint; returns how many resumed.

    The step recorded as ``last_checkpoint_step`` is read from ``checkpoints/index.json``, which is
    written just after ``latest.pt`` is renamed into place (what a resume loads): a kill between
    the two leaves ``latest.pt`` one checkpoint newer than the record (seen in CI: recorded 40,
    resumed from 50). So a retry resumes from the recorded step or the checkpoint after it, never
    from an older one (a resume from a best checkpoint, or from scratch, would be) nor a later one."""
    resumed = 0
    for retry in (t for t in trials if "retry_of" in t.user_attrs):
        before = trials[retry.user_attrs["retry_of"]]
        assert before.user_attrs["retried"]
        assert retry.user_attrs["run_dir"] == before.user_attrs["run_dir"]
        expected = before.user_attrs.get("last_checkpoint_step") or 0
        started = retry.user_attrs.get("resumed_from_step", 0)
        assert started in (expected, expected + checkpoint_every), (before.number, retry.number, started)
        resumed += started > 0
    return resumed


def test_ten_trial_processes_killed_at_random_every_slot_completes_from_its_checkpoint(
    tmp_path: Path, output_dir: Path
) -> None:
    rng = random.Random(9)
    study = toy_study(tmp_path, options=SLOW, round1={"trials": 6, "steps": 60, "max_retries": 10})
    start_round(load_study(study), "round-1", output_dir)
    # the workers survive and record every kill themselves: no takeover, so exactly 10 "killed"
    phase = ("worker", str(study), "--phase", "round-1", "--output-dir", str(output_dir))
    env = tuner_env(**NO_TAKEOVER)
    workers = {label: spawn_warm_tuner(*phase, "--label", label, env=env) for label in ("w0", "w1")}
    kills = 0
    while kills < 10:

        def victim() -> tuple[str, int, int] | None:
            """A worker mid-trial (past a checkpoint, far from its end) and its trial process."""
            label = rng.choice(sorted(workers))
            status = _worker_status(output_dir, label)
            children = _children(workers[label].pid)
            if status.get("state") == "training" and 10 <= status.get("step", 0) <= 40 and children:
                return label, status["trial"], children[0]
            return None

        label, trial, pid = wait_for(victim, what="a trial process mid-run")
        time.sleep(rng.uniform(0.02, 0.15))  # a random moment between two checkpoints
        if _worker_status(output_dir, label).get("trial") != trial or pid not in _children(
            workers[label].pid
        ):
            continue  # it finished meanwhile: only a running trial is a victim
        os.kill(pid, signal.SIGKILL)
        kills += 1
        parent = workers[label].pid
        wait_for(lambda pid=pid, parent=parent: pid not in _children(parent), 120, "the trial process to die")
    url = sqlite_url(output_dir)
    for label, process in workers.items():
        output, _ = finish(process, lambda: _progress(url), what=f"worker {label}")
        assert process.returncode == 0, f"{label}: {output}"
        assert "Traceback" not in output
    trials = load_phase(sqlite_url(output_dir), "toy").trials
    _assert_each_slot_done_once(trials, 6)
    killed = [t for t in trials if t.user_attrs.get("failure_reason") == "killed"]
    assert len(killed) == 10
    assert _assert_retries_resumed_from_the_last_checkpoint(trials) >= 8


def test_the_command_killed_three_times_then_rerun_counts_every_slot_once(
    tmp_path: Path, output_dir: Path
) -> None:
    rng = random.Random(3)
    study = toy_study(tmp_path, options=SLOW, round1={"trials": 6, "steps": 60, "max_retries": 5})
    args = ("run-round", str(study), "--round", "1", "--workers", "2", "--output-dir", str(output_dir))
    url = sqlite_url(output_dir)
    grace = QUICK_GRACE
    for attempt in range(3):
        command = start_tuner(*args, "--no-progress", start_new_session=True)
        # a running trial; or the earlier attempts finished the phase (the test process, slow on
        # a loaded machine, killed late while the workers trained on), and this command, with
        # nothing left to run, starts no worker and ends at once
        wait_for(
            lambda command=command: (
                command.poll() is not None or any(t.state.name == "RUNNING" for t in _trials(url))
            ),
            what="a running trial",
        )
        if command.poll() is not None:
            output = command.communicate()[0]
            assert attempt > 0 and command.returncode == 0, output
            assert "nothing left to run (no worker started)" in output
            break
        if attempt == 0:  # the rerun's grace: a multiple of the beat as late as this machine makes it
            grace = measured_grace(url, sample_s=rng.uniform(1.0, 2.0))
        else:
            time.sleep(rng.uniform(0.2, 2.0))
        os.killpg(command.pid, signal.SIGKILL)  # the command's process group, as a terminal would
        command.wait()
        # its workers (own sessions) stop when it dies, and their trials with them
        wait_for(lambda: not _processes_running(str(study)), 120, "the workers and trials to exit")
    again = run_tuner(*args, "--no-progress", env=tuner_env(**grace))
    assert again.returncode == 0, again.stdout + again.stderr
    trials = load_phase(url, "toy").trials
    _assert_each_slot_done_once(trials, 6)


def _freeze_outside_any_write(group: int, database: Path) -> None:
    """SIGSTOP the process ``group`` (a worker and its trial) at a moment it holds no SQLite lock.

    On SQLite a process frozen inside a write transaction (a heartbeat, an eval's value) or
    inside the phase's file lock blocks every other writer for as long as it sleeps: no lock can
    be taken from a stopped process. That is SQLite's limit (where machines may freeze, the
    storage is PostgreSQL, whose frozen sessions are ended: ``test_chaos_postgres``), not what
    this test is about, and on a busy machine, where each write takes longer, the freeze landed
    in one often enough to fail the test. So: freeze, check both locks are free, else thaw and
    try again.
    """
    for _ in range(100):
        os.killpg(group, signal.SIGSTOP)
        if _sqlite_writable(database) and all(
            _flock_free(p) for p in database.parent.glob(".study.db.*.lock")
        ):
            return
        os.killpg(group, signal.SIGCONT)
        time.sleep(0.05)
    raise AssertionError("the worker held a SQLite lock at each of 100 tries to freeze it")


def _sqlite_writable(database: Path) -> bool:
    connection = sqlite3.connect(database, timeout=0.5)
    try:
        connection.execute("BEGIN IMMEDIATE")
        connection.rollback()
        return True
    except sqlite3.OperationalError:
        return False
    finally:
        connection.close()


def _flock_free(path: Path) -> bool:
    with path.open("a+") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        fcntl.flock(handle, fcntl.LOCK_UN)
        return True


def test_a_frozen_worker_loses_its_trial_and_gives_it_up_untouched_when_it_thaws(
    tmp_path: Path, output_dir: Path
) -> None:
    study = toy_study(tmp_path, options={"step_sleep_s": 0.05}, round1={"trials": 3, "steps": 60})
    start_round(load_study(study), "round-1", output_dir)
    url = sqlite_url(output_dir)

    def worker(label: str, grace: dict[str, str]) -> WarmTuner:
        return spawn_warm_tuner(
            "worker", str(study), "--phase", "round-1", "--output-dir", str(output_dir), "--label", label,
            env=tuner_env(**grace),
        )  # fmt: skip

    # thawed, it must not declare the other worker's trial dead because its beats came late
    frozen = worker("frozen", NO_TAKEOVER)

    def checkpointed() -> int | None:
        status = _worker_status(output_dir, "frozen")
        if status.get("state") == "training" and status.get("step", 0) >= 20:
            return int(status["trial"])
        return None

    number = wait_for(checkpointed, what="a trial of the frozen worker with a checkpoint")
    _freeze_outside_any_write(frozen.pid, output_dir / "toy" / "study.db")  # a machine that froze
    try:
        other = worker("other", QUICK_GRACE)  # nobody else beats while the frozen worker sleeps
        taken_over = wait_for(
            lambda: [
                t
                for t in _trials(url)
                if t.user_attrs.get("retry_of") == number and t.state.name != "WAITING"
            ],
            PATIENCE_S,
            "the frozen trial's retry to start elsewhere",
        )
        assert _trials(url)[number].user_attrs["failure_reason"] == "killed"
    finally:
        os.killpg(frozen.pid, signal.SIGCONT)
    for process in (frozen, other):
        output, _ = finish(process, lambda: _progress(url), what="a worker")
        assert process.returncode == 0, output
        assert "Traceback" not in output
    trials = load_phase(url, "toy").trials
    _assert_each_slot_done_once(trials, 3)
    before, retry = trials[number], taken_over[0]
    retry = trials[retry.number]
    # the thawed worker recorded nothing more for the trial it lost
    assert before.state.name == "FAIL" and "worker_rss_mb" not in before.user_attrs
    assert retry.user_attrs["worker"] == "other"
    if retry.user_attrs["run_dir"] == before.user_attrs["run_dir"]:  # it waited for the folder
        assert retry.user_attrs["resumed_from_step"] >= before.user_attrs["last_checkpoint_step"] > 0
    else:  # the frozen process held it too long: started over in a folder of its own
        assert Path(retry.user_attrs["run_dir"]).name == f"trial-{before.user_attrs['slot']:04d}.1"
