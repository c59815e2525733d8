"""The study's storage: an SQLite file by default, PostgreSQL to share a study between machines.

Settings that remove the classic complaints: SQLite in WAL mode with a long busy timeout, so
several local workers never see "database is locked"; PostgreSQL with connection pre-ping, so
a connection dropped by the server while a trial trained for an hour is replaced, not fatal.
A URL's password never appears in output, logs, errors or saved files: use ``redact_url``.
Calls on a storage once open go through ``storage_retries.with_retries``.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import random
import sqlite3
import time
import weakref
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tuner.errors import UsageError
from tuner.orchestrate import outage
from tuner.orchestrate.locks import end_stalled_transactions
from tuner.orchestrate.retry_log import note_retry
from tuner.orchestrate.sqlite_check import DamagedStorageError, check_sqlite_file, damage_of
from tuner.orchestrate.storage_url import Backend, default_storage_url, parse_storage_url

SQLITE_BUSY_TIMEOUT_S = 60
STORAGE_ENV = "TUNER_STORAGE"
OPEN_ATTEMPTS = 4
# a process that lost the race to create Optuna's tables tries again this often, one creator at
# a time (``_creation_lock``): on a fresh database under load (CI's first run on a new machine)
# two retries at fixed half seconds were not enough, and the proxy failed to start
CREATION_ATTEMPTS = 6
SCHEMA_LOCK_NAME = "tuner: creating Optuna's tables"  # PostgreSQL advisory lock (``locks.lock_key``)
SCHEMA_LOCK_WAIT_S = 20


def _transient(error: BaseException) -> bool:
    from sqlalchemy.exc import OperationalError

    return isinstance(error, OperationalError) or type(error).__name__ == "StorageInternalError"


def _unreachable(error: BaseException) -> bool:
    """A server that refuses connections will not accept one in a second: say so at once."""
    return "connection refused" in str(error).lower() or "could not translate host" in str(error).lower()


def redact_url(url: str) -> str:
    """``postgresql://user:secret@host/db`` -> ``postgresql://user:***@host/db``, and
    ``?password=secret`` -> ``?password=***``: the spec's one redactor, so every place that shows a
    URL (run folders, reproduce commands, headers, errors) masks the same forms."""
    from tuner.spec import redact_storage_url

    return redact_storage_url(url)


def _scrub(text: str, url: str) -> str:
    """``text`` (e.g. a driver's error) without the URL's password, wherever it appears."""
    from urllib.parse import parse_qsl, urlsplit

    from sqlalchemy.engine import make_url

    secrets = {value for key, value in parse_qsl(urlsplit(url).query) if key.lower() == "password"}
    with contextlib.suppress(Exception):  # a URL SQLAlchemy cannot parse has no password it would use
        secrets.add(make_url(url).password or "")
    text = text.replace(url, redact_url(url))
    for secret in sorted(filter(None, secrets), key=len, reverse=True):
        text = text.replace(str(secret), "***")
    return text


def resolve_storage_url(configured: str | None, output_dir: Path, study_name: str) -> str:
    """``$TUNER_STORAGE`` beats the study file's ``storage``, which beats the storage the study's
    folder remembers (``storage_pointer``: a phase run with ``--storage``), which beats the
    SQLite default. The SQLite default wins over the folder's pointer when its file exists."""
    from tuner.orchestrate.storage_pointer import remembered_storage

    return (
        os.environ.get(STORAGE_ENV)
        or configured
        or remembered_storage(output_dir, study_name)
        or default_storage_url(output_dir, study_name)
    )


def _engine_kwargs(url: str) -> dict[str, Any]:
    if parse_storage_url(url).backend is Backend.SQLITE:
        return {"connect_args": {"timeout": SQLITE_BUSY_TIMEOUT_S}}
    return {"pool_pre_ping": True, "pool_recycle": 3600}


def _prepare_sqlite(path: Path) -> None:
    """Switch the file to WAL (persistent: once per database file)."""
    with sqlite3.connect(path, timeout=SQLITE_BUSY_TIMEOUT_S) as connection:
        connection.execute("PRAGMA journal_mode=WAL")


def quiet_optuna() -> None:
    """Silence Optuna's own log lines ("A new study created…") and its experimental-feature
    warnings (heartbeats, the gRPC proxy): our commands say what happens in their own words."""
    import warnings

    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)


