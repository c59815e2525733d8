"""Heartbeats of a running trial, from a thread of their own.

A trial is declared dead (``killed``, retried elsewhere) when its heartbeat is older than the
grace period. Beats therefore must not wait behind anything the worker does: a storage call
stuck in ``with_retries`` (waiting out an outage: up to ``$TUNER_STORAGE_OUTAGE_S``, 120 s),
recording an outcome, or joining a child that is stopping. The thread retries a failed beat at
once, a few times, then at the next interval. An outage can outlast the grace (``GRACE_HEARTBEATS``
intervals, 60 s by default) since no worker can beat during it: so no worker looks for stale
trials until a grace has passed after an outage it met (``outage.recovered_within``).

Optuna's heartbeat (``RDBStorage.record_heartbeat``) is a table of the database: through the
gRPC storage proxy, which passes the storage API alone, there is none. So a beat is also a
trial system attribute that changes at every beat (``record_beat``, on every storage), and
``BeatWatch`` calls a trial stale when its beat has not changed for a grace period of the
watching process's own monotonic clock: no clock of two machines is compared.

Looking for stale trials reads every running trial (Optuna's ``_get_stale_trial_ids``, or the
trials' beat attributes). Every worker looking every beat would be W / 5 reads a second of R
trials each: at 8,000 GPUs (W = R = 8,000) 1,600 reads of 8,000 rows a second, more than all the
claims. So each worker looks once per ``stale_check_interval_s``: R beats apart (jittered), so
that the fleet as a whole looks about once a beat, whatever its size. A dead trial is still found
about a grace and a beat after its last beat: whichever worker looks next has seen its beat
before (a watch compares a trial's beat with its own previous look).

Each beat also reads the trial's state: if another worker finished it (it declared us dead
while we were cut off from the storage), ``ended_elsewhere`` is set and the supervisor kills
the child and records nothing: the retry owns the slot now.
"""

from __future__ import annotations

import math
import random
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

from tuner.orchestrate.retry_log import note_retry

HEARTBEAT_ENV = "TUNER_HEARTBEAT_S"
GRACE_ENV = "TUNER_HEARTBEAT_GRACE_S"
DEFAULT_HEARTBEAT_S = 5
GRACE_HEARTBEATS = 12  # a trial is stale after this many missed heartbeats
BEAT_ATTEMPTS = 3
BEAT_RETRY_S = 0.2


BEAT_ATTR = "tuner_beat"  # a trial system attribute, where the storage has no heartbeat table


def stale_check_interval_s(beat_s: float, running: int, rng: random.Random | None = None) -> float:
    """Seconds until this worker looks for stale trials again, with ``running`` trials in the
    phase (R, about the busy workers): ``beat x max(1, R)``, times a jitter of 0.5 to 1.5 so
    that workers started together do not look together (see the module docstring)."""
    return beat_s * max(1, running) * (rng or random).uniform(0.5, 1.5)


