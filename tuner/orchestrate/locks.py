"""One lock per phase, held while a worker counts the budget and claims (or fails) a trial.

Counting and claiming must be one step, or two workers that both see "one failure left" each
start a trial and the failure budget is overshot. On SQLite every worker is on this machine, so
a file lock next to the database is enough; on PostgreSQL a session advisory lock makes the same
hold across machines. The lock is held for milliseconds, never while a trial trains.

A PostgreSQL session lock dies with its connection, silently: a server restart, a failover or an
administrator's ``pg_terminate_backend`` can end it while its holder is still inside the critical
section, and another worker then enters too. The holder cannot prevent that, but it can notice:
at the end, the unlock must succeed on the same connection and say it released a lock. If not,
``PhaseLock.lost`` is true and the caller reconciles what it wrote (see ``claim.yield_duplicates``).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any


def _lock_key(name: str) -> int:
    """A stable signed 64-bit key for ``pg_advisory_lock``."""
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
    return path.with_name(f".{path.name}.{_lock_key(name) & 0xFFFFFFFF:08x}.lock")


def has_lock(storage: Any) -> bool:
    """Whether ``phase_lock`` can exclude other workers on ``storage``: only on the databases
    themselves. Optuna's gRPC proxy passes the storage API and nothing else (no SQL, no lock)."""
    return hasattr(storage, "url")


@contextlib.contextmanager
def phase_lock(storage: Any, name: str) -> Iterator[PhaseLock]:
    """Exclusive access to the phase ``name`` of ``storage`` (the ``RDBStorage`` tuner opened).

    A storage without a lock (``has_lock``) holds none, and says so as a lost lock does:
    ``lost`` is set, so the caller reconciles what it wrote (``duplicates.py``).
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
        yield from _postgres_lock(storage, name)
    else:  # in-memory: one process at most, nothing to coordinate
        yield PhaseLock()


def is_postgres(url: str) -> bool:
    from tuner.orchestrate.storage_url import is_postgres as postgres

    return postgres(url)


def _postgres_lock(storage: Any, name: str) -> Iterator[PhaseLock]:
    from sqlalchemy import text

    key = {"key": _lock_key(name)}
    held = PhaseLock()
    connection = storage.engine.connect()
    try:
        connection.execute(text("SELECT pg_advisory_lock(:key)"), key)
        connection.commit()
    except BaseException:
        with contextlib.suppress(Exception):
            connection.close()
        raise
    try:
        yield held
    finally:
        try:
            released = connection.execute(text("SELECT pg_advisory_unlock(:key)"), key).scalar()
            connection.commit()
            held.lost = not released
        except Exception:  # the connection died: the server dropped the lock at some point
            held.lost = True
        if held.lost:
            from tuner.orchestrate.storage import note_retry

            note_retry(RuntimeError(f"phase lock {name} was lost while held"))
        with contextlib.suppress(Exception):
            connection.close()
