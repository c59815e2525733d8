"""``checksums.json``: the sha256 each checkpoint had when it was written, and reading it back.

Apart from the resume logic (``checkpoint_integrity``) because readers that never load a
checkpoint (``tuner report`` saying whether the delivered model's file is intact) must not
import torch to check one.
"""

from __future__ import annotations

import functools
import hashlib
import json
from collections.abc import Iterable
from pathlib import Path

from tuner._atomic import atomic_write_json

MANIFEST = "checksums.json"


def sha256_of(data: bytes | memoryview) -> str:
    return hashlib.sha256(data).hexdigest()


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while chunk := handle.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


class Manifest:
    """``checksums.json``: file name -> the sha256 digests a file of that name may have."""

    def __init__(self, folder: Path, *, durable: bool = False) -> None:
        self.path, self.durable = Path(folder) / MANIFEST, durable
        self.digests: dict[str, list[str]] = self._read()

    def _read(self) -> dict[str, list[str]]:
        try:
            files = json.loads(self.path.read_text()).get("files", {})
        except (OSError, ValueError, AttributeError):
            return {}
        return {name: list(d) for name, d in files.items() if isinstance(d, list)}

    def set(self, name: str, *digests: str) -> None:
        self.digests[name] = [d for d in dict.fromkeys(digests) if d]

    def drop(self, names: Iterable[str]) -> None:
        for name in names:
            self.digests.pop(name, None)

    def save(self, *, durable: bool | None = None) -> None:
        """``durable`` None: as the checkpoints are (a record that only drops a digest need not be)."""
        durable = self.durable if durable is None else durable
        atomic_write_json(self.path, {"algorithm": "sha256", "files": self.digests}, durable=durable)


def recorded_digests(folder: Path, name: str) -> tuple[list[str] | None, bool]:
    """The digests the checkpoint ``name`` in ``folder`` may have (``checksums.json``, else its
    copy in ``index.json``), and whether the run recorded checksums at all (False only for a
    run folder of an older tuner: then a missing digest is no sign of damage)."""
    manifest = Manifest(folder)
    if name in manifest.digests:
        return manifest.digests[name], True
    try:
        copy = json.loads((folder / "index.json").read_text()).get("digests")
    except (OSError, ValueError, AttributeError):
        copy = None
    if isinstance(copy, dict) and isinstance(copy.get(name), list):
        return list(copy[name]), True
    return None, manifest.path.exists() or isinstance(copy, dict)


def checkpoint_problem(path: Path) -> str | None:
    """Why the checkpoint ``path`` cannot be trusted as it was written (damaged, or with no
    checksum to tell), or None when its sha256 is one ``checksums.json`` beside it records.
    A file is hashed once per process while it and the manifest keep their size and time."""
    stat = path.stat()
    records = []
    for name in (MANIFEST, "index.json"):
        try:
            records.append((path.parent / name).stat().st_mtime_ns)
        except OSError:
            records.append(None)
    return _problem(str(path), stat.st_size, stat.st_mtime_ns, tuple(records))


@functools.lru_cache(maxsize=256)
def _problem(path: str, size: int, mtime_ns: int, records: tuple[int | None, ...]) -> str | None:
    file = Path(path)
    expected, _ = recorded_digests(file.parent, file.name)
    if expected is None:
        return f"unverified: {MANIFEST} beside it (nor its copy in index.json) records no checksum for it"
    if file_sha256(file) not in expected:
        return "damaged: its sha256 differs from the one recorded when it was written"
    return None
