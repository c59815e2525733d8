"""One lock per phase, held while a worker counts the budget and claims (or fails) a trial.

Counting and claiming must be one step, or two workers that both see "one failure left" each
start a trial and the failure budget is overshot. On SQLite every worker is on this machine, so
a file lock next to the database is enough; on PostgreSQL an advisory lock makes the same hold
across machines. The lock is held for milliseconds, never while a trial trains.

A PostgreSQL advisory lock dies with its connection, silently: a server restart, a failover or an
administrator's ``pg_terminate_backend`` can end it while its holder is still inside the critical
section, and another worker then enters too. The holder cannot prevent that, but it can notice:
at the end, the commit that releases it must succeed on the same connection. If not,
``PhaseLock.lost`` is true and the caller reconciles what it wrote (see ``claim.yield_duplicates``).

A holder can also stop without letting go: a worker frozen (SIGSTOP, a VM paused, a machine hung
with its TCP connection open) inside the critical section keeps a session lock for as long as
its connection lives, hours for a hung machine. So a claim or a failure waits at most
``$TUNER_PHASE_LOCK_WAIT_S`` (30 s) on PostgreSQL, then goes on without the lock, as through the
gRPC proxy: reconciled, never wrong (``claim.py``). On SQLite the lock stays: there the start of a
trial is no compare-and-set (no ``SELECT ... FOR UPDATE``), and every holder is on this machine.

The same freeze can land inside any write, not only inside the lock: a worker stopped between
two statements of a transaction keeps the row locks it took. Writing an attribute of a trial
locks the trial's row against ``SELECT ... FOR UPDATE`` (the foreign key), so the worker that
finds the trial stale and fails it would wait on that row for as long as the freeze lasts: it
did, in CI, for the whole 300 s of a test. ``end_stalled_transactions`` has the server end a
tuner session that sits in a transaction for the same ``$TUNER_PHASE_LOCK_WAIT_S`` (tuner's
transactions last milliseconds): its locks go with it, and the thawed worker's next call finds
the connection gone and is retried on a new one (``storage_retries.with_retries``). For the same
reason the phase lock itself is a transaction lock held in an open transaction: a holder frozen
inside the critical section loses it after that time, not only the others' patience.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tuner.orchestrate.retry_log import note_retry


def lock_key(name: str) -> int:
    """A stable signed 64-bit key for ``pg_advisory_xact_lock``."""
    return int.from_bytes(hashlib.sha256(name.encode()).digest()[:8], "big", signed=True)


@dataclass
class PhaseLock:
    """What a holder learns when it lets go: ``lost`` if mutual exclusion may have been broken."""

    lost: bool = False


class LostLocks:
    """Remembers whether any of several holds of the lock was lost (each try of a retried call).

    A try that fails with a storage error may have lost the lock *and* written something before
    failing; the next try, holding a good lock, cannot tell. ``watch`` records every hold.
    """

    def __init__(self) -> None:
        self.lost = False

    def __bool__(self) -> bool:
        return self.lost

    @contextlib.contextmanager
    def watch(self, lock: contextlib.AbstractContextManager[PhaseLock]) -> Iterator[PhaseLock]:
        held: PhaseLock | None = None
        try:
            with lock as held:
                yield held
        finally:
            if held is not None and held.lost:
                self.lost = True


def sqlite_lock_path(url: str, name: str) -> Path | None:
    """The lock file of phase ``name``: the same however the URL spells the database's path."""
    from tuner.orchestrate.storage_url import sqlite_file

    database = sqlite_file(url)
    if database is None:
        return None
    path = database.resolve()
    return path.with_name(f".{path.name}.{lock_key(name) & 0xFFFFFFFF:08x}.lock")


def has_lock(storage: Any) -> bool:
    """Whether ``phase_lock`` can exclude other workers on ``storage``: only on the databases
    themselves. Optuna's gRPC proxy passes the storage API and nothing else (no SQL, no lock)."""
    return hasattr(storage, "url")


LOCK_WAIT_ENV = "TUNER_PHASE_LOCK_WAIT_S"
DEFAULT_LOCK_WAIT_S = 30.0  # a claim holds it for milliseconds; 32 workers queue for a second or two


def lock_wait_s() -> float:
    """How long a claim waits for a PostgreSQL phase lock held elsewhere (see the module docstring)."""
    from tuner.orchestrate.env_settings import seconds_setting

    return seconds_setting(LOCK_WAIT_ENV, DEFAULT_LOCK_WAIT_S)


@contextlib.contextmanager
def phase_lock(storage: Any, name: str, *, bounded: bool = False) -> Iterator[PhaseLock]:
    """Exclusive access to the phase ``name`` of ``storage`` (the ``RDBStorage`` tuner opened).

    A storage without a lock (``has_lock``) holds none, and says so as a lost lock does:
    ``lost`` is set, so the caller reconciles what it wrote (``duplicates.py``). ``bounded``:
    for a caller that can reconcile (a claim, a failure), a PostgreSQL lock held elsewhere past
    ``lock_wait_s()`` is given up the same way; others (a compare-and-set of the plan) wait.
    """
    if not has_lock(storage):
        yield PhaseLock(lost=True)
        return
    url = str(storage.url)
    lock_path = sqlite_lock_path(url, name)
    if lock_path is not None:
        with lock_path.open("a+") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            try:
                yield PhaseLock()
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)
    elif is_postgres(url):
        yield from _postgres_lock(storage, name, lock_wait_s() if bounded else None)
    else:  # in-memory: one process at most, nothing to coordinate
        yield PhaseLock()


