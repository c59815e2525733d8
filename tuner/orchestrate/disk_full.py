"""A full disk is the machine's fault, not the trial's: say so, stop, lose nothing.

A trial that meets ``No space left on device`` (or SQLite's "database or disk is full") is
recorded ``disk_full``: like ``interrupted`` it is continued by a retry that spends nothing
(``max_retries`` is untouched, and it is not a failure of the phase). Its worker then stops
(exit 2, ``disk full: <path>``): every trial it would start would meet the same full disk, and
a retry spent on each would lose their slots for good. Once space is freed, the same command
continues where it stopped.

Recording that needs a little space itself (an SQLite commit, the worker's status file), and a
full disk has none. So each worker keeps a small reserve file (``RESERVE_BYTES``) next to its
status file and deletes it when the disk is full, before those last writes.
"""

from __future__ import annotations

import contextlib
import errno
import os
from pathlib import Path
from types import TracebackType

from tuner.errors import UsageError

RESERVE_BYTES = 1 << 20  # a few dozen SQLite commits (WAL frames of 4 KiB pages) and a status file
FULL_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT})
FULL_TEXTS = ("No space left on device", "database or disk is full", "Disk quota exceeded")


class DiskFull(UsageError):
    """The disk is full (exit 2: the environment, not tuner nor the trial)."""

    def __init__(self, path: str | Path) -> None:
        self.path = str(path)
        super().__init__(
            f"disk full: {self.path}; free some space there and run the same command again "
            "(the stopped trials continue from their checkpoints; no retry was spent)"
        )


def disk_full_path(error: BaseException, default: str | Path = "") -> str | None:
    """The path a full disk refused (``default`` when the error does not name one), or None if
    ``error`` (or what caused it) is not a full disk."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, OSError) and current.errno in FULL_ERRNOS:
            filename = current.filename
            return os.fsdecode(filename) if filename else str(default)
        if any(text in str(current) for text in FULL_TEXTS):
            return str(default)
        current = getattr(current, "orig", None) or current.__cause__ or current.__context__
    return None


def storage_place(url: str) -> str:
    """Where the storage at ``url`` keeps its data, as a full disk is named: an SQLite file's
    path, else the server (whose disk this machine cannot see)."""
    from sqlalchemy.engine import make_url

    from tuner.orchestrate.storage import redact_url

    with contextlib.suppress(Exception):
        parsed = make_url(url)
        if parsed.get_backend_name() == "sqlite" and parsed.database:
            return parsed.database
    return f"the storage's server ({redact_url(url)})"


class SpaceReserve:
    """``RESERVE_BYTES`` held in ``path`` until ``release()`` (see the module docstring).

    Held for a ``with`` block; a disk already full when it starts raises ``DiskFull``.
    """

    def __init__(self, path: Path) -> None:
        self.path = path

    def __enter__(self) -> SpaceReserve:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with self.path.open("wb") as handle:
                handle.write(b"\0" * RESERVE_BYTES)
        except OSError as error:
            self.release()
            if error.errno in FULL_ERRNOS:
                raise DiskFull(self.path.parent) from None
            # no reserve (e.g. a read-only folder): the worker goes on without one
        return self

    def release(self) -> None:
        with contextlib.suppress(OSError):
            self.path.unlink(missing_ok=True)

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.release()
