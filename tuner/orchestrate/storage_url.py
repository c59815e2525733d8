"""A storage URL, parsed once: which backend, and for SQLite which database file.

Every place that needs the file of ``sqlite:///PATH`` (WAL mode, the phase lock files, a
reader that must not create a database, a header that shows the path) asks here. Splitting on
``sqlite:///`` by hand got ``sqlite:////x/study.db?timeout=30`` wrong: the query string became
part of the file name, and WAL mode and the lock files went to a stray ``study.db?timeout=30``.
SQLAlchemy's ``make_url`` is the parser its engine uses, so both agree on the file.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from pathlib import Path

from tuner.errors import UsageError

SUPPORTED = (
    "sqlite:///PATH or postgresql://USER@HOST/DB (or grpc://HOST:PORT, a tuner storage-proxy; "
    "or journal:///PATH, an Optuna journal file)"
)
JOURNAL_PREFIX = "journal:///"
SQLITE_PREFIX = "sqlite:///"
GRPC_DEFAULT_PORT = 13000  # Optuna's run_grpc_proxy_server default


class Backend(enum.Enum):
    SQLITE = "sqlite"
    POSTGRESQL = "postgresql"
    GRPC = "grpc"  # Optuna's gRPC storage proxy (``tuner storage-proxy``) in front of one of the two
    # Optuna's JournalStorage on a file (``journal:///PATH``, the path as in ``sqlite:///PATH``):
    # no SQL, no lock, no heartbeat table, like the proxy; a shared file system, no server
    JOURNAL = "journal"


@dataclass(frozen=True)
class StorageUrl:
    """``url`` is what the engine is given (``postgresql://`` spelled with the psycopg 3 driver);
    ``sqlite_file`` the database file (None for PostgreSQL or an in-memory SQLite database);
    ``grpc_address`` the proxy's host and port (``grpc://``); ``journal_file`` the journal's
    file (``journal:///``)."""

    url: str
    backend: Backend
    sqlite_file: Path | None = None
    grpc_address: tuple[str, int] | None = None
    journal_file: Path | None = None

    @property
    def in_memory(self) -> bool:
        return self.backend is Backend.SQLITE and self.sqlite_file is None


def default_storage_url(output_dir: Path, study_name: str) -> str:
    """A study's storage when none is given: ``<output>/<study>/study.db``."""
    return f"sqlite:///{(Path(output_dir) / study_name / 'study.db').resolve()}"


def _scheme(url: str) -> str:
    return url.split("://", 1)[0].lower() if "://" in url else ""


def parse_storage_url(url: str) -> StorageUrl:
    """The parsed ``url``: SQLite, PostgreSQL, Optuna's gRPC proxy or a journal file; anything
    else (MySQL/MariaDB) is refused (exit 2).

    The proxy and the journal pass no lock: claims there reconcile the duplicates they make
    (``claim.py``, ``duplicates.py``), budgets may be overshot by W - 1. On the two databases the
    phase lock (``locks.py``) keeps duplicates from being made at all.
    """
    scheme = _scheme(url)
    plain = url[len(SQLITE_PREFIX) :] if url.startswith(SQLITE_PREFIX) else None
    if plain is not None and not any(sign in plain for sign in "?#%@"):
        # ``sqlite:///PATH`` with nothing for a parser to decode: PATH is what ``make_url`` reads
        # (a test holds the two together), without importing SQLAlchemy (a sixth of a second
        # of every ``tuner report``, which reads SQLite without it)
        return StorageUrl(url, Backend.SQLITE, None if plain in ("", ":memory:") else Path(plain))
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    from tuner.spec import redact_storage_url

    if scheme == "grpc":
        return StorageUrl(url, Backend.GRPC, grpc_address=_grpc_address(url))
    if scheme == "journal":
        return StorageUrl(url, Backend.JOURNAL, journal_file=_journal_file(url))
    if scheme in ("postgresql", "postgres"):
        url = "postgresql+psycopg://" + url.split("://", 1)[1]
    elif scheme != "sqlite" and not scheme.startswith("postgresql+"):  # the lock works with any driver
        raise UsageError(
            f"storage {redact_storage_url(url)} is not supported: tuner stores studies in {SUPPORTED} "
            "(MySQL/MariaDB have no phase lock here)"
        )
    try:
        parsed = make_url(url)
    except (ArgumentError, ValueError):
        raise UsageError(f"storage {redact_storage_url(url)} is not a valid URL: give {SUPPORTED}") from None
    if parsed.get_backend_name() == "postgresql":
        return StorageUrl(url, Backend.POSTGRESQL)
    database = parsed.database
    in_memory = database in (None, "", ":memory:") or parsed.query.get("mode") == "memory"
    return StorageUrl(url, Backend.SQLITE, None if in_memory else Path(str(database)))


def _grpc_address(url: str) -> tuple[str, int]:
    """``grpc://HOST[:PORT]`` -> (host, port); nothing else (a path, a user) means anything."""
    from urllib.parse import urlsplit

    try:
        parts = urlsplit(url)
        port = parts.port or GRPC_DEFAULT_PORT
    except ValueError:
        parts, port = None, 0
    if parts is None or not parts.hostname or parts.path not in ("", "/") or parts.query or parts.username:
        from tuner.spec import redact_storage_url

        raise UsageError(
            f"storage {redact_storage_url(url)} is not a gRPC proxy address: give grpc://HOST:PORT"
        )
    return parts.hostname, port


def _journal_file(url: str) -> Path:
    """``journal:///PATH`` -> PATH (relative, or absolute as ``journal:////abs/file.log``, the
    way ``sqlite:///`` spells paths); nothing else (a host, a query) means anything."""
    path = url[len(JOURNAL_PREFIX) :] if url.lower().startswith(JOURNAL_PREFIX) else ""
    if not path or "?" in path or path.endswith("/"):
        from tuner.spec import redact_storage_url

        raise UsageError(
            f"storage {redact_storage_url(url)} is not a journal file: give journal:///PATH "
            "(journal:////abs/path/study.log for an absolute path)"
        )
    return Path(path)


def sqlite_file(url: str) -> Path | None:
    """The database file of an SQLite URL; None for any other URL (even one that is refused:
    whoever opens it says what is wrong with it)."""
    try:
        return parse_storage_url(url).sqlite_file
    except UsageError:
        return None


def is_postgres(url: str) -> bool:
    return _scheme(url).startswith("postgres")