def is_postgres(url: str) -> bool:
    from tuner.orchestrate.storage_url import is_postgres as postgres

    return postgres(url)


def end_stalled_transactions(engine: Any) -> None:
    """Have the PostgreSQL server end each session of ``engine`` that sits idle inside a
    transaction for ``lock_wait_s()`` (see the module docstring)."""
    _set_on_each_connection(engine, "idle_in_transaction_session_timeout")


def bound_lock_waits(engine: Any) -> None:
    """Have each statement of ``engine``'s sessions wait at most ``lock_wait_s()`` for a row lock
    another session holds, then fail (``lock_timeout``), instead of waiting for as long as that
    session lives.

    For the gRPC proxy: Optuna's cached storage holds one lock of its own, for every study, while
    some of its database calls run (``set_trial_param``, reading a study's new trials). One such
    call waiting on a trial's row, locked by a session whose client is frozen or gone (the server
    keeps that session for as long as its TCP connection looks alive), held up every request of
    every study behind it. Failed, the call is an error the worker retries (``with_retries``);
    the proxy's lock is free again at once."""
    _set_on_each_connection(engine, "lock_timeout")


def _set_on_each_connection(engine: Any, setting: str) -> None:
    """``SET setting = lock_wait_s()`` on each new connection of ``engine`` (``SET``, not a
    startup option: a connection pooler may refuse those); the pooled connections made before
    (while Optuna created its tables) are dropped."""
    from sqlalchemy import event

    timeout_ms = max(1000, round(lock_wait_s() * 1000))

    def on_connect(dbapi_connection: Any, _record: Any) -> None:
        autocommit = dbapi_connection.autocommit
        dbapi_connection.autocommit = True  # or the pool's rollback undoes the SET
        cursor = dbapi_connection.cursor()
        try:
            cursor.execute(f"SET {setting} = {timeout_ms}")
        finally:
            cursor.close()
            dbapi_connection.autocommit = autocommit

    event.listen(engine, "connect", on_connect)
    engine.dispose()


def _postgres_lock(storage: Any, name: str, wait_s: float | None) -> Iterator[PhaseLock]:
    """``pg_advisory_xact_lock`` in a transaction left open while the caller works on other
    connections: a holder that stalls there is ended by the server (``end_stalled_transactions``),
    and the lock with it; the commit that ends the hold tells whether it survived."""
    from sqlalchemy import text

    key = {"key": lock_key(name)}
    held = PhaseLock()
    connection = storage.engine.connect()
    try:
        if wait_s is None:
            connection.execute(text("SELECT pg_advisory_xact_lock(:key)"), key)
            got = True
        else:
            got = lock_within(connection, key, wait_s)
    except BaseException:
        with contextlib.suppress(Exception):
            connection.close()
        raise
    if not got:
        with contextlib.suppress(Exception):
            connection.close()
        note_retry(RuntimeError(f"phase lock {name} held elsewhere for {wait_s:g} s: going on without it"))
        yield PhaseLock(lost=True)
        return
    try:
        yield held
    finally:
        try:  # the lock ends with the transaction; a session ended meanwhile fails the commit
            # (psycopg raises AdminShutdown or IdleInTransactionSessionTimeout there: no probe first)
            connection.commit()
        except Exception:  # the connection died: the server dropped the lock at some point
            held.lost = True
        if held.lost:
            note_retry(RuntimeError(f"phase lock {name} was lost while held"))
        with contextlib.suppress(Exception):
            connection.close()


def lock_within(connection: Any, key: dict[str, int], wait_s: float) -> bool:
    """``pg_advisory_xact_lock`` under a ``lock_timeout`` of ``wait_s``: queued in the server's
    lock queue like an unbounded wait (first come, first served: polling with
    ``pg_try_advisory_lock`` instead let 32 workers starve one another, p99 of a claim 9.7 s),
    False when the wait runs out (SQLSTATE 55P03, lock_not_available). The transaction stays
    open, holding the lock (``_postgres_lock``)."""
    from sqlalchemy import text
    from sqlalchemy.exc import OperationalError

    try:
        # SET LOCAL: this transaction only, so the pooled connection keeps no timeout after it
        connection.execute(text(f"SET LOCAL lock_timeout = '{max(1, round(wait_s * 1000))}ms'"))
        connection.execute(text("SELECT pg_advisory_xact_lock(:key)"), key)
        return True
    except OperationalError as error:
        code = getattr(error.orig, "sqlstate", None) or getattr(error.orig, "pgcode", None)
        if code != "55P03":
            raise
        connection.rollback()
        return False