def open_storage(
    url: str,
    *,
    heartbeat_interval_s: int | None = None,
    grace_period_s: int | None = None,
    wait_out_outage: bool = False,
    **callbacks: Any,
) -> Any:
    """An ``optuna.storages.RDBStorage`` for ``url``; connection errors become one redacted line.

    A server that refuses connections is said at once (a wrong host or port, typed by a user who
    waits for the answer), unless ``wait_out_outage``: a worker, which starts while the server may
    be restarting, waits it out as it would mid-phase (``outage.py``).

    Side effect: Optuna is quieted (``quiet_optuna``).
    """
    from sqlalchemy.exc import SQLAlchemyError

    quiet_optuna()

    parsed = parse_storage_url(url)
    if parsed.backend is Backend.GRPC and parsed.grpc_address is not None:
        # no lock and no heartbeat table passes the proxy: claims reconcile (``duplicates.py``)
        # and trials beat through an attribute (``heartbeat.record_beat``)
        return open_grpc_proxy(*parsed.grpc_address, wait_out_outage=wait_out_outage)
    if parsed.journal_file is not None:  # the same: no lock, no heartbeat table
        return open_journal(parsed.journal_file)
    if parsed.in_memory:
        raise UsageError(
            f"storage {redact_url(url)} is an in-memory SQLite database, which every process would "
            f"see empty: give a file, sqlite:///PATH, or postgresql://USER@HOST/DB"
        )
    if parsed.sqlite_file is not None:
        check_sqlite_file(parsed.sqlite_file)
    url = parsed.url
    attempt = -1
    while True:
        attempt += 1
        try:
            storage = new_rdb_storage(
                url,
                engine_kwargs=_engine_kwargs(url),
                heartbeat_interval=heartbeat_interval_s,
                grace_period=grace_period_s,
                **callbacks,
            )
            if parse_storage_url(url).backend is Backend.SQLITE:
                _commit_without_fsync(storage.engine)
            else:  # a worker frozen mid-write must not hold its row locks for the freeze
                end_stalled_transactions(storage.engine)
            if wait_out_outage:
                outage.note_reachable()
            return storage
        except (SQLAlchemyError, sqlite3.Error, ImportError, ValueError) as error:
            if wait_out_outage and outage.is_outage(error):
                lasted = outage.note_unreachable(error)
                if lasted >= outage.outage_window_s():
                    raise outage.give_up(error, lasted, redact_url(url)) from None
                note_retry(error)
                outage.wait(min(0.5 * 2**attempt, outage.MAX_WAIT_S))
                continue
            if attempt < OPEN_ATTEMPTS - 1 and _transient(error) and not _unreachable(error):
                note_retry(error)
                time.sleep(0.5 * 2**attempt)  # a connection dropped while opening (a failover)
                continue
            if parsed.sqlite_file is not None and damage_of(error):
                raise DamagedStorageError(parsed.sqlite_file.resolve(), str(damage_of(error))) from None
            first_line = (str(error).strip().splitlines() or [type(error).__name__])[0]
            raise UsageError(f"cannot open storage {redact_url(url)}: {_scrub(first_line, url)}") from None


# every database engine this process opened (``close_open_storages``); weak: one a command drops
# goes as it would
_OPEN_ENGINES: weakref.WeakSet[Any] = weakref.WeakSet()


def track_engine(engine: Any) -> Any:
    """Remember ``engine`` so that ``close_open_storages`` closes it; returns it."""
    _OPEN_ENGINES.add(engine)
    return engine


def close_open_storages() -> None:
    """Close the connections of every database engine this process opened.

    Why: a command ends by freezing its objects instead of letting the interpreter collect them
    (``tuner.cli.app``: a third of a second at every exit). An engine kept by a cache would then
    never close its connections, and SQLite folds its write-ahead log back into the database file
    when the last connection closes: without this, ``study.db-wal`` stayed beside the file, and a
    copy of ``study.db`` alone missed the last trials. A connection that fails to close is left to
    the operating system (the process is exiting)."""
    for engine in list(_OPEN_ENGINES):
        with contextlib.suppress(Exception):
            engine.dispose()


