"""``tuner storage-proxy``: Optuna's gRPC storage proxy in front of tuner's database.

Many workers then hold a gRPC channel to the proxy instead of 2 to 5 PostgreSQL connections each
(``docs/design/scale.md``); the proxy holds ``threads`` connections. It is Optuna's own server
(``run_grpc_proxy_server``'s ``make_server``, via ``_optuna_adapter.grpc_proxy_server``) around
Optuna's cached storage (``optuna.storages.get_storage`` of an ``RDBStorage``), as Optuna's
documentation asks: nothing of tuner's runs inside a request.

The proxy has no TLS and no authentication: whoever reaches its port can read and change every
study. It binds to 127.0.0.1 unless told otherwise (``cli/storage_proxy_cmd.py`` asks for an
explicit flag and says so).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tuner.errors import UsageError
from tuner.orchestrate import _optuna_adapter as adapter
from tuner.orchestrate._process import SignalFlag
from tuner.orchestrate.locks import bound_lock_waits, end_stalled_transactions
from tuner.orchestrate.storage import _scrub, new_rdb_storage, quiet_optuna, redact_url
from tuner.orchestrate.storage_url import Backend, parse_storage_url

LOCAL_HOSTS = ("127.0.0.1", "localhost", "::1")
# One request holds a thread only for its database time (~5-20 ms: benchmarks/fleet.py). A worker
# sends about 0.2 requests/s at rest (a heartbeat every 5 s) and ~45 per trial, so 1,000 workers of
# 1-hour trials send ~210 requests/s, keeping 1 to 4 threads busy on average. One thread per 100
# expected workers leaves room for bursts (trials ending together, a report reading everything);
# each thread holds at most one database connection (the engine's pool is the same size).
WORKERS_PER_THREAD = 100
MIN_THREADS, MAX_THREADS = 8, 64
STOP_GRACE_S = 10.0  # on Ctrl-C, requests in flight get this long to finish
OPEN_TRIES = 6  # opening the database, when the server ends the connection meanwhile (~15 s)


def threads_for(expected_workers: int) -> int:
    """The proxy's thread pool (and database connections) for ``expected_workers`` workers."""
    return max(MIN_THREADS, min(MAX_THREADS, math.ceil(expected_workers / WORKERS_PER_THREAD)))


@dataclass(frozen=True)
class ProxyEvent:
    """What the proxy says as it runs: started, healthy, unhealthy, stopped."""

    kind: str
    text: str


def _backend(url: str, threads: int) -> tuple[Any, Any]:
    """(Optuna's cached storage for the proxy, the engine behind it, for health checks)."""
    import optuna
    from sqlalchemy.exc import SQLAlchemyError

    quiet_optuna()
    parsed = parse_storage_url(url)
    if parsed.backend is Backend.GRPC:
        raise UsageError(f"--storage {url} is itself a proxy: give the database (postgresql://...)")
    if parsed.backend is Backend.JOURNAL:
        raise UsageError(
            f"--storage {url}: the proxy serves a database (postgresql://...); workers share a "
            "journal file through the file system itself (give them journal:///PATH)"
        )
    if parsed.in_memory:
        raise UsageError(f"--storage {redact_url(url)} is an in-memory database: give postgresql://...")
    try:
        rdb = _open_database(
            parsed.url,
            engine_kwargs={
                "pool_size": threads,
                "max_overflow": 0,
                "pool_pre_ping": True,
                "pool_recycle": 3600,
            }
            if parsed.backend is Backend.POSTGRESQL
            else {"connect_args": {"timeout": 60}},
        )
    except (SQLAlchemyError, ImportError, ValueError) as error:
        first = (str(error).strip().splitlines() or [type(error).__name__])[0]
        raise UsageError(f"cannot open storage {redact_url(url)}: {_scrub(first, url)}") from None
    if parsed.backend is Backend.POSTGRESQL:
        end_stalled_transactions(rdb.engine)  # a proxy thread stalled mid-write frees its rows
        bound_lock_waits(rdb.engine)  # and none waits on another session's row for ever
    return optuna.storages.get_storage(rdb), rdb.engine


