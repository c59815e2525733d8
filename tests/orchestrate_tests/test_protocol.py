"""The worker protocol under storage faults: lost acknowledgements, lost locks, lost races.

Faults are injected around a real storage (``storage_faults``): a call that reaches the database
and then "loses its acknowledgement" is the real call followed by the error a dropped connection
raises. The claims and the locks are here; how a trial's end survives the same faults is
``test_protocol_outcomes.py``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.orchestrate_tests.storage_faults import (
    FailsOnceWithoutLock,
    LostAck,
    ThroughProxy,
    blank_slot,
    claim_phase,
)
from tuner.errors import UsageError
from tuner.orchestrate import PhaseSettings, count_trials, open_storage, start_phase
from tuner.orchestrate._optuna_adapter import trial_id as trial_id_of
from tuner.orchestrate.claim import OWNER_ATTR, Claimed, Claimer, yield_duplicates
from tuner.orchestrate.failures import FailureReason, fail_trial
from tuner.orchestrate.locks import phase_lock, sqlite_lock_path


def test_a_claim_whose_acknowledgement_was_lost_is_found_not_repeated(tmp_path: Path) -> None:
    storage, study, settings = claim_phase(tmp_path)
    for method in ("create_new_trial", "set_trial_state_values"):
        claimed = Claimer(LostAck(storage, method), study, blank_slot).claim(settings)
        assert isinstance(claimed, Claimed)
    trials = study.get_trials()
    assert [t.user_attrs["slot"] for t in trials] == [0, 1]  # one trial per claim, none orphaned
    assert {t.state.name for t in trials} == {"RUNNING"}


def test_without_a_lock_a_start_won_before_the_owner_write_failed_is_still_ours(tmp_path: Path) -> None:
    """The start (the compare-and-set) succeeds, then the owner's write fails (a connection cut
    through the proxy). The claim's retry must take that trial, not leave it RUNNING with nobody
    training it (the reaper then failed it as ``killed``: a retry spent, test_chaos_postgres)."""
    storage, study, settings = claim_phase(tmp_path)
    cut = FailsOnceWithoutLock(storage, "set_trial_system_attr")
    claimed = Claimer(cut, study, blank_slot).claim(settings)
    assert isinstance(claimed, Claimed)
    (trial,) = study.get_trials()  # one trial, none orphaned
    assert trial.state.name == "RUNNING" and trial.number == claimed.trial.number
    assert trial.system_attrs.get("claim_owner") == trial.user_attrs.get("claim_token")


def test_a_trial_beats_from_its_start_through_a_claim_whose_last_write_is_retried(tmp_path: Path) -> None:
    """The owner's write after the start hangs 4.5 s, then loses its acknowledgement (a
    connection that stalls, then drops): the claim takes longer than the heartbeat grace (2 s). A
    trial beaten only at its start would look dead to every other worker by then (they fail it
    as ``killed`` and spend a retry on a live trial); it beats from its start, and the worker
    gets the beating thread with the trial."""
    import time

    from tuner.orchestrate._optuna_adapter import stale_trial_ids

    storage = open_storage(f"sqlite:///{tmp_path / 'study.db'}", heartbeat_interval_s=1, grace_period_s=2)
    settings = PhaseSettings.build(2, max_failed=3)
    study = start_phase(storage, "s", "round-1", settings, direction="minimize")
    owner_write = lambda trial_id, key, value: key == OWNER_ATTR  # noqa: E731 (not the beats' writes)
    slow = LostAck(storage, "set_trial_system_attr", before=lambda *a: time.sleep(4.5), when=owner_write)
    started = time.monotonic()
    claimed = Claimer(slow, study, blank_slot, beat_s=0.5).claim(settings)
    try:
        assert isinstance(claimed, Claimed) and claimed.beat is not None
        assert time.monotonic() - started > 4  # longer than the grace
        assert stale_trial_ids(storage, study) == []  # what another worker's reaper would fail
        time.sleep(2.5)  # and it goes on beating until the worker stops it
        assert stale_trial_ids(storage, study) == []
    finally:
        if isinstance(claimed, Claimed) and claimed.beat is not None:
            claimed.beat.stop()
    assert Claimer(storage, study, blank_slot).claim(settings).beat is None  # type: ignore[union-attr]


def test_the_side_that_lost_the_lock_yields_its_duplicate_and_it_counts_for_nothing(tmp_path: Path) -> None:
    storage, study, settings = claim_phase(tmp_path)
    first = Claimer(storage, study, blank_slot).claim(settings)
    # a worker whose lock was lost while it claimed saw no slot 0 and created it again
    rogue = Claimer(storage, study, lambda slot: blank_slot(0)).claim(settings)
    assert isinstance(first, Claimed) and isinstance(rogue, Claimed)
    assert yield_duplicates(storage, study, [rogue.trial.number]) == [rogue.trial.number]
    assert yield_duplicates(storage, study, [first.trial.number]) == []  # the survivor stays
    trials = study.get_trials()
    assert trials[rogue.trial.number].state.name == "FAIL"
    assert trials[rogue.trial.number].user_attrs["duplicate_of"] == first.trial.number
    counts = count_trials(trials)
    assert (counts.slots, counts.running, counts.failed) == (1, 1, 0)


def test_a_duplicate_whose_mark_was_acknowledged_late_is_still_failed(tmp_path: Path) -> None:
    """Marking is two writes (``duplicate_of``, then FAIL): a connection cut after the first left
    the retry seeing the mark and skipping the FAIL, so the yielded trial stayed RUNNING for good
    (seen under load in the PostgreSQL chaos test: its worker had given it up)."""
    storage, study, settings = claim_phase(tmp_path)
    first = Claimer(storage, study, blank_slot).claim(settings)
    rogue = Claimer(storage, study, lambda slot: blank_slot(0)).claim(settings)
    assert isinstance(first, Claimed) and isinstance(rogue, Claimed)
    lossy = LostAck(storage, "set_trial_user_attr")
    assert yield_duplicates(lossy, study, [rogue.trial.number]) == [rogue.trial.number]
    trial = study.get_trials()[rogue.trial.number]
    assert (trial.state.name, trial.user_attrs["duplicate_of"]) == ("FAIL", first.trial.number)


@pytest.mark.parametrize(
    "url", ["mysql://root@localhost/tuner", "mysql+pymysql://u:secret@db/x", "mssql://h/db", "oracle://h"]
)
def test_a_storage_without_a_phase_lock_is_refused_in_one_line(url: str) -> None:
    with pytest.raises(UsageError) as caught:
        open_storage(url)
    message = str(caught.value)
    assert "not supported" in message and "sqlite" in message and "postgresql" in message
    assert "\n" not in message and "secret" not in message


def test_the_sqlite_phase_lock_is_one_file_however_the_url_spells_the_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    relative = sqlite_lock_path("sqlite:///./runs/x.db", "s/round-1")
    absolute = sqlite_lock_path(f"sqlite:///{tmp_path}/runs/../runs/x.db", "s/round-1")
    assert relative == absolute and relative is not None and relative.parent == tmp_path / "runs"


@pytest.mark.postgres
def test_a_postgres_lock_whose_connection_was_terminated_reports_itself_lost(
    postgres_url: str, unique_name: str
) -> None:
    from sqlalchemy import create_engine, text

    url = f"{postgres_url}{'&' if '?' in postgres_url else '?'}application_name={unique_name}"
    storage = open_storage(url)
    with phase_lock(storage, unique_name) as held:
        pass
    assert not held.lost
    admin = create_engine(postgres_url, isolation_level="AUTOCOMMIT")
    with phase_lock(storage, unique_name) as held, admin.connect() as connection:
        connection.execute(
            text("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = :a"),
            {"a": unique_name},
        )
    assert held.lost  # another worker may have been in the critical section with us
    admin.dispose()


@pytest.mark.postgres
def test_a_lock_held_by_a_frozen_worker_is_waited_for_a_bounded_time_then_claims_go_on_without_it(
    postgres_url: str, unique_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A worker frozen inside its claim keeps its session lock as long as its connection lives
    (hours for a hung machine): the others must not queue behind it forever. Here the test is
    the frozen holder; a claim waits ``$TUNER_PHASE_LOCK_WAIT_S`` and goes on without the lock
    (reconciled as through the proxy), while the plan's compare-and-set would still wait."""
    import time

    from tuner.orchestrate.locks import LOCK_WAIT_ENV

    storage = open_storage(postgres_url)  # the holder's sessions end after the default 30 s idle
    monkeypatch.setenv(LOCK_WAIT_ENV, "0.5")  # the claimer's patience (and its own sessions')
    settings = PhaseSettings.build(4, max_failed=5)
    study = start_phase(storage, unique_name, "round-1", settings, direction="minimize")
    try:
        with phase_lock(storage, study.study_name) as held:
            started = time.monotonic()
            claimed = Claimer(open_storage(postgres_url), study, blank_slot).claim(settings)
            waited = time.monotonic() - started
        assert not held.lost and isinstance(claimed, Claimed)
        assert waited >= 0.5  # it did wait for the holder first
        assert count_trials(study.get_trials()).running == 1
    finally:
        import optuna

        optuna.delete_study(study_name=study.study_name, storage=storage)