# Digests (a URL may hold a password: not kept as is) of the storage URLs this process has
# opened, so their schema checked against its Optuna. Optuna checks it again at every open for
# nothing (its compatibility check loads every migration script of Alembic: 27 of the 28 ms an
# open of an SQLite storage takes here, against 5 ms without). Its tables are still made if
# missing (a database deleted and made again), by this process's Optuna, so compatible.
_SCHEMA_CHECKED: set[str] = set()


def new_rdb_storage(url: str, **kwargs: Any) -> Any:
    """``optuna.storages.RDBStorage(url, **kwargs)``, safe beside other processes creating it.

    On an empty database each process creates Optuna's tables; two doing it at once fail
    (UniqueViolation on PostgreSQL's ``pg_type``, "table already exists"). A process that lost
    that race tries again, one creator at a time (``_creation_lock``): the tables exist then.
    Seen in CI's first run on a new machine: ``tuner storage-proxy`` (which built its storage
    without this) refused to start, "duplicate key value violates unique constraint".
    """
    import hashlib

    import optuna
    from sqlalchemy.exc import IntegrityError, SQLAlchemyError

    serialised = False  # the tables are created one process at a time (after a lost race)
    digest = hashlib.sha256(url.encode()).hexdigest()
    if digest in _SCHEMA_CHECKED:
        kwargs = {"skip_compatibility_check": True, **kwargs}
    for attempt in range(CREATION_ATTEMPTS):
        try:
            with _creation_lock(url, serialised=serialised):
                storage = optuna.storages.RDBStorage(url, **kwargs)
            track_engine(storage.engine)
            _SCHEMA_CHECKED.add(digest)
            return storage
        except SQLAlchemyError as error:
            lost_race = isinstance(error, IntegrityError) or "already exists" in str(error)
            if not lost_race or attempt == CREATION_ATTEMPTS - 1:
                raise
            note_retry(error)
            serialised = True
            time.sleep(random.uniform(0.05, 0.5))
    raise AssertionError("unreachable")


def open_journal(path: Path) -> Any:
    """Optuna's ``JournalStorage`` on the file ``path`` (created with its folder), with a symlink
    lock (which works on NFS) that every process appending to it, on any machine that mounts
    it, takes for the append: Optuna's, with an owner (``journal_lock``: why)."""
    from optuna.storages import JournalStorage
    from optuna.storages.journal import JournalFileBackend

    from tuner.orchestrate.journal_lock import OwnedSymlinkLock

    _storage_folder(path)
    with _environment_errors(path):
        try:
            return JournalStorage(JournalFileBackend(str(path), lock_obj=OwnedSymlinkLock(str(path))))
        except (ValueError, KeyError, TypeError) as error:  # its replay met a line it cannot read
            raise UsageError(
                f"storage journal:///{path}: {path} is not an Optuna journal, or is damaged "
                f"({type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''})"
            ) from None


def _commit_without_fsync(engine: Any) -> None:
    """``synchronous=NORMAL``: the standard setting with WAL. A commit no longer waits for an
    fsync (a trial makes a dozen), the file can never be corrupted, and nothing committed is lost
    when a process dies (kill -9, OOM); only a power cut may undo the last commits.
    """
    from sqlalchemy import event

    def on_connect(connection: Any, record: Any) -> None:
        connection.execute("PRAGMA synchronous=NORMAL")

    event.listen(engine, "connect", on_connect)
    engine.dispose()  # connections opened while creating the storage reconnect with the pragma


def _storage_folder(path: Path) -> Path:
    """The database's folder, created if missing; a path the machine cannot hold is one line."""
    with _environment_errors(path):
        path.parent.mkdir(parents=True, exist_ok=True)
    return path.parent


