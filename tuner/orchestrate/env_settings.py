"""Settings of the machine, read from the environment: how long to wait out a storage outage
(``outage.py``), how long a claim waits for a phase lock (``locks.py``), how long a call through
the gRPC proxy may take (``grpc_call_timeout_s``).

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


#: how long a call through the gRPC proxy may take before it ends as ``DEADLINE_EXCEEDED``
GRPC_CALL_TIMEOUT_ENV = "TUNER_GRPC_CALL_TIMEOUT_S"
DEFAULT_GRPC_CALL_TIMEOUT_S = 60.0


def grpc_call_timeout_s() -> float:
    """``$TUNER_GRPC_CALL_TIMEOUT_S`` (60 s): a call through the proxy that has no answer by then
    ends as ``DEADLINE_EXCEEDED``, an outage ``with_retries`` waits out (then one line, exit 2).

    Why a deadline on every call (``_optuna_adapter.grpc_storage_proxy``, through Optuna's
    private ``GrpcStorageProxy._setup``): Optuna's client sets none, so a proxy that stops
    answering with its connection open (a process stopped, a machine frozen, a request stuck
    behind the proxy's own lock) held its workers inside a call for ever, silent. A proxy's call
    waits on the database at most ``$TUNER_PHASE_LOCK_WAIT_S`` (30 s) for a lock
    (``locks.bound_lock_waits``): a 60 s deadline lets one such wait finish and ends anything
    longer."""
    return seconds_setting(GRPC_CALL_TIMEOUT_ENV, DEFAULT_GRPC_CALL_TIMEOUT_S) or DEFAULT_GRPC_CALL_TIMEOUT_S
