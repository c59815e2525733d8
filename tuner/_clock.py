"""The wall clock tuner stamps time with, and the one place a test can skew it.

Machines disagree about the time (a worker 5 minutes fast is common without NTP), so no budget
decision compares one machine's clock with a time another machine stamped: ``timeout_h`` is
measured on the storage's own clock (``tuner.orchestrate.phase.storage_clock``) and
``stop_after_no_improvement`` orders trials by number. What is still stamped locally (status
files, progress views) is for display on the machine that wrote it.

``TUNER_TEST_CLOCK_OFFSET_S`` (tests only) shifts this clock, and the times Optuna stamps on the
trials this process records, by that many seconds: a machine whose clock is off, without
changing the real one.
"""

from __future__ import annotations

import os
import time
from datetime import datetime, timedelta
from typing import Any

OFFSET_ENV = "TUNER_TEST_CLOCK_OFFSET_S"


def offset_s() -> float:
    text = os.environ.get(OFFSET_ENV, "")
    return float(text) if text else 0.0


def now() -> float:
    """``time.time()`` as this machine's clock reads it (a test's offset included)."""
    return time.time() + offset_s()


def skew_optuna_stamps() -> None:
    """Make Optuna's trial stamps (``datetime_start``/``datetime_complete``) use this clock when
    a test sets an offset: what a worker on a machine with a wrong clock would write."""
    offset = offset_s()
    if not offset:
        return
    from optuna.storages._rdb import storage as rdb

    class _SkewedDatetime(datetime):
        @classmethod
        def now(cls, tz: Any = None) -> Any:  # type: ignore[override]
            return datetime.now(tz) + timedelta(seconds=offset)

    rdb.datetime = _SkewedDatetime  # type: ignore[misc]
