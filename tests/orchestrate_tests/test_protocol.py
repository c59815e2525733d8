"""The worker protocol under storage faults: lost acknowledgements, lost locks, lost races.

Faults are injected around a real storage (SQLite, or the real PostgreSQL where it is set up):
a call that reaches the database and then "loses its acknowledgement" is the real call followed
by the error a dropped connection raises.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from tuner.errors import UsageError
from tuner.orchestrate import PhaseSettings, count_trials, open_storage, start_phase
from tuner.orchestrate._optuna_adapter import trial_id as trial_id_of
from tuner.orchestrate.budget import Decision
from tuner.orchestrate.claim import Claimed, Claimer, NewSlot, yield_duplicates
from tuner.orchestrate.failures import FailureReason, fail_trial
from tuner.orchestrate.locks import phase_lock, sqlite_lock_path
from tuner.orchestrate.messages import Finished
from tuner.orchestrate.record import Recorder


class LostAck:
    """A real storage whose chosen method commits, then raises as if the connection dropped."""

    def __init__(self, storage: Any, method: str, times: int = 1, before: Any = None) -> None:
        self._storage, self._method, self._times, self._before = storage, method, times, before

    def __getattr__(self, name: str) -> Any:
        real = getattr(self._storage, name)
        if name != self._method:
            return real

        def call(*args: Any, **kwargs: Any) -> Any:
            if self._before is not None:
                self._before(*args, **kwargs)
            result = real(*args, **kwargs)
            if self._times > 0:
                self._times -= 1
                from sqlalchemy.exc import OperationalError

                raise OperationalError("lost acknowledgement", {}, Exception("connection dropped"))
            return result

        return call


def _phase(tmp_path: Path, **budget: Any) -> tuple[Any, Any, PhaseSettings]:
    storage = open_storage(f"sqlite:///{tmp_path / 'study.db'}", heartbeat_interval_s=1, grace_period_s=60)
    trials = budget.pop("max_trials", 4)
    settings = PhaseSettings.build(trials, max_failed=trials + 1, **budget)  # unproven trials may run
    study = start_phase(storage, "s", "round-1", settings, direction="minimize")
    return storage, study, settings


def _slot(slot: int) -> NewSlot:
    return NewSlot(params=None, distributions=None, fixed_params={}, user_attrs={"slot": slot, "attempt": 0})


def test_a_claim_whose_acknowledgement_was_lost_is_found_not_repeated(tmp_path: Path) -> None:
    storage, study, settings = _phase(tmp_path)
    for method in ("create_new_trial", "set_trial_state_values"):
        claimed = Claimer(LostAck(storage, method), study, _slot).claim(settings)
        assert isinstance(claimed, Claimed)
    trials = study.get_trials()
    assert [t.user_attrs["slot"] for t in trials] == [0, 1]  # one trial per claim, none orphaned
    assert {t.state.name for t in trials} == {"RUNNING"}


class FailsOnceWithoutLock:
    """A real storage with no phase lock (as through Optuna's gRPC proxy) whose chosen method
    fails once before it reaches the database (the connection was cut)."""

    def __init__(self, storage: Any, method: str) -> None:
        self._storage, self._method, self._failed = storage, method, False

    def __getattr__(self, name: str) -> Any:
        if name == "url":
            raise AttributeError(name)
        real = getattr(self._storage, name)
        if name != self._method or self._failed:
            return real

        def call(*args: Any, **kwargs: Any) -> Any:
            from sqlalchemy.exc import OperationalError

            self._failed = True
            raise OperationalError("connection cut", {}, Exception("terminating connection"))

        return call


def test_without_a_lock_a_start_won_before_the_owner_write_failed_is_still_ours(tmp_path: Path) -> None:
    """The start (the compare-and-set) succeeds, then the owner's write fails (a connection cut
    through the proxy). The claim's retry must take that trial, not leave it RUNNING with nobody
    training it (the reaper then failed it as ``killed``: a retry spent, test_chaos_postgres)."""
    storage, study, settings = _phase(tmp_path)
    claimed = Claimer(FailsOnceWithoutLock(storage, "set_trial_system_attr"), study, _slot).claim(settings)
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
    slow = LostAck(storage, "set_trial_system_attr", before=lambda *a, **k: time.sleep(4.5))
    started = time.monotonic()
    claimed = Claimer(slow, study, _slot, beat_s=0.5).claim(settings)
    try:
        assert isinstance(claimed, Claimed) and claimed.beat is not None
        assert time.monotonic() - started > 4  # longer than the grace
        assert stale_trial_ids(storage, study) == []  # what another worker's reaper would fail
        time.sleep(2.5)  # and it goes on beating until the worker stops it
        assert stale_trial_ids(storage, study) == []
    finally:
        if isinstance(claimed, Claimed) and claimed.beat is not None:
            claimed.beat.stop()
    assert Claimer(storage, study, _slot).claim(settings).beat is None  # type: ignore[union-attr]


def test_the_side_that_lost_the_lock_yields_its_duplicate_and_it_counts_for_nothing(tmp_path: Path) -> None:
    storage, study, settings = _phase(tmp_path)
    first = Claimer(storage, study, _slot).claim(settings)
    # a worker whose lock was lost while it claimed saw no slot 0 and created it again
    rogue = Claimer(storage, study, lambda slot: _slot(0)).claim(settings)
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
    storage, study, settings = _phase(tmp_path)
    first = Claimer(storage, study, _slot).claim(settings)
    rogue = Claimer(storage, study, lambda slot: _slot(0)).claim(settings)
    assert isinstance(first, Claimed) and isinstance(rogue, Claimed)
    lossy = LostAck(storage, "set_trial_user_attr")
    assert yield_duplicates(lossy, study, [rogue.trial.number]) == [rogue.trial.number]
    trial = study.get_trials()[rogue.trial.number]
    assert (trial.state.name, trial.user_attrs["duplicate_of"]) == ("FAIL", first.trial.number)


def test_a_result_told_for_a_trial_another_worker_failed_is_ignored(tmp_path: Path) -> None:
    storage, study, settings = _phase(tmp_path)
    claimed = Claimer(storage, study, _slot).claim(settings)
    assert isinstance(claimed, Claimed)
    fail_trial(storage, study, claimed.trial_id, FailureReason.KILLED, "stale", settings)
    done = Finished("completed", "", 40, 0.5, 40, None, 1.0)
    Recorder(storage, study, claimed.trial_id, claimed.trial.number, attempt=0, last_step=40).record(
        done, tmp_path, settings
    )  # no exception: the worker that was cut off moves on
    assert study.get_trials()[0].state.name == "FAIL"
    # a retried tell whose acknowledgement was lost is harmless too
    study.tell(claimed.trial.number, 0.5, skip_if_finished=True)


def test_no_retry_is_queued_when_the_owner_completed_the_trial_first(tmp_path: Path) -> None:
    storage, study, settings = _phase(tmp_path)
    claimed = Claimer(storage, study, _slot).claim(settings)
    assert isinstance(claimed, Claimed)

    def owner_completes(trial_id: int, key: str, value: Any) -> None:
        if key == "retried":  # while the stale-checker writes why it fails the trial
            study.tell(claimed.trial.number, 0.25)

    racing = LostAck(storage, "set_trial_user_attr", times=0, before=owner_completes)
    assert not fail_trial(racing, study, claimed.trial_id, FailureReason.KILLED, "stale", settings)
    states = [t.state.name for t in study.get_trials()]
    assert states == ["COMPLETE"]  # no WAITING retry for a slot that completed


def test_a_retry_lost_by_a_crash_is_enqueued_by_the_next_claim(tmp_path: Path) -> None:
    from optuna.trial import TrialState

    storage, study, settings = _phase(tmp_path, max_trials=1)
    claimed = Claimer(storage, study, _slot).claim(settings)
    assert isinstance(claimed, Claimed)
    # what fail_trial had done when its worker died: why, "retried", FAIL; no retry yet
    for key, value in {"failure_reason": "crashed", "error": "boom", "retried": True}.items():
        storage.set_trial_user_attr(claimed.trial_id, key, value)
    storage.set_trial_state_values(claimed.trial_id, state=TrialState.FAIL)
    retry = Claimer(storage, study, _slot).claim(settings)
    assert isinstance(retry, Claimed)
    assert retry.trial.user_attrs["retry_of"] == claimed.trial.number
    assert retry.trial.user_attrs["attempt"] == 1 and retry.trial.user_attrs["slot"] == 0
    assert isinstance(Claimer(storage, study, _slot).claim(settings), Decision)  # only one retry


def test_a_phase_with_a_lost_retry_is_not_finished_for_a_rerun(tmp_path: Path) -> None:
    """``run_phase`` starts no worker on a re-run of a finished phase: "finished" must not miss a
    slot whose retry a crash lost (only a worker's claim enqueues it)."""
    from optuna.trial import TrialState

    from tuner.orchestrate.progress import PhaseWatcher

    storage, study, settings = _phase(tmp_path, max_trials=1)
    watcher = PhaseWatcher(study, tmp_path)
    assert not watcher.snapshot().nothing_to_run  # a slot never started
    claimed = Claimer(storage, study, _slot).claim(settings)
    assert isinstance(claimed, Claimed) and not watcher.snapshot().nothing_to_run  # running
    for key, value in {"failure_reason": "crashed", "error": "boom", "retried": True}.items():
        storage.set_trial_user_attr(claimed.trial_id, key, value)
    storage.set_trial_state_values(claimed.trial_id, state=TrialState.FAIL)
    lost = watcher.snapshot()
    assert lost.decision().action == "done"  # the budget rule alone would call it finished
    assert not lost.nothing_to_run  # but its retry is owed
    retry = Claimer(storage, study, _slot).claim(settings)
    assert isinstance(retry, Claimed)
    storage.set_trial_state_values(retry.trial_id, state=TrialState.COMPLETE, values=[0.5])
    assert watcher.snapshot().nothing_to_run


def test_a_lost_fail_acknowledgement_still_queues_exactly_one_retry(tmp_path: Path) -> None:
    from tuner.orchestrate.storage import with_retries

    storage, study, settings = _phase(tmp_path)
    claimed = Claimer(storage, study, _slot).claim(settings)
    assert isinstance(claimed, Claimed)
    lossy = LostAck(storage, "set_trial_state_values")
    with_retries(fail_trial, lossy, study, claimed.trial_id, FailureReason.CRASHED, "boom", settings)
    waiting = [t for t in study.get_trials() if t.state.name == "WAITING"]
    assert [t.user_attrs["retry_of"] for t in waiting] == [claimed.trial.number]


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
            claimed = Claimer(open_storage(postgres_url), study, _slot).claim(settings)
            waited = time.monotonic() - started
        assert not held.lost and isinstance(claimed, Claimed)
        assert waited >= 0.5  # it did wait for the holder first
        assert count_trials(study.get_trials()).running == 1
    finally:
        import optuna

        optuna.delete_study(study_name=study.study_name, storage=storage)


def test_trial_ids_come_from_public_api(tmp_path: Path) -> None:
    storage, study, settings = _phase(tmp_path)
    claimed = Claimer(storage, study, _slot).claim(settings)
    assert isinstance(claimed, Claimed)
    assert trial_id_of(storage, study, claimed.trial.number) == claimed.trial_id


def test_storage_errors_absorbed_by_retries_are_counted_and_logged(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What lets a test assert "no database is locked" although ``with_retries`` hides it."""
    from sqlalchemy.exc import OperationalError

    from tuner.orchestrate import retry_log, storage

    log = tmp_path / "retries.log"
    monkeypatch.setenv(retry_log.RETRY_LOG_ENV, str(log))
    calls = []

    def locked_once() -> str:
        calls.append(1)
        if len(calls) == 1:
            raise OperationalError("INSERT", {}, Exception("database is locked"))
        return "ok"

    before = retry_log.retries.locked
    assert storage.with_retries(locked_once, first_wait_s=0.01) == "ok"
    assert retry_log.retries.locked == before + 1
    assert "locked: " in log.read_text()


def test_heartbeats_go_on_while_the_worker_is_busy_and_notice_a_takeover(tmp_path: Path) -> None:
    """Beats come from their own thread: a worker stuck in a storage retry still looks alive;
    once another worker has failed the trial, the thread says so (the supervisor then abandons)."""
    import time

    from tuner.orchestrate._optuna_adapter import stale_trial_ids
    from tuner.orchestrate.heartbeat import HeartbeatThread

    # the grace: 8 beats of 0.5 s (the stored beat has 1 s resolution, and a busy machine's beat
    # thread may wait a second or two for a core)
    storage = open_storage(f"sqlite:///{tmp_path / 'study.db'}", heartbeat_interval_s=1, grace_period_s=4)
    settings = PhaseSettings.build(2, max_failed=3)
    study = start_phase(storage, "s", "round-1", settings, direction="minimize")
    claimed = Claimer(storage, study, _slot).claim(settings)
    assert isinstance(claimed, Claimed)
    with HeartbeatThread(storage, claimed.trial_id, 0.5) as beat:
        time.sleep(5.5)  # the main thread does nothing for longer than the grace
        assert stale_trial_ids(storage, study) == []
        fail_trial(storage, study, claimed.trial_id, FailureReason.KILLED, "stale", settings)
        assert beat.ended_elsewhere.wait(30)


def test_a_result_whose_acknowledgement_was_lost_is_told_again_harmlessly(tmp_path: Path) -> None:
    storage, study, settings = _phase(tmp_path)
    claimed = Claimer(storage, study, _slot).claim(settings)
    assert isinstance(claimed, Claimed)
    lossy = LostAck(storage, "set_trial_state_values")
    done = Finished("completed", "", 40, 0.5, 40, None, 1.0)
    Recorder(
        lossy, study, claimed.trial_id, claimed.trial.number, attempt=0, last_step=40, frozen=claimed.trial
    ).record(done, tmp_path, settings)
    (trial,) = study.get_trials()
    assert trial.state.name == "COMPLETE" and trial.value == 0.5


class CountingStorage:
    """A real storage that counts the calls made to each of its methods."""

    def __init__(self, storage: Any) -> None:
        self._storage, self.calls = storage, Counter()

    def __getattr__(self, name: str) -> Any:
        real = getattr(self._storage, name)
        if not callable(real):
            return real

        def call(*args: Any, **kwargs: Any) -> Any:
            self.calls[name] += 1
            return real(*args, **kwargs)

        return call


def test_a_completed_trial_is_finished_in_one_write_after_its_sampler_hook(tmp_path: Path) -> None:
    """``Study.tell(number, value)`` cost five storage round trips per trial (the trial's id
    looked up by its number, the whole trial read, the write, then both reads again for a copy
    nobody read); the result is now one write, with what tell did besides: the sampler's
    ``after_trial`` hook first, and the attributes written before the trial is finished."""
    import optuna

    storage, study, settings = _phase(tmp_path)
    claimed = Claimer(storage, study, _slot).claim(settings)
    assert isinstance(claimed, Claimed)
    hooked: list[tuple[int, str, list[float] | None]] = []

    class Hooked(optuna.samplers.RandomSampler):
        def after_trial(self, study: Any, trial: Any, state: Any, values: Any) -> None:
            hooked.append((trial.number, state.name, values))

    counting = CountingStorage(storage)
    study = optuna.load_study(study_name="s/round-1", storage=counting, sampler=Hooked())
    counting.calls.clear()
    done = Finished("completed", "", 40, 0.5, 40, None, 1.0)
    Recorder(
        counting, study, claimed.trial_id, claimed.trial.number, attempt=0, last_step=40, frozen=claimed.trial
    ).record(done, tmp_path, settings)
    assert hooked == [(claimed.trial.number, "COMPLETE", [0.5])]
    attrs = counting.calls.pop("set_trial_user_attr")
    assert dict(counting.calls) == {"set_trial_state_values": 1}, counting.calls  # nothing read
    (trial,) = study.get_trials()
    assert trial.state.name == "COMPLETE" and trial.value == 0.5
    assert attrs == len({"worker_rss_mb", "train_s", "best_step", "final_step"})
    assert trial.user_attrs["best_step"] == 40  # written before the trial was finished
