"""Claims through Optuna's gRPC storage proxy (``tuner storage-proxy`` in front of PostgreSQL),
where no lock and no heartbeat table passes: duplicates are reconciled by the lowest-number rule
(``duplicates.py``), trials beat through an attribute (``heartbeat.BeatWatch``).

What must hold there as it does on the databases: every slot counted exactly once, budgets
overshot by at most W - 1, and the commands working through ``grpc://``. Chaos through the
proxy (kill -9, SIGSTOP): ``test_grpc_chaos.py``.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from tests._processes import PATIENCE_S
from tests.orchestrate_tests.conftest import load_phase, run_tuner, toy_study
from tests.orchestrate_tests.storage_faults import blank_slot
from tests.orchestrate_tests.test_chaos import (
    _assert_each_slot_done_once,
)
from tuner.orchestrate import count_trials
from tuner.orchestrate.budget import DUPLICATE_ATTR, counted, slot_key

pytestmark = pytest.mark.postgres

TRIALS, PROCESSES = 200, 8
#: the real workers' round: each of its trials is a process of its own and a dozen proxied writes,
#: and what is tested (each slot counted once, every worker taking part) needs no more than this
WORKER_TRIALS = 100
KILLS = 3


def _claim_until_done(url: str, name: str, mode: str = "tell", ready: str | None = None) -> int:
    """One process of trivial trials until the phase ends: claim, then ``tell`` at once, ``hold``
    the trial 0.2 s and tell, or ``fail`` it (crashed); how many it ended itself. ``ready``: a
    folder where each of the ``PROCESSES`` marks itself ready, all then starting together (a
    process slow to start on a busy machine must not find a fast storage's phase done)."""
    import faulthandler

    import optuna
    from optuna.exceptions import UpdateFinishedTrialError

    # a process stuck (in an RPC, say) prints where, into the test's output, before the test
    # gives up on it: the one clue a rare hang on a loaded machine leaves
    faulthandler.dump_traceback_later(PATIENCE_S - 30, exit=False)

    from tuner.orchestrate.budget import Action, Decision
    from tuner.orchestrate.claim import Claimer
    from tuner.orchestrate.failures import FailureReason, fail_trial
    from tuner.orchestrate.phase import PhaseSettings
    from tuner.orchestrate.storage import open_storage

    storage = open_storage(url)
    study = optuna.load_study(study_name=name, storage=storage)
    settings = PhaseSettings.from_attrs(study.user_attrs)
    claimer, told = Claimer(storage, study, blank_slot), 0
    if ready is not None:
        (Path(ready) / str(os.getpid())).touch()
        while len(list(Path(ready).iterdir())) < PROCESSES:
            time.sleep(0.01)
    while True:
        claimed = claimer.claim(settings)
        if isinstance(claimed, Decision):
            if claimed.action in (Action.DONE, Action.FAILED):
                faulthandler.cancel_dump_traceback_later()
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


def _activity(postgres_url: str) -> list[tuple[Any, ...]]:
    """Every other session of the test database: state, what it waits on, since when, its query."""
    from sqlalchemy import create_engine, text

    engine = create_engine(postgres_url)
    try:
        with engine.connect() as connection:
            rows = connection.execute(
                text(
                    "SELECT pid, application_name, state, wait_event_type, wait_event, "
                    "now() - xact_start, left(query, 120) FROM pg_stat_activity "
                    "WHERE datname = current_database() AND pid <> pg_backend_pid()"
                )
            ).fetchall()
        return [tuple(row) for row in rows]
    finally:
        engine.dispose()


def test_eight_processes_claim_200_trials_through_the_proxy_each_slot_counted_once(
    proxy_url: str, postgres_url: str, unique_name: str
) -> None:
    from tuner.orchestrate.phase import PhaseSettings

    # all 8 claim at once: no trial here proves healthy, so the failure budget must not hold them
    name = _phase_of(postgres_url, unique_name, PhaseSettings.build(TRIALS, max_failed=TRIALS + 1))
    with multiprocessing.get_context("spawn").Pool(PROCESSES) as pool:
        # bounded: a process lost by the pool (killed, or stuck in an RPC) fails the test in
        # PATIENCE_S instead of hanging it until pytest's cap
        asked = pool.starmap_async(_claim_until_done, [(proxy_url, name)] * PROCESSES, chunksize=1)
        try:
            told = asked.get(timeout=PATIENCE_S)
        except multiprocessing.TimeoutError as timeout:
            # the processes' own stacks are in the output (faulthandler); what the database was
            # doing says whether the proxy waited on a lock
            sessions = _activity(postgres_url)
            raise AssertionError(f"claiming processes still running; the database: {sessions}") from timeout
    assert_each_slot_claimed_once(load_phase(postgres_url, unique_name).trials, TRIALS)
    assert sum(told) >= TRIALS and min(told) > 0, told  # every process took part


def assert_each_slot_claimed_once(trials: list[Any], slots: int) -> None:
    """``_claim_until_done``'s phase of ``slots`` slots, ended: each slot counted once, complete
    with its slot number as its value; none left running or waiting."""
    live = counted(trials)
    assert sorted(t.user_attrs["slot"] for t in live) == list(range(slots))  # each slot once
    assert {t.state.name for t in live} == {"COMPLETE"}
    assert all(t.value == t.user_attrs["slot"] for t in live)
    assert not [t for t in trials if t.state.name in ("RUNNING", "WAITING")]
    # the rest lost a race for their slot: failed as duplicates, or (told before they were
    # marked) complete, and left out by the one rule every reader applies
    for trial in (t for t in trials if t not in live):
        assert DUPLICATE_ATTR in trial.user_attrs or trial.state.name == "COMPLETE", trial
        assert Counter(slot_key(t) for t in live)[slot_key(trial)] == 1
    counts = count_trials(trials)
    assert (counts.slots, counts.completed, counts.failed, counts.running) == (slots, slots, 0, 0)


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


def test_eight_tuner_workers_run_100_trials_through_the_proxy_each_slot_counted_once(
    tmp_path: Path, output_dir: Path, proxy_url: str, postgres_url: str, unique_name: str
) -> None:
    """The fleet test with the real thing: ``run-round --workers 8`` (8 ``tuner worker``
    processes, each trial in a process of its own) through the proxy, 100 trials of 2 steps.
    Every slot is done and counted once; the duplicates that lost a race for a slot are left out
    by the one rule; every worker took part."""
    round1 = {"trials": WORKER_TRIALS, "steps": 2}
    study = toy_study(tmp_path, name=unique_name, round1=round1, max_train_steps=4, eval_every=2)
    args = ("--storage", proxy_url, "--output-dir", str(output_dir), "--no-progress")
    done = run_tuner("run-round", str(study), "--round", "1", "--workers", str(PROCESSES), *args)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    trials = load_phase(postgres_url, unique_name).trials  # what the database behind it holds
    _assert_each_slot_done_once(trials, WORKER_TRIALS)
    for trial in (t for t in trials if t not in counted(trials)):
        assert DUPLICATE_ATTR in trial.user_attrs or trial.state.name == "COMPLETE", trial
    workers = {t.user_attrs["worker"].split("@")[0] for t in counted(trials)}
    assert workers == {f"cpu{i}" for i in range(PROCESSES)}, workers


def test_a_start_lost_to_a_rival_is_not_taken_for_ours_when_its_acknowledgement_is_lost(
    proxy_url: str, postgres_url: str, unique_name: str
) -> None:
    """Two claimers of one waiting retry both write their claim token, ours last; the rival
    starts the trial first, and our start's acknowledgement is lost. The token we find on the
    RUNNING trial is ours, but the trial is not: without a lock only the owner written after a
    won start says whose it is. (The old claim took it, and two workers trained one slot.)"""
    import optuna
    from optuna.trial import TrialState

    from tests.orchestrate_tests.storage_faults import LostAck
    from tuner.orchestrate.claim import OWNER_ATTR, Claimed, Claimer
    from tuner.orchestrate.failures import FailureReason, fail_trial
    from tuner.orchestrate.phase import PhaseSettings
    from tuner.orchestrate.storage import open_storage

    name = _phase_of(postgres_url, unique_name, PhaseSettings.build(1, max_failed=2, max_retries=1))
    storage = open_storage(proxy_url)
    study = optuna.load_study(study_name=name, storage=storage)
    settings = PhaseSettings.from_attrs(study.user_attrs)
    first = Claimer(storage, study, blank_slot).claim(settings)
    assert isinstance(first, Claimed)
    fail_trial(storage, study, first.trial_id, FailureReason.CRASHED, "boom", settings)
    retry = next(t for t in study.get_trials() if t.state == TrialState.WAITING)

    def rival_starts_first(trial_id: int, **_: Any) -> None:
        assert storage.set_trial_state_values(trial_id, state=TrialState.RUNNING)

    ours = Claimer(LostAck(storage, "set_trial_state_values", before=rival_starts_first), study, blank_slot)
    result = ours.claim(settings)
    assert not isinstance(result, Claimed), result  # the rival's trial; the one slot is taken
    trial = study.get_trials()[retry.number]
    assert trial.state == TrialState.RUNNING and OWNER_ATTR not in trial.system_attrs
    # and a start that is ours, acknowledged or not, names its owner
    assert first.trial.system_attrs[OWNER_ATTR] == first.trial.user_attrs["claim_token"]


def test_sweep_lr_and_validate_through_the_proxy(
    tmp_path: Path, output_dir: Path, proxy_url: str, postgres_url: str, unique_name: str
) -> None:
    """sweep-lr's workers claim its grid through the proxy; the length it stores is the one
    `validate` (and every later phase) reads back through it."""
    from tests.playbook_tests.test_sweep_lr_command import _sweep_study
    from tuner.orchestrate.storage import open_storage
    from tuner.playbook.study_results import stored_recommendation

    path = _renamed(_sweep_study(tmp_path), unique_name)
    args = ("--storage", proxy_url, "--output-dir", str(output_dir))
    done = run_tuner("sweep-lr", str(path), *args, "--workers", "2", "--no-progress")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "- max_train_steps = 10: lr 1 fit the training set" in done.stdout, done.stdout
    assert stored_recommendation(open_storage(postgres_url), unique_name) == 10
    found = run_tuner("validate", str(path), "--storage", proxy_url, "--no-build")
    assert "max_train_steps 10 (from tuner sweep-lr)" in found.stdout, found.stdout + found.stderr


def test_racing_writers_of_a_plan_through_the_proxy_agree_on_one(
    proxy_url: str, postgres_url: str, unique_name: str
) -> None:
    """Creating a phase's plan is compare-and-set (``phase.compare_and_set_attr``); through the
    proxy no lock passes, so the right to write is the creation of one marker study. Eight
    writers at once: one writes, the seven others get its plan. (Under the lock alone, every one
    of them wrote, and the last won silently.) Not a phase: ``list`` never shows the marker."""
    import threading

    from tuner.orchestrate.phase import compare_and_set_attr
    from tuner.orchestrate.storage import open_storage
    from tuner.orchestrate.stored import open_reader

    writers, barrier, results = 8, threading.Barrier(8), []

    def write(plan: str) -> None:
        storage = open_storage(proxy_url)
        barrier.wait()
        results.append(
            compare_and_set_attr(
                storage, unique_name, "round-2", "tuner:plan", plan, expected=None, direction="minimize"
            )
        )

    threads = [threading.Thread(target=write, args=(f"plan {index}",)) for index in range(writers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert len(results) == writers
    assert sum(swap.swapped for swap in results) == 1, results
    (winner,) = [swap.held for swap in results if swap.swapped]
    assert {swap.held for swap in results} == {winner}
    assert load_phase(postgres_url, unique_name, "round-2").user_attrs["tuner:plan"] == winner
    with open_reader(postgres_url) as reader:
        assert reader.studies()[unique_name] == ["round-2"]  # the marker is not a phase


def test_tune_through_the_proxy_delivers_its_model_and_reports_its_log(
    tmp_path: Path, output_dir: Path, proxy_url: str, unique_name: str
) -> None:
    """`tuner tune` (round 1, round 2, the delivered model and the decision log it stores in
    the storage) with every phase's workers and every read through the proxy."""
    import json

    from tests.cli_tests._tune_support import tune_study

    path = _renamed(tune_study(tmp_path, top_k=1), unique_name)
    args = ("--storage", proxy_url, "--output-dir", str(output_dir))
    done = run_tuner("tune", str(path), "--budget", "80", "--no-apply-suggestions", "--json", *args)
    assert done.returncode == 0, done.stdout + done.stderr
    model = json.loads(done.stdout)["delivered_model"]
    assert model["delivered"] and model["phase"] == "round-2", model
    report = run_tuner("report", str(path), "--json", *args)
    assert report.returncode == 0, report.stderr
    assert json.loads(report.stdout)["tune"]["budget_steps"] == 80


def _renamed(path: Path, name: str) -> Path:
    """The study file at ``path`` under the name ``name`` (unique on the shared PostgreSQL)."""
    import yaml

    path.write_text(yaml.safe_dump({**yaml.safe_load(path.read_text()), "name": name}, sort_keys=False))
    return path


def test_a_trial_the_proxys_client_cache_missed_is_read_again(proxy_url: str, unique_name: str) -> None:
    """Optuna's proxy client, once it has seen a finished trial, asks only for larger ids (and the
    unfinished ones it knows): a trial it missed in one answer (created just before a later one
    that finished first) stays missing for good. That state built by hand (trial 1 taken out of
    the client's cache): Optuna's client keeps the gap; tuner's (``open_storage``) sees the gap
    in the trial numbers, reads the study again and lists all three."""
    import optuna
    from optuna.trial import TrialState

    from tuner.orchestrate.retry_log import retries
    from tuner.orchestrate.storage import open_storage

    storage = open_storage(proxy_url)
    host, port = proxy_url.removeprefix("grpc://").rsplit(":", 1)
    stock = optuna.storages.GrpcStorageProxy(host=host, port=int(port))
    study = optuna.create_study(study_name=unique_name, storage=storage)
    for value in (0.3, 0.2, 0.1):
        trial = study.ask()
        study.tell(trial, value)
    study_id = storage.get_study_id_from_name(unique_name)
    for client in (storage, stock):
        assert [t.number for t in client.get_all_trials(study_id)] == [0, 1, 2]
        del client._cache.studies[study_id].trials[1]  # the race's outcome
    assert [t.number for t in stock.get_all_trials(study_id)] == [0, 2]  # Optuna's: missing for good
    assert [t.number for t in stock.get_all_trials(study_id)] == [0, 2]
    rereads = retries.reread
    assert [t.number for t in storage.get_all_trials(study_id)] == [0, 1, 2]
    assert retries.reread == rereads + 1  # counted (the fleet benchmark reports how often)
    assert [t.number for t in storage.get_all_trials(study_id)] == [0, 1, 2]
    assert retries.reread == rereads + 1  # read whole once: no gap any more
    assert [t.number for t in storage.get_all_trials(study_id, states=(TrialState.COMPLETE,))] == [0, 1, 2]
    assert storage.get_all_trials(study_id, states=(TrialState.RUNNING,)) == []
    stock.close()