@contextlib.contextmanager
def _environment_errors(path: Path) -> Iterator[None]:
    """An ``OSError`` on the database's folder is the environment's (exit 2), never tuner's bug."""
    try:
        yield
    except (FileExistsError, NotADirectoryError):
        blocking = next((p for p in path.parents if p.exists() and not p.is_dir()), path.parent)
        raise UsageError(f"cannot create the storage {path}: {blocking} is a file, not a folder") from None
    except OSError as error:
        raise UsageError(f"cannot create the storage {path}: {error.strerror or error}") from None


@contextlib.contextmanager
def _creation_lock(url: str, *, serialised: bool = False) -> Iterator[None]:
    """One process at a time creates Optuna's tables (else "table already exists" races).

    SQLite: always (a file lock beside the database: cheap). PostgreSQL: once an attempt lost that
    race (``serialised``), under a session advisory lock on a connection of its own; the first
    attempt takes none, so a database whose tables exist (every open but the first ever) costs no
    extra connection. Measured: 8 processes creating the tables of an empty database at the same
    instant, plain ``RDBStorage``: 20 of 24 failed (UniqueViolation on ``pg_type``, DuplicateTable).
    """
    parsed = parse_storage_url(url)
    path = parsed.sqlite_file
    if path is None:
        if serialised and parsed.backend is Backend.POSTGRESQL:
            with _postgres_schema_lock(url):
                yield
        else:
            yield
        return
    folder = _storage_folder(path)
    with _environment_errors(path):
        handle = (folder / f".{path.name}.init.lock").open("a+")
    with handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            _prepare_sqlite(path)
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


@contextlib.contextmanager
def _postgres_schema_lock(url: str) -> Iterator[None]:
    """An advisory lock held while the caller creates tables, in a transaction of a connection of
    its own (``locks.lock_within``): closing that connection ends it. Waited for at most
    ``SCHEMA_LOCK_WAIT_S``: a holder frozen mid-creation (SIGSTOP) must not hang every other
    process; past that the caller goes on without it (a lost race is retried anyway)."""
    from sqlalchemy import create_engine
    from sqlalchemy.pool import NullPool

    from tuner.orchestrate.locks import lock_key, lock_within

    engine = create_engine(url, poolclass=NullPool)
    try:
        with engine.connect() as connection:
            lock_within(connection, {"key": lock_key(SCHEMA_LOCK_NAME)}, SCHEMA_LOCK_WAIT_S)
            yield
    finally:
        engine.dispose()


PROXY_ANSWER_S = 5.0  # a proxy that does not answer by then is down, or the address is wrong


def open_grpc_proxy(host: str, port: int, *, wait_out_outage: bool = False) -> Any:
    """Optuna's client of a gRPC storage proxy (``tuner storage-proxy``), once it answers; an
    address where nothing answers within ``PROXY_ANSWER_S`` is one line (exit 2), not a gRPC
    error later. ``wait_out_outage`` (a worker): waited for as an outage instead (a proxy being
    restarted), then the same line."""
    from tuner.orchestrate import outage
    from tuner.orchestrate._optuna_adapter import grpc_storage_proxy

    quiet_optuna()
    proxy = grpc_storage_proxy(host, port)
    tries = 0
    while True:
        try:  # waiting out: short looks, with a stop signal obeyed between them (``outage.wait``)
            proxy.wait_server_ready(timeout=1.0 if wait_out_outage else PROXY_ANSWER_S)
            break
        except ConnectionError:
            if wait_out_outage:
                silent = ConnectionError(f"no answer at grpc://{host}:{port}")
                lasted = outage.note_unreachable(silent)
                if lasted < outage.outage_window_s():
                    note_retry(silent)
                    tries += 1
                    outage.wait(min(0.25 * 2 ** (tries - 1), outage.MAX_WAIT_S))
                    continue
                proxy.close()
                raise outage.give_up(silent, lasted) from None
        proxy.close()
        raise UsageError(
            f"no storage proxy answers at grpc://{host}:{port} (waited {PROXY_ANSWER_S:g} s): is "
            "`tuner storage-proxy` running there, and is the port reachable from here?"
        ) from None
    if wait_out_outage:
        outage.note_reachable()
    return proxy
