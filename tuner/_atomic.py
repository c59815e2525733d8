"""Atomic file writes (temp file in the same folder + fsync + rename + fsync of the folder).

A reader, or a run resumed after a kill, sees the old file or the new one, never half of one.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any


def atomic_write(path: str | Path, write: Callable[[IO[bytes]], Any], *, durable: bool = True) -> None:
    """Call ``write(file)`` on a temp file next to ``path``, then rename it over ``path``.

    ``durable`` fsyncs the file before the rename, so a machine crash cannot leave an empty file,
    and the folder after it: the rename itself is only on disk once its directory is (POSIX),
    else a power cut may bring the old file back.
    """
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")  # one writer per process and file
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o666)  # the umask applies
    except FileNotFoundError:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o666)
    try:
        # a 1 MiB buffer: torch.save's zip writer makes many small writes
        with os.fdopen(fd, "wb", buffering=1 << 20) as handle:
            write(handle)
            if durable:
                handle.flush()
                os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException as error:
        tmp.unlink(missing_ok=True)
        if isinstance(error, OSError) and error.filename is None:
            error.filename = str(path)  # a write(2) names no file: a full disk is then reported with it
        raise
    if durable:
        _fsync_folder(path.parent)


def _fsync_folder(folder: Path) -> None:
    try:
        fd = os.open(folder, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:  # a platform whose folders cannot be opened (Windows): nothing to sync
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write_text(path: str | Path, text: str, *, durable: bool = True) -> None:
    atomic_write(path, lambda handle: handle.write(text.encode("utf-8")), durable=durable)


def atomic_write_json(path: str | Path, data: Any, *, durable: bool = True) -> None:
    atomic_write_text(
        path, json.dumps(data, indent=2, sort_keys=True, allow_nan=True) + "\n", durable=durable
    )


def write_output_file(path: str | Path, text: str) -> None:
    """A file the user asked for (``--csv``, ``--html``), written atomically; a path that cannot
    be written (a folder, no permission, a full disk) is one line (``UsageError``), not a crash."""
    from tuner.errors import UsageError

    if Path(path).is_dir():
        raise UsageError(f"cannot write {path}: it is a folder; give a file path")
    try:
        atomic_write_text(path, text)
    except OSError as error:
        raise UsageError(f"cannot write {path}: {error.strerror or error}") from None