class StaleSuspects:
    """A trial found stale is failed only if it is still stale at a later look, at least
    ``confirm_after_s`` (two beats) after the first.

    Why: a storage that stalls for everyone (calls hanging, not failing: seen through the gRPC
    proxy and on PostgreSQL with its connections cut under load, 13 s) keeps every owner from
    beating as long as it keeps the reaper from looking; the reaper's first look after it then
    found live trials a grace old and failed them as ``killed`` (a retry spent on a live trial,
    the slot lost with ``max_retries: 0``). An owner that is alive beats again within a beat or
    two of the storage answering; a dead one does not. ``clock``: for tests.
    """

    def __init__(self, confirm_after_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.confirm_after_s, self.clock = confirm_after_s, clock
        self._since: dict[int, float] = {}  # trial id -> when it was first found stale
        self._unconfirmed = 0  # of those, not confirmed at the last look

    def confirm(self, stale_ids: list[int]) -> list[int]:
        """Of the trial ids found stale now, those found stale long enough ago (and since)."""
        now = self.clock()
        self._since = {trial_id: self._since.get(trial_id, now) for trial_id in stale_ids}
        confirmed = [
            trial_id for trial_id, since in self._since.items() if now - since >= self.confirm_after_s
        ]
        self._unconfirmed = len(self._since) - len(confirmed)
        return confirmed

    @property
    def pending(self) -> bool:
        """Suspects not confirmed yet: look again soon (``confirm_after_s``), not R beats later
        (one confirmed and failed already needs no second look)."""
        return self._unconfirmed > 0


def has_heartbeat_table(storage: Any) -> bool:
    """Optuna's heartbeat (an RDB storage's table); the gRPC proxy passes none."""
    return hasattr(storage, "record_heartbeat")


def record_beat(storage: Any, trial_id: int, *, first: bool = False) -> None:
    """One heartbeat of trial ``trial_id``: Optuna's where the storage has it, and the attribute
    always. Why both: one phase may have workers on the database and workers through the proxy
    (a fleet of two machines, one of each). A worker through the proxy sees attributes only; a
    trial beating in the table alone kept the same (absent) attribute, so it looked stale to them
    a grace after it started, and a live trial longer than the grace was failed and run again.

    ``first``: the claim's beat. Where the table has it, the attribute waits for the next beat
    (a write less a claim; a watcher counts the attribute appearing as a beat)."""
    if has_heartbeat_table(storage):
        storage.record_heartbeat(trial_id)
        if first:
            return
    storage.set_trial_system_attr(trial_id, BEAT_ATTR, uuid.uuid4().hex[:12])


class BeatWatch:
    """Finds the RUNNING trials whose ``BEAT_ATTR`` has not changed for ``grace_s`` seconds, as
    this process saw it: watched from its first look, so a trial is stale a grace after that at
    the earliest (a worker that has just started waits a grace, as after an outage)."""

    def __init__(self, grace_s: float) -> None:
        self.grace_s = grace_s
        self._seen: dict[int, tuple[Any, float]] = {}  # trial number -> (beat, first seen at)

    def stale_numbers(self, running: list[Any]) -> list[int]:
        """The numbers of the trials of ``running`` (RUNNING ``FrozenTrial``s) gone stale."""
        now = time.monotonic()
        seen: dict[int, tuple[Any, float]] = {}
        stale = []
        for trial in running:
            beat = trial.system_attrs.get(BEAT_ATTR)
            before = self._seen.get(trial.number)
            seen[trial.number] = before if before is not None and before[0] == beat else (beat, now)
            if now - seen[trial.number][1] >= self.grace_s:
                stale.append(trial.number)
        self._seen = seen
        return stale


def heartbeat_settings() -> tuple[int, int]:
    """(interval, grace) in seconds.

    ``$TUNER_HEARTBEAT_S`` scales both (tests, impatient users); ``$TUNER_HEARTBEAT_GRACE_S``
    sets the grace alone (at least two intervals). Whole seconds (Optuna's heartbeat takes
    them), rounded up; a value that is not seconds is one line, exit 2 (was a ``ValueError``
    out of the worker: exit 70, "internal error", for a typo in a deployment).
    """
    from tuner.orchestrate.env_settings import seconds_setting

    interval = max(1, math.ceil(seconds_setting(HEARTBEAT_ENV, DEFAULT_HEARTBEAT_S)))
    grace = math.ceil(seconds_setting(GRACE_ENV, interval * GRACE_HEARTBEATS))
    return interval, max(grace, 2 * interval)


class HeartbeatThread:
    """Beats trial ``trial_id`` every ``interval_s`` until ``stop()``; see the module docstring."""

    def __init__(self, storage: Any, trial_id: int, interval_s: float) -> None:
        self.storage, self.trial_id, self.interval_s = storage, trial_id, interval_s
        self.ended_elsewhere = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"heartbeat-{trial_id}", daemon=True)

    def __enter__(self) -> HeartbeatThread:
        """Start beating (once: a claim starts it, the worker's ``with`` then only holds it)."""
        if self._thread.ident is None:
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join()

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            if self._beat():
                self.ended_elsewhere.set()
                return

    def _beat(self) -> bool:
        """One heartbeat; True if the trial turned out to be finished (by someone)."""
        from optuna.exceptions import UpdateFinishedTrialError

        for attempt in range(BEAT_ATTEMPTS):
            if self._stop.is_set():
                return False
            try:
                record_beat(self.storage, self.trial_id)
                return bool(self.storage.get_trial(self.trial_id).state.is_finished())
            except UpdateFinishedTrialError:  # an attribute beat on a trial finished elsewhere
                return True
            except Exception as error:  # a dropped connection: try again shortly
                note_retry(error)
            if attempt < BEAT_ATTEMPTS - 1:
                time.sleep(BEAT_RETRY_S)
        return False
