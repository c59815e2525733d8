"""The wall clock tuner stamps time with, and the one place a test can skew it.

Machines disagree about the time (a worker 5 minutes fast is common without NTP), so no budget
decision compares one machine's clock with a time another machine stamped: ``timeout_h`` is
measured on the storage's own clock (``tuner.orchestrate.phase.storage_clock``) and
``stop_after_no_improvement`` orders trials by number. What is still stamped locally (status
files, progress views) is for display on the machine that wrote it.

``TUNER_TEST_CLOCK_OFFSET_S`` (tests only) shifts this clock, and the times Optuna stamps on the
trials this process records (``tuner.orchestrate._optuna_adapter.skew_optuna_stamps``), by that
many seconds: a machine whose clock is off, without changing the real one.
"""

from __future__ import annotations

import os
import time

OFFSET_ENV = "TUNER_TEST_CLOCK_OFFSET_S"


def offset_s() -> float:
    text = os.environ.get(OFFSET_ENV, "")
    return float(text) if text else 0.0


def now() -> float:
    """``time.time()`` as this machine's clock reads it (a test's offset included)."""
    return time.time() + offset_s()
