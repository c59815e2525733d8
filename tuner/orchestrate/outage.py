"""Riding out a storage outage: a PostgreSQL restart or failover takes tens of seconds.

A storage call that fails because the server cannot be reached is retried until the server is
back or the outage has lasted ``$TUNER_STORAGE_OUTAGE_S`` (120 s by default: a restart or a managed
failover, with room to spare), counted from the first failure of the outage, whichever call or
thread met it. Meanwhile the process says once, in one line, that it waits, and once that the
storage is back. Errors that are not an unreachable server (a local SQLite file's "disk is full",
a constraint violated) keep a short fixed budget of retries: waiting does not fix them.

Through Optuna's gRPC storage proxy the same faults arrive as ``grpc.RpcError``: the proxy
down or restarting is ``UNAVAILABLE``; the database behind it failing is ``UNKNOWN`` (Optuna's
servicer passes no other code for it: the ``StorageInternalError`` raised in the proxy reaches the
client as "Exception calling application: ..."). Both are waited out like an unreachable server.
Every other code is an answer, not a fault (``NOT_FOUND``, ``FAILED_PRECONDITION`` for a finished
trial): it is raised at once.

The window is an environment setting, not a study field: it is a property of the database
service and of the machine a worker runs on, and one study file is shared by machines whose
storage paths differ.
"""

from __future__ import annotations

import sys
import threading
import time
from dataclasses import dataclass

from tuner.errors import UsageError
from tuner.orchestrate.env_settings import seconds_setting

OUTAGE_ENV = "TUNER_STORAGE_OUTAGE_S"
DEFAULT_OUTAGE_S = 120.0
MAX_WAIT_S = 5.0  # between two tries during an outage: the server is noticed back within seconds


class StorageUnreachableError(UsageError):
    """The storage stayed unreachable for the whole outage window: the environment's fault (exit 2)."""


def outage_window_s() -> float:
    """Seconds an outage is waited out (``$TUNER_STORAGE_OUTAGE_S``, default 120)."""
    return seconds_setting(OUTAGE_ENV, DEFAULT_OUTAGE_S)


PROXY_FAULT_CODES = frozenset({"UNAVAILABLE", "DEADLINE_EXCEEDED", "UNKNOWN", "INTERNAL"})


def proxy_error_types() -> tuple[type[BaseException], ...]:
    """``(grpc.RpcError,)`` once a gRPC proxy client was opened, else ``()``: looked up, not
    imported, so that a worker on a database never loads grpc for its error handling."""
    grpc = sys.modules.get("grpc")
    return (grpc.RpcError,) if grpc is not None else ()


def proxy_code(error: BaseException) -> str | None:
    """The gRPC status code's name of an error from the proxy (``UNAVAILABLE``), else None."""
    if not isinstance(error, proxy_error_types()):
        return None
    code = getattr(error, "code", None)
    return getattr(code(), "name", None) if callable(code) else None


def is_storage_error(error: BaseException) -> bool:
    """Whether the storage raised ``error`` (Optuna's, SQLAlchemy's, the proxy's): not the
    trial's fault, so not recorded against it."""
    from optuna.exceptions import StorageInternalError
    from sqlalchemy.exc import SQLAlchemyError

    return isinstance(error, (StorageInternalError, SQLAlchemyError, *proxy_error_types()))


def is_outage(error: BaseException) -> bool:
    """Whether ``error`` says the server cannot be reached (or the connection to it died).

    Optuna wraps SQLAlchemy's error in ``StorageInternalError``; the cause chain is searched.
    An SQLite error never is one: its database is a local file, not a server that comes back.
    Through the proxy: one of ``PROXY_FAULT_CODES`` (see the module docstring).
    """
    import sqlite3

    from sqlalchemy.exc import DBAPIError, InterfaceError, OperationalError

    code = proxy_code(error)
    if code is not None:
        return code in PROXY_FAULT_CODES
    seen: BaseException | None = error
    for _ in range(8):
        if seen is None:
            return False
        if isinstance(seen, sqlite3.Error):
            return False
        if isinstance(seen, DBAPIError):
            if isinstance(seen.orig, sqlite3.Error):
                return False
            if isinstance(seen, OperationalError | InterfaceError) or seen.connection_invalidated:
                return True
        seen = seen.__cause__ or seen.__context__
    return False