def _open_database(url: str, engine_kwargs: dict[str, Any]) -> Any:
    """Optuna's ``RDBStorage`` of ``url``; opened again (up to ``OPEN_TRIES`` times) when the
    server ended the connection while it was being opened (a proxy restarted while the database
    cuts connections: an administrator's ``pg_terminate_backend``, a failover). A server that
    does not answer at all is one line at once, as any wrong address is."""
    from optuna.exceptions import StorageInternalError
    from sqlalchemy.exc import OperationalError

    tries = 0
    while True:
        try:
            return new_rdb_storage(url, engine_kwargs=engine_kwargs)
        except (OperationalError, StorageInternalError) as error:
            tries += 1
            if not _ended_by_the_server(error) or tries >= OPEN_TRIES:
                raise
            time.sleep(0.5 * 2 ** (tries - 1))


def _ended_by_the_server(error: BaseException | None) -> bool:
    """The error, or one it was raised from, says the server ended the connection."""
    while error is not None:
        if "terminating connection" in str(error) or "server closed the connection" in str(error):
            return True
        error = error.__cause__ or error.__context__
    return False


def _check_port_free(host: str, port: int) -> None:
    """Refuse a port another process listens on. gRPC binds with SO_REUSEPORT, so a second proxy
    on the same port would start, and the kernel would share connections between the two."""
    import socket

    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # a port in TIME_WAIT is free
        try:
            probe.bind((host, port))
        except OSError as error:
            raise UsageError(
                f"cannot listen on {host}:{port} ({error.strerror or error}): the port is in use, or "
                "the address is not one of this machine's; choose another with --host/--port"
            ) from None


def _ping_ms(engine: Any) -> float:
    from sqlalchemy import text

    started = time.perf_counter()
    with engine.connect() as connection:
        connection.execute(text("SELECT 1"))
    return (time.perf_counter() - started) * 1e3


def serve(
    url: str,
    *,
    host: str,
    port: int,
    threads: int,
    say: Callable[[ProxyEvent], None],
    health_every_s: float = 60.0,
) -> None:
    """Serve ``url`` at ``host:port`` until SIGINT/SIGTERM; ``say`` hears what happens.

    Every ``health_every_s`` it asks the database for ``SELECT 1`` and says how long that took,
    or that the database does not answer (the proxy keeps serving: workers ride out an outage).
    """
    from concurrent.futures import ThreadPoolExecutor

    _check_port_free(host, port)
    storage, engine = _backend(url, threads)
    shown = redact_url(url)
    pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="storage-proxy")
    server = adapter.grpc_proxy_server(storage, host, port, pool)
    with SignalFlag() as signals:
        server.start()
        started = time.monotonic()
        say(
            ProxyEvent(
                "started", f"serving {shown} at grpc://{host}:{port} ({threads} threads); Ctrl-C stops it"
            )
        )
        next_check = started + health_every_s
        while not signals.count:
            signals.sleep(min(1.0, max(0.0, next_check - time.monotonic())))
            if signals.count or time.monotonic() < next_check:
                continue
            next_check = time.monotonic() + health_every_s
            up = _duration(time.monotonic() - started)
            try:
                say(ProxyEvent("healthy", f"up {up}; the database answers in {_ping_ms(engine):.0f} ms"))
            except Exception as error:  # the proxy outlives an outage: workers retry through it
                first = (str(error).strip().splitlines() or [type(error).__name__])[0]
                say(ProxyEvent("unhealthy", f"up {up}; the database does not answer: {_scrub(first, url)}"))
        server.stop(grace=STOP_GRACE_S).wait()
        pool.shutdown(wait=False)
        engine.dispose()
        say(ProxyEvent("stopped", "stopped (requests in flight were let finish)"))


def _duration(seconds: float) -> str:
    minutes, secs = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m" if hours else f"{minutes}m{secs:02d}s"
