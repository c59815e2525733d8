"""Chaos through Optuna's gRPC storage proxy, on an Optuna journal file, and directly on
PostgreSQL for comparison: trial processes killed mid-run, a worker frozen past the heartbeat
grace. Through the proxy and on a journal no heartbeat table passes: a trial's beat is an
attribute, watched on each worker's own clock (``heartbeat.BeatWatch``), and no lock: retries
enqueued twice are resolved as duplicates.
"""

from __future__ import annotations

import os
import random
import signal
from pathlib import Path
from typing import Any

import pytest

from tests._processes import PATIENCE_S, finish, wait_for
from tests._warm_processes import WarmTuner, spawn_warm_tuner
from tests.orchestrate_tests.conftest import load_phase, toy_study, tuner_env
from tests.orchestrate_tests.test_chaos import _assert_each_slot_done_once, _children
from tests.orchestrate_tests.test_preemption import _worker_status
from tuner.orchestrate.budget import counted

pytestmark = pytest.mark.postgres

KILLS = 3


@pytest.mark.parametrize("through", ["postgresql", "grpc", "journal"])
def test_a_frozen_worker_loses_its_trial_to_the_beat_watch_and_gives_it_up_when_it_thaws(
    tmp_path: Path, output_dir: Path, proxy_url: str, postgres_url: str, unique_name: str, through: str
) -> None:
    """SIGSTOP of a worker and its trial for longer than the grace: another worker declares the
    trial dead (through the proxy or on a journal: its beat attribute stopped changing), retries
    it from its checkpoint, and the thawed worker records nothing more for it (the finish is
    first-writer-wins)."""
    from tuner.playbook import start_round
    from tuner.spec import load_study

    study = toy_study(
        tmp_path, name=unique_name, options={"step_sleep_s": 0.05}, round1={"trials": 3, "steps": 60}
    )
    url, stored = _storages(through, tmp_path, proxy_url, postgres_url)
    start_round(load_study(study), "round-1", output_dir, storage_url=stored)

    def worker(label: str, grace_s: int) -> WarmTuner:
        return spawn_warm_tuner(
            "worker", str(study), "--phase", "round-1", "--output-dir", str(output_dir), "--label", label,
            env=tuner_env(TUNER_STORAGE=url, TUNER_HEARTBEAT_GRACE_S=str(grace_s)),
        )  # fmt: skip

    frozen = worker("frozen", 120)  # thawed, it must not declare the other's trial dead

    def checkpointed() -> int | None:
        status = _worker_status(output_dir, "frozen", unique_name)
        if status.get("state") == "training" and status.get("step", 0) >= 20:
            return int(status["trial"])
        return None

    number = wait_for(checkpointed, what="a trial of the frozen worker with a checkpoint")
    os.killpg(frozen.pid, signal.SIGSTOP)
    try:
        other = worker("other", 4)
        retried = wait_for(
            lambda: [
                t
                for t in load_phase(stored, unique_name).trials
                if t.user_attrs.get("retry_of") == number and t.state.name != "WAITING"
            ],
            PATIENCE_S,
            "the frozen trial's retry to start elsewhere",
            process=other,  # an exit says why at once
        )
    finally:
        os.killpg(frozen.pid, signal.SIGCONT)
    trials = _all_end_cleanly((frozen, other), stored, unique_name, slots=3)
    before, retry = trials[number], trials[retried[0].number]
    assert before.state.name == "FAIL" and before.user_attrs["failure_reason"] == "killed"
    assert "worker_rss_mb" not in before.user_attrs  # the thawed owner recorded nothing more
    assert retry.user_attrs["worker"] == "other" and retry.state.name == "COMPLETE"


