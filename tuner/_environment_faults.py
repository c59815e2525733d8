"""Faults of the machine, not of tuner: a full or read-only disk, a denied path, memory exhausted.

The user fixes these (free space, another ``--output-dir``, a smaller batch), so the CLI says what
happened in one line and exits 2, never "internal error" (exit 70, kept for tuner's own bugs).
Torch-free on purpose: the CLI imports it for every command, and torch's OOM class is recognised
by name so that a command which never loaded torch does not load it here.
"""

from __future__ import annotations

import errno
import os
from dataclasses import dataclass
from enum import Enum


class FaultKind(Enum):
    DISK_FULL = "disk full"
    QUOTA = "disk quota exceeded"
    READ_ONLY = "read-only file system"
    PERMISSION = "permission denied"
    NOT_A_FOLDER = "not a folder"
    IS_A_FOLDER = "is a folder"
    NAME_TOO_LONG = "name too long"
    TOO_MANY_FILES = "too many open files"
    IO_ERROR = "input/output error"
    OUT_OF_MEMORY = "out of memory"


@dataclass(frozen=True)
class EnvironmentFault:
    """What went wrong with the machine, as the one line the user reads."""

    kind: FaultKind
    message: str


#: How an exhausted allocator words it: CUDA ("CUDA out of memory"), torch's CPU allocator
#: ("DefaultCPUAllocator: can't allocate memory"), the C library ("Cannot allocate memory").
OOM_WORDS = ("out of memory", "can't allocate memory", "cannot allocate memory")

SMALLER_BATCH = "lower training.batch_size (or the model's size) and run the same command again"

_BY_ERRNO = {
    errno.ENOSPC: FaultKind.DISK_FULL,
    errno.EDQUOT: FaultKind.QUOTA,
    errno.EROFS: FaultKind.READ_ONLY,
    errno.EACCES: FaultKind.PERMISSION,
    errno.EPERM: FaultKind.PERMISSION,
    errno.ENOTDIR: FaultKind.NOT_A_FOLDER,
    errno.EISDIR: FaultKind.IS_A_FOLDER,
    errno.ENAMETOOLONG: FaultKind.NAME_TOO_LONG,
    errno.EMFILE: FaultKind.TOO_MANY_FILES,
    errno.ENFILE: FaultKind.TOO_MANY_FILES,
    errno.EIO: FaultKind.IO_ERROR,
    errno.ENOMEM: FaultKind.OUT_OF_MEMORY,
}


def is_out_of_memory(error: BaseException) -> bool:
    """A host or device allocator ran out: Python's MemoryError, torch's OutOfMemoryError (by
    name: torch may not be loaded), or an allocator's RuntimeError worded as such."""
    if isinstance(error, MemoryError):
        return True
    if any(cls.__name__ == "OutOfMemoryError" for cls in type(error).__mro__):
        return True
    if isinstance(error, OSError) and error.errno == errno.ENOMEM:
        return True
    text = str(error).lower()
    return isinstance(error, RuntimeError) and any(words in text for words in OOM_WORDS)


def _shown(filename: object) -> str | None:
    """The path to name: an atomic write's temp file (``.name.123.tmp``) is its folder's fault."""
    if not isinstance(filename, (str, bytes, os.PathLike)):
        return None
    path = os.fsdecode(filename)
    base = os.path.basename(path)
    if base.startswith(".") and base.endswith(".tmp"):
        path = os.path.dirname(path) or "."
    from tuner.output import shown_path

    return shown_path(path)


def _os_fault(error: OSError) -> EnvironmentFault | None:
    kind = _BY_ERRNO.get(error.errno) if error.errno is not None else None
    if kind is None:
        return None
    if kind is FaultKind.OUT_OF_MEMORY:
        return EnvironmentFault(kind, f"out of memory ({error.strerror}); {SMALLER_BATCH}")
    path = _shown(error.filename)
    at = f" {path}" if path else ""
    again = "run the same command again"
    writing = f" writing{at}" if path else ""
    messages = {
        FaultKind.DISK_FULL: f"disk full: no space left on device{writing}; free some space, then {again}",
        FaultKind.QUOTA: f"disk quota exceeded{writing}; free some space, then {again}",
        FaultKind.READ_ONLY: f"cannot write{at}: read-only file system; choose another --output-dir or path",
        FaultKind.PERMISSION: f"cannot write or read{at}: permission denied",
        FaultKind.NOT_A_FOLDER: f"cannot use{at}: part of that path is a file, not a folder",
        FaultKind.IS_A_FOLDER: f"cannot use{at}: it is a folder, not a file",
        FaultKind.NAME_TOO_LONG: f"cannot use{at}: the file name is too long",
        FaultKind.TOO_MANY_FILES: "too many open files; raise the limit (ulimit -n) and " + again,
        FaultKind.IO_ERROR: f"input/output error{' on' + at if path else ''}: the disk or network "
        "file system failed",
    }
    return EnvironmentFault(kind, messages[kind])


def environment_fault(error: BaseException) -> EnvironmentFault | None:
    """The machine's fault behind ``error`` (or an error it was raised from), else None."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if is_out_of_memory(current):
            first = (str(current).strip().splitlines() or [""])[0]
            detail = f"{type(current).__name__}: {first}" if first else type(current).__name__
            return EnvironmentFault(FaultKind.OUT_OF_MEMORY, f"out of memory ({detail}); {SMALLER_BATCH}")
        if isinstance(current, OSError):
            found = _os_fault(current)
            if found is not None:
                return found
        current = current.__cause__ or current.__context__
    return None
