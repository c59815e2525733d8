"""Storage errors that were absorbed (retried, or a lock given up) rather than raised.

An error swallowed by a retry must still be visible to a test that says it never happens: each
one is counted here, in this process, and appended to ``$TUNER_STORAGE_RETRY_LOG`` when set.
A module of its own, below ``storage`` and ``locks``, so both can note one without importing
each other.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass

RETRY_LOG_ENV = "TUNER_STORAGE_RETRY_LOG"  # a file each retried storage error is appended to


@dataclass
class RetryCounts:
    """Storage errors ``with_retries`` absorbed in this process, by kind (tests read them)."""

    total: int = 0
    locked: int = 0  # SQLite's "database is locked": should never happen (WAL, busy timeout)
    # a study read again whole because the gRPC proxy's client cache had missed a trial
    # (``_optuna_adapter.grpc_storage_proxy``): not an error, but a full read each time
    reread: int = 0


retries = RetryCounts()


def note_retry(error: BaseException) -> None:
    """Count (and log to ``$TUNER_STORAGE_RETRY_LOG``) a storage error that will be retried."""
    retries.total += 1
    locked = "database is locked" in str(error)
    retries.locked += locked
    _log(("locked: " if locked else "retry: ") + str(error).splitlines()[0][:200])


def note_reread(study_id: int, numbers: int, last: int) -> None:
    """Count (and log to ``$TUNER_STORAGE_RETRY_LOG``) a study read again whole: the gRPC proxy's
    client cache held ``numbers`` trials up to number ``last`` (a gap: it had missed one). The
    fleet benchmark counts these to show what the re-read costs a large fleet."""
    retries.reread += 1
    _log(f"reread: study {study_id}: {numbers} trials cached up to number {last}")


def _log(line: str) -> None:
    """Append ``line`` to ``$TUNER_STORAGE_RETRY_LOG`` when it is set (never fails)."""
    log = os.environ.get(RETRY_LOG_ENV)
    if log:
        with contextlib.suppress(OSError), open(log, "a") as handle:
            handle.write(line + "\n")
