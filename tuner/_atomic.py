"""Atomic file writes (temp file in the same folder + fsync + rename).

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

    ``durable`` fsyncs before the rename so a machine crash cannot leave an empty file.
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
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def atomic_write_text(path: str | Path, text: str, *, durable: bool = True) -> None:
    atomic_write(path, lambda handle: handle.write(text.encode("utf-8")), durable=durable)


def atomic_write_json(path: str | Path, data: Any, *, durable: bool = True) -> None:
    atomic_write_text(
        path, json.dumps(data, indent=2, sort_keys=True, allow_nan=True) + "\n", durable=durable
    )