def test_trial_ids_come_from_public_api(tmp_path: Path) -> None:
    storage, study, settings = claim_phase(tmp_path)
    claimed = Claimer(storage, study, blank_slot).claim(settings)
    assert isinstance(claimed, Claimed)
    assert trial_id_of(storage, study, claimed.trial.number) == claimed.trial_id


def test_storage_errors_absorbed_by_retries_are_counted_and_logged(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What lets a test assert "no database is locked" although ``with_retries`` hides it."""
    from sqlalchemy.exc import OperationalError

    from tuner.orchestrate import retry_log, storage_retries

    log = tmp_path / "retries.log"
    monkeypatch.setenv(retry_log.RETRY_LOG_ENV, str(log))
    calls = []

    def locked_once() -> str:
        calls.append(1)
        if len(calls) == 1:
            raise OperationalError("INSERT", {}, Exception("database is locked"))
        return "ok"

    before = retry_log.retries.locked
    assert storage_retries.with_retries(locked_once, first_wait_s=0.01) == "ok"
    assert retry_log.retries.locked == before + 1
    assert "locked: " in log.read_text()


def test_heartbeats_go_on_while_the_worker_is_busy_and_notice_a_takeover(tmp_path: Path) -> None:
    """Beats come from their own thread: a worker stuck in a storage retry still looks alive, to
    workers on the database (the heartbeat table) and to workers through the gRPC proxy (the
    beat attribute: one phase may have both); once another worker has failed the trial, the
    thread says so (the supervisor then abandons)."""
    import time

    from optuna.trial import TrialState

    from tuner.orchestrate._optuna_adapter import stale_trial_ids
    from tuner.orchestrate.heartbeat import BeatWatch, HeartbeatThread

    # the grace: 8 beats of 0.5 s (the stored beat has 1 s resolution, and a busy machine's beat
    # thread may wait a second or two for a core)
    storage = open_storage(f"sqlite:///{tmp_path / 'study.db'}", heartbeat_interval_s=1, grace_period_s=4)
    settings = PhaseSettings.build(2, max_failed=3)
    study = start_phase(storage, "s", "round-1", settings, direction="minimize")
    claimed = Claimer(storage, study, blank_slot).claim(settings)
    assert isinstance(claimed, Claimed)
    through_proxy = BeatWatch(grace_s=4)

    def running() -> list:
        return study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))

    assert through_proxy.stale_numbers(running()) == []  # the first look
    with HeartbeatThread(storage, claimed.trial_id, 0.5) as beat:
        time.sleep(5.5)  # the main thread does nothing for longer than the grace
        assert stale_trial_ids(storage, study) == []
        assert through_proxy.stale_numbers(running()) == []
        fail_trial(storage, study, claimed.trial_id, FailureReason.KILLED, "stale", settings)
        assert beat.ended_elsewhere.wait(30)


def test_with_the_lock_a_claim_fills_the_hole_a_lockless_worker_left(tmp_path: Path) -> None:
    """A worker through the proxy (no lock) took slot 2 of 4 first (it draws free slots at
    random); a worker with the lock then takes 0, 1 and 3, the lowest free each time, never 4:
    a round of fixed points has a plan for slots 0 to 3 only."""
    storage, study, settings = claim_phase(tmp_path)
    lockless = FailsOnceWithoutLock(storage, "no method")  # nothing fails: only the lock is missing
    Claimer(lockless, study, lambda slot: blank_slot(2)).claim(settings)
    for _ in range(3):
        assert isinstance(Claimer(storage, study, blank_slot).claim(settings), Claimed)
    assert sorted(t.user_attrs["slot"] for t in study.get_trials()) == [0, 1, 2, 3]
    assert Claimer(storage, study, blank_slot).claim(settings).action == "wait"  # 4 of 4 running


def test_a_trial_run_through_the_proxy_whose_worker_was_lost_is_failed_by_a_worker_on_the_database(
    tmp_path: Path,
) -> None:
    """One phase, two machines: one through the proxy, one on the database. The proxied worker
    claims a trial (it beats an attribute, nothing in the table) and its machine is lost. The
    table never sees that trial; a worker on the database still fails it a grace later, so the
    round does not wait for ever on a machine that is gone."""
    import time

    from tuner.orchestrate._optuna_adapter import stale_trial_ids
    from tuner.orchestrate.failures import fail_stale_trials
    from tuner.orchestrate.heartbeat import BeatWatch

    storage, study, settings = claim_phase(tmp_path)
    claimed = Claimer(ThroughProxy(storage), study, blank_slot).claim(settings)
    assert isinstance(claimed, Claimed)
    watch = BeatWatch(grace_s=1.0)
    assert fail_stale_trials(storage, study, settings, watch) == []  # the first look
    time.sleep(1.1)
    assert stale_trial_ids(storage, study) == []  # the table alone would never see it
    assert fail_stale_trials(storage, study, settings, watch) == [claimed.trial.number]
    (trial,) = [t for t in study.get_trials() if t.number == claimed.trial.number]
    assert trial.state.name == "FAIL" and trial.user_attrs["failure_reason"] == "killed"


def test_a_retry_enqueued_under_the_lock_while_a_worker_through_the_proxy_enqueued_it_too_yields(
    tmp_path: Path,
) -> None:
    """One phase, a worker on the database (with the lock) and one through the proxy (none).
    Both fail the same dead trial; between the database worker's look at the trials and its
    enqueue, the proxied worker enqueues the retry. The second retry must yield to the first
    (failed as its duplicate), not wait for ever for a worker while its slot completes."""
    storage, study, settings = claim_phase(tmp_path)
    claimed = Claimer(storage, study, blank_slot).claim(settings)
    assert isinstance(claimed, Claimed)
    proxied = ThroughProxy(storage)
    raced = []

    def proxied_worker_enqueues_first(*args: object, **kwargs: object) -> None:
        if not raced:
            reason = FailureReason.KILLED
            raced.append(fail_trial(proxied, study, claimed.trial_id, reason, "no beat", settings))

    on_database = LostAck(storage, "create_new_trial", times=0, before=proxied_worker_enqueues_first)
    assert fail_trial(on_database, study, claimed.trial_id, FailureReason.KILLED, "stale", settings)
    assert raced == [False]  # the database worker failed it; the proxied one only enqueued
    retries = [t for t in study.get_trials() if t.user_attrs.get("retry_of") == claimed.trial.number]
    assert [t.state.name for t in retries] == ["WAITING", "FAIL"]
    assert retries[1].user_attrs["duplicate_of"] == retries[0].number