def test_a_worker_frozen_in_the_middle_of_a_write_holds_up_the_others_for_the_lock_wait_only(
    tmp_path: Path, output_dir: Path, postgres_url: str, unique_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A worker frozen between two statements of a transaction keeps the row locks it took:
    writing an attribute of its trial locks the trial's row, so the worker that finds the trial
    stale could not fail it for as long as the freeze lasted (CI: the test above timed out after
    300 s). The server now ends a tuner session idle in a transaction after
    ``$TUNER_PHASE_LOCK_WAIT_S``, and the phase lock, a transaction lock, goes with it.

    The frozen worker's unfinished write and claim are made here, through tuner's own storage
    (its sessions are the ones configured), on the frozen worker's trial; then it is frozen."""
    from sqlalchemy import text

    from tuner.orchestrate import open_storage
    from tuner.orchestrate.locks import phase_lock
    from tuner.playbook import start_round
    from tuner.spec import load_study

    monkeypatch.setenv("TUNER_PHASE_LOCK_WAIT_S", "3")
    study = toy_study(
        tmp_path, name=unique_name, options={"step_sleep_s": 0.05}, round1={"trials": 3, "steps": 60}
    )
    start_round(load_study(study), "round-1", output_dir, storage_url=postgres_url)

    def worker(label: str, grace_s: int) -> WarmTuner:
        return spawn_warm_tuner(
            "worker", str(study), "--phase", "round-1", "--output-dir", str(output_dir), "--label", label,
            env=tuner_env(TUNER_STORAGE=postgres_url, TUNER_HEARTBEAT_GRACE_S=str(grace_s)),
        )  # fmt: skip

    frozen = worker("frozen", 120)
    number = wait_for(
        lambda: (
            (s := _worker_status(output_dir, "frozen", unique_name)).get("state") == "training"
            and s.get("step", 0) >= 20
            and int(s["trial"])
        ),
        what="a trial of the frozen worker with a checkpoint",
    )
    trial_id = load_phase(postgres_url, unique_name).trials[number]._trial_id
    storage = open_storage(postgres_url)
    writing = storage.engine.connect()
    writing.execute(
        text("INSERT INTO trial_user_attributes (trial_id, key, value_json) VALUES (:id, 'half', '1')"),
        {"id": trial_id},
    )
    claiming = phase_lock(storage, f"{unique_name}/round-1", bounded=True)
    held = claiming.__enter__()
    os.killpg(frozen.pid, signal.SIGSTOP)
    try:
        other = worker("other", 4)
        wait_for(
            lambda: [
                t
                for t in load_phase(postgres_url, unique_name).trials
                if t.user_attrs.get("retry_of") == number and t.state.name != "WAITING"
            ],
            120,
            "the frozen trial's retry to start elsewhere",
            process=other,
        )
    finally:
        os.killpg(frozen.pid, signal.SIGCONT)
    claiming.__exit__(None, None, None)
    assert held.lost  # the server ended the stalled claim's session: the lock went with it
    with pytest.raises(Exception, match="idle-in-transaction timeout"):
        writing.execute(text("SELECT 1"))  # and the stalled write's
    writing.invalidate()
    trials = _all_end_cleanly((frozen, other), postgres_url, unique_name, slots=3)
    assert "half" not in trials[number].user_attrs  # the stalled write was rolled back
    assert trials[number].user_attrs["failure_reason"] == "killed"


def _storages(through: str, tmp_path: Path, proxy_url: str, postgres_url: str) -> tuple[str, str]:
    """(the URL the workers are given, the storage the test reads and starts the phase in):
    PostgreSQL directly, the proxy in front of it, or a journal file (read as it is)."""
    if through == "journal":
        journal = f"journal:///{tmp_path / 'study.log'}"
        return journal, journal
    return (proxy_url if through == "grpc" else postgres_url), postgres_url


def _all_end_cleanly(
    processes: tuple[WarmTuner, ...], postgres_url: str, name: str, *, slots: int
) -> list[Any]:
    """Each worker ends with exit 0 and no traceback; each of ``slots`` is done once: the trials.
    A failure shows every worker's output and every trial (a race seen once in CI must say which)."""
    outputs = [
        finish(process, lambda: len(load_phase(postgres_url, name).trials), what="a worker")[0]
        for process in processes
    ]
    trials = load_phase(postgres_url, name).trials
    for process, output in zip(processes, outputs, strict=True):
        assert process.returncode == 0 and "Traceback" not in output, (
            "\n---\n".join(outputs) + "\n---\n" + _trial_table(trials)
        )
    _assert_each_slot_done_once(trials, slots)
    return trials


def _trial_table(trials: list[Any]) -> str:
    """One line per trial: number, state, and the attributes that say who ran it and why it ended."""
    keys = ("worker", "slot", "attempt", "retry_of", "failure_reason", "retried", "duplicate_of", "error")
    lines = []
    for trial in trials:
        attrs = " ".join(f"{key}={trial.user_attrs[key]!r}" for key in keys if key in trial.user_attrs)
        lines.append(f"{trial.number} {trial.state.name} {attrs}")
    return "\n".join(lines)


@pytest.mark.parametrize("through", ["postgresql", "grpc", "journal"])
def test_trial_processes_killed_mid_run_are_retried_once_each_from_their_checkpoint(
    tmp_path: Path, output_dir: Path, proxy_url: str, postgres_url: str, unique_name: str, through: str
) -> None:
    """kill -9 of trial processes: their workers record each kill and enqueue its retry. Without a
    lock (the proxy, a journal) every claim also looks for a retry a crash lost, so two may be
    enqueued for one failure; one counts, the other is failed as its duplicate, and each slot
    ends once."""
    from tuner.playbook import start_round
    from tuner.spec import load_study

    rng = random.Random(3)
    study = toy_study(
        tmp_path,
        name=unique_name,
        options={"step_sleep_s": 0.03},
        round1={"trials": 4, "steps": 60, "max_retries": 10},
    )
    url, stored = _storages(through, tmp_path, proxy_url, postgres_url)
    start_round(load_study(study), "round-1", output_dir, storage_url=stored)
    env = tuner_env(TUNER_STORAGE=url, TUNER_HEARTBEAT_GRACE_S="120")  # no takeover: each kill recorded once
    phase = ("worker", str(study), "--phase", "round-1", "--output-dir", str(output_dir))
    workers = {label: spawn_warm_tuner(*phase, "--label", label, env=env) for label in ("w0", "w1")}
    for _ in range(KILLS):

        def victim() -> tuple[int, int] | None:
            """A worker's trial process past a checkpoint. The status is read on both sides of the
            children: a worker that has just lost its trial still says the step of that trial's
            last eval (read from the pipe after the kill), and may fork the retry before the
            children are listed; a retry killed before it starts resumes from nothing."""
            label = rng.choice(sorted(workers))
            before = _worker_status(output_dir, label, unique_name)
            children = _children(workers[label].pid)
            status = _worker_status(output_dir, label, unique_name)
            mid_run = status.get("state") == "training" and 10 <= status.get("step", 0) <= 40
            if mid_run and children and before.get("trial") == status.get("trial"):
                return workers[label].pid, children[0]
            return None

        parent, pid = wait_for(victim, what="a trial process mid-run")
        os.kill(pid, signal.SIGKILL)
        wait_for(lambda: pid not in _children(parent), 120, "the trial process to die")  # noqa: B023
    for label, process in workers.items():
        output, _ = finish(process, lambda: len(load_phase(stored, unique_name).trials), what=label)
        assert process.returncode == 0 and "Traceback" not in output, f"{label}: {output}"
    trials = load_phase(stored, unique_name).trials
    _assert_each_slot_done_once(trials, 4)
    live = counted(trials)
    assert len([t for t in live if t.user_attrs.get("failure_reason") == "killed"]) == KILLS
    resumed = 0
    for retry in (t for t in live if "retry_of" in t.user_attrs):  # a duplicate retry never ran
        before = trials[retry.user_attrs["retry_of"]]
        assert retry.user_attrs["run_dir"] == before.user_attrs["run_dir"]
        # the recorded step lags latest.pt by a rename (see test_preemption): at least it
        assert retry.user_attrs.get("resumed_from_step", 0) >= (
            before.user_attrs.get("last_checkpoint_step") or 0
        )
        resumed += retry.user_attrs.get("resumed_from_step", 0) > 0
    assert resumed >= 1


def test_workers_wait_for_a_proxy_that_is_not_up_yet_and_for_one_killed_and_restarted(
    tmp_path: Path, output_dir: Path, postgres_url: str, unique_name: str
) -> None:
    """Workers started before their proxy (a fleet and its proxy scheduled at once) wait for it;
    then kill -9 of the proxy while both train, and a new proxy on the same port later (a
    restart, a rescheduled pod): the workers say the storage is unreachable, wait, go on when it
    answers, and every slot is done once. (Before, a worker ended at once with exit 2, and the
    first call after the kill raised a gRPC error out of the worker: exit 70.)"""
    from tests.cli_tests.test_storage_proxy import _free_port, _start_proxy
    from tuner.playbook import start_round
    from tuner.spec import load_study

    study = toy_study(
        tmp_path, name=unique_name, options={"step_sleep_s": 0.03}, round1={"trials": 4, "steps": 60}
    )
    start_round(load_study(study), "round-1", output_dir, storage_url=postgres_url)
    port = _free_port()
    phase = ("worker", str(study), "--phase", "round-1", "--output-dir", str(output_dir))
    logs = {label: tmp_path / f"{label}-retries.log" for label in ("w0", "w1")}  # each storage retry
    workers = {
        label: spawn_warm_tuner(
            *phase, "--label", label,
            env=tuner_env(TUNER_STORAGE=f"grpc://127.0.0.1:{port}", TUNER_HEARTBEAT_GRACE_S="30",
                          TUNER_STORAGE_RETRY_LOG=str(log)),
        )
        for label, log in logs.items()
    }  # fmt: skip

    def retried(times: int) -> bool:  # every worker alive, and each has retried ``times`` times
        for label, process in workers.items():
            assert process.poll() is None, f"{label} ended: {process.communicate()[0]}"
        return all(log.exists() and len(log.read_text().splitlines()) >= times for log in logs.values())

    wait_for(lambda: retried(1), what="both workers to wait for the proxy")
    proxy, _ = _start_proxy(postgres_url, port, "--workers", "2")
    try:
        wait_for(
            lambda: all(
                _worker_status(output_dir, label, unique_name).get("step", 0) >= 10 for label in workers
            ),
            what="both workers mid-trial",
        )
        before = {label: len(log.read_text().splitlines()) for label, log in logs.items()}
        proxy.kill()
        proxy.communicate(timeout=60)
        wait_for(lambda: retried(max(before.values()) + 1), what="both workers to meet the outage")
        proxy, _ = _start_proxy(postgres_url, port, "--workers", "2")
        for label, process in workers.items():
            output, _ = finish(process, lambda: len(load_phase(postgres_url, unique_name).trials), what=label)
            assert process.returncode == 0 and "Traceback" not in output, f"{label}: {output}"
            assert f"(no answer at grpc://127.0.0.1:{port})" in output, output  # before it was up
            assert "storage proxy: unavailable" in output, output  # killed mid-phase
            assert output.count("storage reachable again") >= 2, output
        _assert_each_slot_done_once(load_phase(postgres_url, unique_name).trials, 4)
    finally:
        proxy.send_signal(signal.SIGINT)
        proxy.communicate(timeout=60)
