"""Claims through Optuna's gRPC storage proxy (``tuner storage-proxy`` in front of PostgreSQL),
where no lock and no heartbeat table passes: duplicates are reconciled by the lowest-number rule
(``duplicates.py``), trials beat through an attribute (``heartbeat.BeatWatch``).

What must hold there as it does on the databases: every slot counted exactly once, a dead or
frozen worker's trial taken over and resumed, and the commands working through ``grpc://``.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import random
import signal
import subprocess
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests._processes import PATIENCE_S, finish, wait_for
from tests.cli_tests.test_storage_proxy import _free_port, _start_proxy
from tests.orchestrate_tests.conftest import load_phase, run_tuner, start_tuner, toy_study, tuner_env
from tests.orchestrate_tests.test_chaos import (
    _assert_each_slot_done_once,
    _children,
)
from tests.orchestrate_tests.test_preemption import _worker_status
from tuner.orchestrate import count_trials
from tuner.orchestrate.budget import DUPLICATE_ATTR, counted, slot_key

pytestmark = pytest.mark.postgres

TRIALS, PROCESSES = 200, 8
KILLS = 3


@pytest.fixture
def proxy_url(postgres_url: str) -> Iterator[str]:
    port = _free_port()
    proxy, _ = _start_proxy(postgres_url, port, "--workers", str(PROCESSES))
    try:
        yield f"grpc://127.0.0.1:{port}"
    finally:
        proxy.send_signal(signal.SIGINT)
        proxy.communicate(timeout=60)


def _slot(slot: int) -> Any:
    from tuner.orchestrate.claim import NewSlot

    return NewSlot(params=None, distributions=None, fixed_params={}, user_attrs={"slot": slot, "attempt": 0})


def _claim_until_done(url: str, name: str, mode: str = "tell") -> int:
    """One process of trivial trials until the phase ends: claim, then ``tell`` at once, ``hold``
    the trial 0.2 s and tell, or ``fail`` it (crashed); how many it ended itself."""
    import optuna
    from optuna.exceptions import UpdateFinishedTrialError

    from tuner.orchestrate.budget import Action, Decision
    from tuner.orchestrate.claim import Claimer
    from tuner.orchestrate.failures import FailureReason, fail_trial
    from tuner.orchestrate.phase import PhaseSettings
    from tuner.orchestrate.storage import open_storage

    storage = open_storage(url)
    study = optuna.load_study(study_name=name, storage=storage)
    settings = PhaseSettings.from_attrs(study.user_attrs)
    claimer, told = Claimer(storage, study, _slot), 0
    while True:
        claimed = claimer.claim(settings)
        if isinstance(claimed, Decision):
            if claimed.action in (Action.DONE, Action.FAILED):
                return told
            assert claimed.action == Action.WAIT, claimed
            time.sleep(0.01)
            continue
        if mode == "fail":
            told += fail_trial(storage, study, claimed.trial_id, FailureReason.CRASHED, "boom", settings)
            continue
        if mode == "hold":
            time.sleep(0.2)
        # a duplicate may be failed by another process meanwhile: then the tell is refused
        with contextlib.suppress(UpdateFinishedTrialError):
            study.tell(claimed.trial.number, float(claimed.trial.user_attrs["slot"]), skip_if_finished=True)
        told += 1


def _phase_of(postgres_url: str, unique_name: str, settings: Any) -> str:
    from tuner.orchestrate.phase import start_phase
    from tuner.orchestrate.storage import open_storage

    start_phase(open_storage(postgres_url), unique_name, "round-1", settings, direction="minimize")
    return f"{unique_name}/round-1"


def _most_at_once(trials: list[Any]) -> int:
    """The most trials running at one moment (starts and ends stamped by the one database)."""
    events = sorted([(t.datetime_start, 1) for t in trials] + [(t.datetime_complete, -1) for t in trials])
    running = most = 0
    for _, step in events:  # an end sorts before a start at the same instant
        running += step
        most = max(most, running)
    return most


def test_eight_processes_claim_200_trials_through_the_proxy_each_slot_counted_once(
    proxy_url: str, postgres_url: str, unique_name: str
) -> None:
    from tuner.orchestrate.phase import PhaseSettings

    # all 8 claim at once: no trial here proves healthy, so the failure budget must not hold them
    name = _phase_of(postgres_url, unique_name, PhaseSettings.build(TRIALS, max_failed=TRIALS + 1))
    with multiprocessing.get_context("spawn").Pool(PROCESSES) as pool:
        told = pool.starmap(_claim_until_done, [(proxy_url, name)] * PROCESSES, chunksize=1)
    trials = load_phase(postgres_url, unique_name).trials
    live = counted(trials)
    assert sorted(t.user_attrs["slot"] for t in live) == list(range(TRIALS))  # each slot once
    assert {t.state.name for t in live} == {"COMPLETE"}
    assert all(t.value == t.user_attrs["slot"] for t in live)
    assert not [t for t in trials if t.state.name in ("RUNNING", "WAITING")]
    # the rest lost a race for their slot: failed as duplicates, or (told before they were
    # marked) complete, and left out by the one rule every reader applies
    for trial in (t for t in trials if t not in live):
        assert DUPLICATE_ATTR in trial.user_attrs or trial.state.name == "COMPLETE", trial
        assert Counter(slot_key(t) for t in live)[slot_key(trial)] == 1
    counts = count_trials(trials)
    assert (counts.slots, counts.completed, counts.failed, counts.running) == (TRIALS, TRIALS, 0, 0)
    assert sum(told) >= TRIALS and min(told) > 0, told  # every process took part


@pytest.mark.parametrize("budget", ["max_failed", "max_parallel"])
def test_without_a_lock_a_budget_is_overshot_by_at_most_the_workers_less_one(
    proxy_url: str, postgres_url: str, unique_name: str, budget: str
) -> None:
    """The bound the README states: W workers each check the counts, then claim; all W may pass
    the check before any claim is seen, so a budget of B admits at most B + W - 1."""
    from tuner.orchestrate.phase import PhaseSettings

    limit = 2
    if budget == "max_failed":  # every trial fails at once
        settings = PhaseSettings.build(40, max_failed=limit, max_retries=0)
        mode = "fail"
    else:  # every trial runs 0.2 s
        settings = PhaseSettings.build(24, max_failed=25, max_parallel=limit)
        mode = "hold"
    name = _phase_of(postgres_url, unique_name, settings)
    with multiprocessing.get_context("spawn").Pool(PROCESSES) as pool:
        pool.starmap(_claim_until_done, [(proxy_url, name, mode)] * PROCESSES, chunksize=1)
    trials = counted(load_phase(postgres_url, unique_name).trials)
    counts = count_trials(trials)
    if budget == "max_failed":
        assert limit <= counts.failed <= limit + PROCESSES - 1, counts
    else:
        complete = [t for t in trials if t.state.name == "COMPLETE"]
        assert len(complete) == 24
        assert limit <= _most_at_once(complete) <= limit + PROCESSES - 1


def test_run_round_workers_and_report_through_the_proxy(
    tmp_path: Path, output_dir: Path, proxy_url: str, postgres_url: str, unique_name: str
) -> None:
    study = toy_study(tmp_path, name=unique_name, round1={"trials": 6, "steps": 10})
    args = ("--storage", proxy_url, "--output-dir", str(output_dir))
    done = run_tuner("run-round", str(study), "--round", "1", "--workers", "2", *args)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "6/6 done" in done.stdout, done.stdout
    trials = load_phase(postgres_url, unique_name).trials  # what the database behind it holds
    _assert_each_slot_done_once(trials, 6)
    assert {t.user_attrs["worker"].split("@")[0] for t in trials} <= {"cpu0", "cpu1"}
    report = run_tuner("report", str(study), *args)
    assert report.returncode == 0, report.stdout + report.stderr
    assert f"storage      {proxy_url}" in report.stdout and "round-1" in report.stdout, report.stdout


@pytest.mark.parametrize("through", ["postgresql", "grpc"])
def test_a_frozen_worker_loses_its_trial_to_the_beat_watch_and_gives_it_up_when_it_thaws(
    tmp_path: Path, output_dir: Path, proxy_url: str, postgres_url: str, unique_name: str, through: str
) -> None:
    """SIGSTOP of a worker and its trial for longer than the grace: another worker declares the
    trial dead (through the proxy: its beat attribute stopped changing), retries it from its
    checkpoint, and the thawed worker records nothing more for it (the finish is first-writer-wins)."""
    from tuner.playbook import start_round
    from tuner.spec import load_study

    study = toy_study(
        tmp_path, name=unique_name, options={"step_sleep_s": 0.05}, round1={"trials": 3, "steps": 60}
    )
    start_round(load_study(study), "round-1", output_dir, storage_url=postgres_url)
    url = proxy_url if through == "grpc" else postgres_url

    def worker(label: str, grace_s: int) -> subprocess.Popen[str]:
        return start_tuner(
            "worker", str(study), "--phase", "round-1", "--output-dir", str(output_dir), "--label", label,
            env=tuner_env(TUNER_STORAGE=url, TUNER_HEARTBEAT_GRACE_S=str(grace_s)), start_new_session=True,
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
                for t in load_phase(postgres_url, unique_name).trials
                if t.user_attrs.get("retry_of") == number and t.state.name != "WAITING"
            ],
            PATIENCE_S,
            "the frozen trial's retry to start elsewhere",
        )
    finally:
        os.killpg(frozen.pid, signal.SIGCONT)
    for process in (frozen, other):
        output, _ = finish(
            process, lambda: len(load_phase(postgres_url, unique_name).trials), what="a worker"
        )
        assert process.returncode == 0 and "Traceback" not in output, output
    trials = load_phase(postgres_url, unique_name).trials
    _assert_each_slot_done_once(trials, 3)
    before, retry = trials[number], trials[retried[0].number]
    assert before.state.name == "FAIL" and before.user_attrs["failure_reason"] == "killed"
    assert "worker_rss_mb" not in before.user_attrs  # the thawed owner recorded nothing more
    assert retry.user_attrs["worker"] == "other" and retry.state.name == "COMPLETE"


@pytest.mark.parametrize("through", ["postgresql", "grpc"])
def test_trial_processes_killed_mid_run_are_retried_once_each_from_their_checkpoint(
    tmp_path: Path, output_dir: Path, proxy_url: str, postgres_url: str, unique_name: str, through: str
) -> None:
    """kill -9 of trial processes: their workers record each kill and enqueue its retry. Without a
    lock (the proxy) every claim also looks for a retry a crash lost, so two may be enqueued for
    one failure; one counts, the other is failed as its duplicate, and each slot ends once."""
    from tuner.playbook import start_round
    from tuner.spec import load_study

    rng = random.Random(3)
    study = toy_study(
        tmp_path,
        name=unique_name,
        options={"step_sleep_s": 0.03},
        round1={"trials": 4, "steps": 60, "max_retries": 10},
    )
    start_round(load_study(study), "round-1", output_dir, storage_url=postgres_url)
    url = proxy_url if through == "grpc" else postgres_url
    env = tuner_env(TUNER_STORAGE=url, TUNER_HEARTBEAT_GRACE_S="120")  # no takeover: each kill recorded once
    phase = ("worker", str(study), "--phase", "round-1", "--output-dir", str(output_dir))
    workers = {label: start_tuner(*phase, "--label", label, env=env) for label in ("w0", "w1")}
    for _ in range(KILLS):

        def victim() -> tuple[int, int] | None:
            label = rng.choice(sorted(workers))
            status = _worker_status(output_dir, label, unique_name)
            children = _children(workers[label].pid)
            if status.get("state") == "training" and 10 <= status.get("step", 0) <= 40 and children:
                return workers[label].pid, children[0]
            return None

        parent, pid = wait_for(victim, what="a trial process mid-run")
        os.kill(pid, signal.SIGKILL)
        wait_for(lambda: pid not in _children(parent), 120, "the trial process to die")  # noqa: B023
    for label, process in workers.items():
        output, _ = finish(process, lambda: len(load_phase(postgres_url, unique_name).trials), what=label)
        assert process.returncode == 0 and "Traceback" not in output, f"{label}: {output}"
    trials = load_phase(postgres_url, unique_name).trials
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
