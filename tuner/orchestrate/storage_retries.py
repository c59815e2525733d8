"""Every storage call goes through ``with_retries``: one policy for what a storage error means.

A phase runs for hours against a storage that will, now and then, be busy (SQLite's lock, an
Optuna ``StorageInternalError``), restart or fail over (PostgreSQL, the gRPC proxy). None of that
is the trial's fault or the user's: a busy storage is tried again a few times, an unreachable
one is waited out (``outage.py``), and only an error that outlasts both is raised. What was
absorbed is never silent: ``retry_log`` counts it, so a test can say it never happens.
"""

from __future__ import annotations

import time
from typing import Any

from tuner.orchestrate import outage
from tuner.orchestrate.retry_log import note_retry

DEFAULT_ATTEMPTS = 6
BACKOFF_S = sum(0.25 * 2**attempt for attempt in range(DEFAULT_ATTEMPTS - 1))  # 7.75 s


def with_retries(
    call: Any, *args: Any, attempts: int | None = None, first_wait_s: float = 0.25, **kwargs: Any
) -> Any:
    """Run a storage call, retrying transient errors; each retry is counted in ``retries`` (and
    logged to ``$TUNER_STORAGE_RETRY_LOG``, ``retry_log``): an error swallowed here must still be
    visible to a test that says it never happens.

    An unreachable server (refused or dropped connections: a restart, a failover) is waited out
    (``outage.py``): tried again, waits doubling from ``first_wait_s`` up to 5 s, until it answers
    or ``$TUNER_STORAGE_OUTAGE_S`` (120 s) have passed since the outage began; then
    ``StorageUnreachableError``, one line, exit 2; so is a gRPC proxy, or the database behind it,
    that fails (``outage.PROXY_FAULT_CODES``). Any other transient error (Optuna's
    ``StorageInternalError``, SQLite's ``OperationalError``) is tried ``DEFAULT_ATTEMPTS`` times
    (``BACKOFF_S``, 7.75 s of waits). ``attempts`` given: that many tries whatever the error, and
    no outage is announced (the live view, which must not block).
    """
    from optuna.exceptions import StorageInternalError
    from sqlalchemy.exc import OperationalError

    tries = 0
    transient = (StorageInternalError, OperationalError, *outage.proxy_error_types())
    while True:
        try:
            result = call(*args, **kwargs)
        except transient as error:
            if outage.proxy_code(error) not in (None, *outage.PROXY_FAULT_CODES):
                raise  # the proxy's answer (not found, a finished trial), not a fault
            tries += 1
            wait_s = min(first_wait_s * 2 ** (tries - 1), outage.MAX_WAIT_S)
            if attempts is None and outage.is_outage(error):
                lasted = outage.note_unreachable(error)
                if lasted >= outage.outage_window_s():
                    raise outage.give_up(error, lasted) from None
                note_retry(error)
                outage.wait(wait_s)
                continue
            if tries >= (attempts or DEFAULT_ATTEMPTS):
                raise
            note_retry(error)
            time.sleep(wait_s)
            continue
        if attempts is None:
            outage.note_reachable()
        return result
