"""Reading what a storage holds, fast and without writing: the phases of a study and their trials.

The report and the tracking table read whole studies: tens of thousands of trials, each with
dozens of attributes and intermediate values. Optuna's own ``load_study`` + ``get_trials`` builds
a ``FrozenTrial`` (with every intermediate value) per trial through the ORM, about 14 s for
10,000 trials of 50 evaluations; and ``RDBStorage`` creates its tables in an empty database,
which a reader must never do. So this module reads Optuna's tables with plain SELECTs (the SQL
is in ``_optuna_adapter``, the one module that knows Optuna's internals), loads intermediate
values only for the trials asked for, and returns typed records. On a schema it does not know
it falls back to Optuna's public API.
"""

from __future__ import annotations

import contextlib
import itertools
import sqlite3
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from tuner.errors import UsageError
from tuner.orchestrate import outage
from tuner.orchestrate.sqlite_check import DamagedStorageError, check_sqlite_file, damage_of
from tuner.orchestrate.storage import _scrub, open_grpc_proxy, open_journal, redact_url, track_engine
from tuner.orchestrate.storage_url import Backend, parse_storage_url, sqlite_file

PHASE_SEPARATOR = "/"
SQLITE_TIMEOUT_S = 60  # how long a read waits for a writer's lock on an SQLite file


@dataclass(frozen=True)
class StoredTrial:
    """One Optuna trial as the storage holds it (duck-compatible with ``FrozenTrial`` for the
    attributes tuner's own readers use: ``number``, ``state``, ``value``, ``params``, ``user_attrs``)."""

    number: int
    state: str  # COMPLETE, FAIL, RUNNING, WAITING, PRUNED
    value: float | None
    params: dict[str, Any]
    user_attrs: dict[str, Any]
    datetime_start: datetime | None = None
    datetime_complete: datetime | None = None

    @property
    def slot(self) -> int:
        return int(self.user_attrs.get("slot", self.number))

    @property
    def attempt(self) -> int:
        return int(self.user_attrs.get("attempt", 0))


@dataclass(frozen=True)
class StoredPhase:
    """A phase (``<study>/<phase>`` in Optuna) with its attributes and trials."""

    study: str
    phase: str
    direction: str  # minimize | maximize
    user_attrs: dict[str, Any]
    trials: list[StoredTrial] = field(default_factory=list)

    @property
    def optuna_name(self) -> str:
        return f"{self.study}{PHASE_SEPARATOR}{self.phase}"


def split_name(optuna_name: str) -> tuple[str, str] | None:
    """``digits-mlp/round-1`` -> ``("digits-mlp", "round-1")``; None for a study tuner did not name."""
    study, sep, phase = optuna_name.rpartition(PHASE_SEPARATOR)
    return (study, phase) if sep and study and phase else None


