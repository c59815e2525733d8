"""Settings of the machine, read from the environment: how long to wait out a storage outage
(``outage.py``), how long a claim waits for a phase lock (``locks.py``).

They are environment settings, not study fields: they belong to the database service and the
machine a worker runs on, and one study file is shared by machines that differ. A value that
is not what the setting takes is one line (exit 2), never a silent default: a typo in a
deployment must show.
"""

from __future__ import annotations

import os

from tuner.errors import UsageError


def seconds_setting(name: str, default: float) -> float:
    """``$name`` as a number of seconds >= 0 (surrounding spaces allowed), ``default`` when unset."""
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not value >= 0:  # also NaN
        raise UsageError(f"${name}={raw!r}: expected a number of seconds >= 0 (default {default:g})")
    return value
