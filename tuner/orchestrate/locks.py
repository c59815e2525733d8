"""One lock per phase, held while a worker counts the budget and claims a trial.

Counting and claiming must be one step, or two workers that both see "one failure left" each
start a trial and the failure budget is overshot. On SQLite every worker is on this machine, so
a file lock next to the database is enough; on PostgreSQL an advisory lock makes the same hold
across machines. The lock is held for milliseconds, never while a trial trains.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any


def _lock_key(name: str) -> int:
    """A stable signed 64-bit key for ``pg_advisory_lock``."""
    return int.from_bytes(hashlib.sha256(name.encode()).digest()[:8], "big", signed=True)


@contextlib.contextmanager
def phase_lock(storage: Any, name: str) -> Iterator[None]:
    """Exclusive access to the phase ``name`` of ``storage`` (an Optuna ``RDBStorage``)."""
    storage = getattr(storage, "_backend", storage)  # optuna wraps RDBStorage in a cache
    url = str(getattr(storage, "url", ""))
    if url.startswith("sqlite:///") and url != "sqlite:///:memory:":
        path = Path(url.split("sqlite:///", 1)[1])
        lock_path = path.with_name(f".{path.name}.{_lock_key(name) & 0xFFFFFFFF:08x}.lock")
        with lock_path.open("a+") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)
    elif url.startswith("postgresql"):
        from sqlalchemy import text

        with storage.engine.connect() as connection:
            connection.execute(text("SELECT pg_advisory_lock(:key)"), {"key": _lock_key(name)})
            connection.commit()
            try:
                yield
            finally:
                connection.execute(text("SELECT pg_advisory_unlock(:key)"), {"key": _lock_key(name)})
                connection.commit()
    else:  # in-memory or another backend: one process at most, nothing to coordinate
        yield