class StorageReader:
    """Read-only access to a storage URL (``open_reader``); close it, or use it as a context.

    ``engine``: SQLAlchemy's, for a database server; ``sqlite_path``: an SQLite file, read with the
    standard library's ``sqlite3`` instead (importing SQLAlchemy and wrapping every row cost a
    report of 10,000 trials a third of a second; the SQL is the same, ``_optuna_adapter``)."""

    def __init__(self, url: str, engine: Any, fast: bool, sqlite_path: Path | None = None) -> None:
        self.url, self.engine, self.fast, self.sqlite_path = url, engine, fast, sqlite_path
        self._optuna_storage: Any = None

    @property
    def shown_url(self) -> str:
        return redact_url(self.url)

    def close(self) -> None:
        if self.engine is not None:
            self.engine.dispose()
        elif self._optuna_storage is not None and hasattr(self._optuna_storage, "close"):
            self._optuna_storage.close()  # a gRPC proxy's channel (a journal file has none)

    def __enter__(self) -> StorageReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @contextlib.contextmanager
    def _connection(self) -> Iterator[Any]:
        if self.sqlite_path is not None:
            try:
                with contextlib.closing(_open_sqlite(self.sqlite_path)) as connection:
                    yield connection
            except sqlite3.Error as error:
                _raise_if_damaged(self.url, error)
                raise UsageError(f"cannot read storage {self.shown_url}: {_first_line(error)}") from None
            return
        from sqlalchemy.exc import SQLAlchemyError

        try:
            with self.engine.connect() as connection:
                yield connection
        except SQLAlchemyError as error:
            _raise_if_damaged(self.url, error)
            raise UsageError(
                f"cannot read storage {self.shown_url}: {_scrub(_first_line(error), self.url)}"
            ) from None

    @contextlib.contextmanager
    def _proxy_errors(self) -> Iterator[None]:
        """A gRPC proxy that stops answering mid-read is one line, not a gRPC stack trace."""
        try:
            yield
        except Exception as error:
            if type(error).__module__.split(".")[0] != "grpc":
                raise
            details = getattr(error, "details", lambda: "")() or type(error).__name__
            raise UsageError(f"the storage proxy at {self.shown_url} stopped answering: {details}") from None

    def _public(self) -> Any:
        """Optuna's own storage, for a schema this module does not know (slow, but public API)."""
        if self._optuna_storage is None:
            from tuner.orchestrate.storage import open_storage

            self._optuna_storage = open_storage(self.url)
        return self._optuna_storage

    # -- studies --------------------------------------------------------------------------------
    def optuna_study_names(self) -> list[str]:
        """Every Optuna study in the storage, in creation order."""
        if not self.fast:
            with self._proxy_errors():
                return [s.study_name for s in self._public().get_all_studies()]
        from tuner.orchestrate import _optuna_adapter as adapter

        with self._connection() as connection:
            return adapter.select_study_names(connection)

    def studies(self) -> dict[str, list[str]]:
        """tuner studies -> their phases, in the order the phases were created."""
        found: dict[str, list[str]] = {}
        for name in self.optuna_study_names():
            parts = split_name(name)
            if parts is not None:
                found.setdefault(parts[0], []).append(parts[1])
        return found

    def read_phase(self, study: str, phase: str) -> StoredPhase | None:
        """The phase with its trials (no intermediate values: see ``intermediate_values``)."""
        name = f"{study}{PHASE_SEPARATOR}{phase}"
        if not self.fast:
            with self._proxy_errors():
                return self._read_public(study, phase)
        from tuner.orchestrate import _optuna_adapter as adapter

        with self._connection() as connection:
            header = adapter.select_study(connection, name)
            if header is None:
                return None
            study_id, direction, attrs = header
            trials = [StoredTrial(**row) for row in adapter.select_trials(connection, study_id)]
        return StoredPhase(study, phase, direction, attrs, trials)

    def study_attrs(self, optuna_name: str) -> dict[str, Any] | None:
        """The user attributes of any Optuna study in the storage (a phase or not); None if absent."""
        if not self.fast:
            import optuna

            try:
                with self._proxy_errors():
                    return dict(optuna.load_study(study_name=optuna_name, storage=self._public()).user_attrs)
            except KeyError:
                return None
        from tuner.orchestrate import _optuna_adapter as adapter

        with self._connection() as connection:
            header = adapter.select_study(connection, optuna_name)
        return None if header is None else header[2]

    def intermediate_values(
        self, study: str, phase: str, numbers: Iterable[int]
    ) -> dict[int, dict[int, float]]:
        """Trial number -> {step: value} for the trials ``numbers`` of the phase."""
        wanted = sorted(set(numbers))
        if not wanted:
            return {}
        name = f"{study}{PHASE_SEPARATOR}{phase}"
        if not self.fast:
            import optuna

            with self._proxy_errors():
                loaded = optuna.load_study(study_name=name, storage=self._public())
                trials = loaded.get_trials(deepcopy=False)
            return {t.number: dict(t.intermediate_values) for t in trials if t.number in set(wanted)}
        from tuner.orchestrate import _optuna_adapter as adapter

        with self._connection() as connection:
            header = adapter.select_study(connection, name)
            if header is None:
                return {}
            return adapter.select_intermediate_values(connection, header[0], wanted)

    def _read_public(self, study: str, phase: str) -> StoredPhase | None:
        import optuna

        try:
            loaded = optuna.load_study(study_name=f"{study}{PHASE_SEPARATOR}{phase}", storage=self._public())
        except KeyError:
            return None
        trials = [
            StoredTrial(
                number=t.number,
                state=t.state.name,
                value=t.value,
                params=dict(t.params),
                user_attrs=dict(t.user_attrs),
                datetime_start=t.datetime_start,
                datetime_complete=t.datetime_complete,
            )
            for t in loaded.get_trials(deepcopy=False)
        ]
        return StoredPhase(study, phase, loaded.direction.name.lower(), dict(loaded.user_attrs), trials)


