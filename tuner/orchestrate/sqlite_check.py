"""A damaged SQLite study is said to be damaged, with the way to recover it, when it is opened.

Random bytes in the middle of ``study.db`` (a failing disk, a copy made while it was written)
go unnoticed until a query happens to read that page: the report and the tracking table printed
a clean study, and a worker crashed later with Optuna's misleading "exceeding max length". So
every command checks the file once when it opens it: ``PRAGMA quick_check`` reads each page and
verifies its structure (not index contents, which ``integrity_check`` also compares), a few
milliseconds per megabyte, and it runs in a read transaction, beside working workers.
"""

from __future__ import annotations

import contextlib
import sqlite3
from pathlib import Path

from tuner.errors import UsageError

CHECK_TIMEOUT_S = 60
_checked: set[Path] = set()  # once per process and file: a worker opens its storage again and again
_DAMAGE_SIGNS = ("malformed", "corrupt")  # "file is not a database": not SQLite at all, said as is


class DamagedStorageError(UsageError):
    """The SQLite file fails its integrity check: an environment fault (exit 2), not tuner's bug."""

    def __init__(self, path: Path, finding: str) -> None:
        from tuner.output import shown_path

        self.path, self.finding = path, finding
        name = path.name
        super().__init__(
            f"storage {shown_path(path)} is damaged (SQLite: {finding}); to recover, with no tuner "
            f"command running, in {shown_path(path.parent)}: keep a copy (cp {name} {name}.damaged), run "
            f"`sqlite3 {name} .recover | sqlite3 recovered.db`, check recovered.db with tuner report "
            f"--storage, then move it over {name} and delete {name}-wal and {name}-shm "
            "(docs: Scaling out, A damaged study.db)"
        )


def _one_line(finding: str) -> str:
    """``*** in database main ***\nPage 15: btreeInitPage() ...`` -> ``Page 15: btreeInitPage() ...``."""
    lines = [line.strip() for line in finding.splitlines() if line.strip() and not line.startswith("***")]
    return "; ".join(lines) or "ok"


def damage_of(error: BaseException) -> str | None:
    """What an SQLite error says about a damaged file (None for a locked or unreadable one)."""
    text = str(error).strip().splitlines()[0] if str(error).strip() else ""
    return text if any(sign in text.lower() for sign in _DAMAGE_SIGNS) else None


def check_sqlite_file(path: Path) -> None:
    """Raise ``DamagedStorageError`` if the database file ``path`` is damaged.

    A file that does not exist, or that cannot be opened for another reason (permissions, a lock
    held past the timeout), is left to the code that opens it next: it says what is wrong.
    """
    path = path.resolve()
    if path in _checked or not path.is_file():
        return
    try:
        with contextlib.closing(sqlite3.connect(path, timeout=CHECK_TIMEOUT_S)) as connection:
            finding = _one_line(str(connection.execute("PRAGMA quick_check(1)").fetchone()[0]))
    except sqlite3.DatabaseError as error:
        finding = damage_of(error) or "ok"
        if finding == "ok":
            return
    if finding != "ok":
        raise DamagedStorageError(path, finding)
    _checked.add(path)