def first_line(error: BaseException) -> str:
    """What the driver said, in a few words: ``Connection refused``, not Optuna's wrapper
    ("An exception is raised during the commit ... e.g. exceeding max length")."""
    from sqlalchemy.exc import DBAPIError

    code = proxy_code(error)
    if code is not None:  # "Exception calling application: <the proxy's storage error>"
        details = (getattr(error, "details", lambda: "")() or "").strip().splitlines() or [""]
        said = details[0].removeprefix("Exception calling application: ").split(";")[0]
        return f"storage proxy: {code.lower()}" + (f", {said[:120]}" if said else "")
    seen: BaseException | None = error
    for _ in range(8):
        if seen is None or isinstance(seen, DBAPIError):
            break
        seen = seen.__cause__ or seen.__context__
    source = seen.orig if isinstance(seen, DBAPIError) and seen.orig is not None else (seen or error)
    text = (str(source).strip().splitlines() or [type(source).__name__])[0]
    return text.rsplit(": ", 1)[-1].strip()[:160] or type(source).__name__


@dataclass
class _State:
    since: float | None = None  # time.time() of the current outage's first failure
    started: float | None = None  # the same, time.monotonic()
    recovered_at: float | None = None  # time.monotonic() the last outage ended
    lasted: float = 0.0  # seconds the last outage lasted


_state = _State()
_lock = threading.Lock()


def note_unreachable(error: BaseException) -> float:
    """Record a failed call of an outage (announcing a new outage); return its age in seconds."""
    with _lock:
        if _state.started is None:
            _state.since, _state.started = time.time(), time.monotonic()
            window = outage_window_s()
            warn_line(
                f"storage unreachable since {time.strftime('%H:%M:%S', time.localtime(_state.since))} "
                f"({first_line(error)}); waiting up to {window:g} s for it to come back (${OUTAGE_ENV})"
            )
        return time.monotonic() - _state.started


def note_reachable() -> None:
    """A call succeeded: an outage in progress is over."""
    if _state.started is None:
        return
    with _lock:
        if _state.started is None:
            return
        lasted = time.monotonic() - _state.started
        _state.since = _state.started = None
        _state.recovered_at, _state.lasted = time.monotonic(), lasted
    warn_line(f"storage reachable again after {lasted:.0f} s")


def recovered_within(seconds: float, *, longer_than: float) -> bool:
    """Whether an outage of more than ``longer_than`` s ended less than ``seconds`` ago (or one is
    going on). A short drop (a killed connection, retried in a second) does not count."""
    if _state.started is not None:
        return True
    return (
        _state.recovered_at is not None
        and _state.lasted > longer_than
        and time.monotonic() - _state.recovered_at < seconds
    )


def wait(seconds: float) -> None:
    """Sleep between two tries during an outage, but end at once (``KeyboardInterrupt``: exit 130)
    when the process was asked to stop: a counted SIGINT/SIGTERM (tuner's ``SignalFlag`` handler,
    found as the installed handler) must not wait out a two-minute outage first."""
    import signal

    deadline = time.monotonic() + seconds
    main = threading.current_thread() is threading.main_thread()
    while (left := deadline - time.monotonic()) > 0:
        if main and any(
            getattr(getattr(signal.getsignal(sig), "__self__", None), "count", 0)
            for sig in (signal.SIGINT, signal.SIGTERM)
        ):
            raise KeyboardInterrupt
        time.sleep(min(0.1, left))


def give_up(error: BaseException, lasted_s: float, url: str | None = None) -> StorageUnreachableError:
    """The line that ends an outage waited out too long; ``url`` (redacted: never a password)
    names the storage when the error does not (a connection refused says no host). The outage
    is over for this process: a later call (a library user's, a test's) starts a new one."""
    with _lock:
        _state.since = _state.started = None
    since = time.strftime("%H:%M:%S", time.localtime(time.time() - lasted_s))
    which = f"storage {url}" if url else "storage"
    return StorageUnreachableError(
        f"{which} unreachable since {since} ({first_line(error)}), longer than ${OUTAGE_ENV} "
        f"({outage_window_s():g} s): run the same command again once it is back (finished trials are kept)"
    )


def warn_line(line: str) -> None:
    """``warning: LINE`` on stderr (a worker's log, or the terminal of ``tuner worker``)."""
    print(f"warning: {line}", file=sys.stderr, flush=True)