def open_reader(url: str) -> StorageReader:
    """A reader of ``url``. An SQLite file that does not exist is refused (a reader creates
    nothing); an unreachable server or a database without Optuna's tables is one clear line."""
    parsed = parse_storage_url(url)
    if parsed.grpc_address is not None:
        reader = StorageReader(url, None, fast=False)  # the proxy serves Optuna's API, not SQL
        reader._optuna_storage = open_grpc_proxy(*parsed.grpc_address, wait_out_outage=True)
        return reader
    if parsed.journal_file is not None:  # a journal is read through Optuna's API too
        if not parsed.journal_file.is_file():
            raise UsageError(
                f"no study storage at {parsed.journal_file}: nothing has run there (check --storage)"
            )
        reader = StorageReader(url, None, fast=False)
        reader._optuna_storage = open_journal(parsed.journal_file)
        return reader
    normalised = parsed.url
    if parsed.backend is Backend.SQLITE and (parsed.sqlite_file is None or not parsed.sqlite_file.is_file()):
        from tuner.orchestrate.storage_pointer import password_hint

        hint = password_hint(parsed.sqlite_file.parent) if parsed.sqlite_file is not None else ""
        raise UsageError(
            f"no study storage at {parsed.sqlite_file or url}: nothing has run there "
            f"(check --output-dir / --storage){hint}"
        )
    if parsed.sqlite_file is not None:
        check_sqlite_file(parsed.sqlite_file)
        if "?" not in url:  # a plain file (a URL with options is SQLAlchemy's to interpret)
            return _open_sqlite_reader(url, parsed.sqlite_file)
    from sqlalchemy import create_engine
    from sqlalchemy.exc import SQLAlchemyError

    from tuner.orchestrate import _optuna_adapter as adapter

    engine = None
    for attempt in itertools.count():
        try:
            engine = engine or track_engine(create_engine(normalised, **_read_engine_kwargs(normalised)))
            with engine.connect() as connection:
                known = adapter.schema_known(connection)
            if attempt:
                outage.note_reachable()
            break
        except (SQLAlchemyError, ImportError, ValueError) as error:
            if outage.is_outage(error):  # a server restarting: waited out, as the workers do
                lasted = outage.note_unreachable(error)
                if lasted < outage.outage_window_s():
                    outage.wait(min(0.5 * 2**attempt, outage.MAX_WAIT_S))
                    continue
                raise outage.give_up(error, lasted, redact_url(url)) from None
            _raise_if_damaged(url, error)
            first = _first_line(error)
            raise UsageError(f"cannot read storage {redact_url(url)}: {_scrub(first, url)}") from None
    if known is None:
        engine.dispose()
        raise UsageError(f"storage {redact_url(url)} holds no Optuna studies (no tuner study has run there)")
    return StorageReader(url, engine, fast=known)


def _open_sqlite(path: Path) -> sqlite3.Connection:
    """A connection to the SQLite file ``path`` that waits for a writer as the workers' do."""
    return sqlite3.connect(path, timeout=SQLITE_TIMEOUT_S)


def _open_sqlite_reader(url: str, path: Path) -> StorageReader:
    from tuner.orchestrate import _optuna_adapter as adapter

    reader = StorageReader(url, None, fast=True, sqlite_path=path)
    with reader._connection() as connection:  # its errors are the reader's: one line each
        known = adapter.schema_known(connection)
    if known is None:
        raise UsageError(f"storage {redact_url(url)} holds no Optuna studies (no tuner study has run there)")
    reader.fast = known
    return reader


def _first_line(error: BaseException) -> str:
    return (str(error).strip().splitlines() or [type(error).__name__])[0]


def _raise_if_damaged(url: str, error: BaseException) -> None:
    """A page found damaged while reading (after the check at open: a disk failing now)."""
    database = sqlite_file(url)
    if database is not None and damage_of(error):
        raise DamagedStorageError(database.resolve(), str(damage_of(error))) from None


def _read_engine_kwargs(url: str) -> Mapping[str, Any]:
    if parse_storage_url(url).backend is Backend.SQLITE:
        return {"connect_args": {"timeout": SQLITE_TIMEOUT_S}}
    return {"pool_pre_ping": True}
