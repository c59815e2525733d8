"""Where a study lives, remembered in its output folder, so ``tuner list`` finds it there.

By default a study's storage is ``<output>/<study>/study.db``, and ``tuner list`` finds it by
looking. A study run with ``--storage`` or ``$TUNER_STORAGE`` (a journal file, PostgreSQL, a
storage proxy) left nothing there to find: its run folders sat under ``<output>/<study>`` while
``tuner list`` said "no study storage", and ``tuner report`` or round 2 without ``--storage``
found nothing. Each phase that starts now writes
``<output>/<study>/storage.json`` when its storage is not the default one: the URL with any
password masked (a password is never written down, docs: Scaling out, Secrets). A URL that carried one is
marked, and ``tuner list`` then asks for ``--storage`` instead of trying ``***``; a URL without
one (the password in ``~/.pgpass`` or ``$PGPASSWORD``, as the docs advise) just works.
A command given no storage (no ``--storage``, ``$TUNER_STORAGE`` or ``storage`` in the study
file) uses the one the pointer names (``storage.resolve_storage_url``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from tuner._atomic import atomic_write_json

POINTER_FILE = "storage.json"


@dataclass(frozen=True)
class RememberedStorage:
    """A study folder's ``storage.json``: the study, its storage URL (password masked), and
    whether that URL needs a password tuner did not keep (it cannot be opened as written)."""

    study: str
    url: str
    needs_password: bool
    pointer: Path


class PointerError(ValueError):
    """A ``storage.json`` that is not one tuner wrote (edited, truncated): skipped by ``list``."""


def remember_storage(output_dir: Path, study: str, url: str) -> None:
    """Write ``<output_dir>/<study>/storage.json`` for a storage other than the default SQLite
    file (which ``list`` finds without it); rewritten only when the URL changes."""
    from tuner.orchestrate.storage_url import default_storage_url
    from tuner.spec import redact_storage_url

    if url == default_storage_url(output_dir, study):
        return
    url = _from_anywhere(url)
    shown = redact_storage_url(url)
    record = {"study": study, "storage": shown, "needs_password": shown != url}
    path = Path(output_dir) / study / POINTER_FILE
    try:
        if json.loads(path.read_text()) == record:
            return
    except (OSError, ValueError):
        pass  # none yet, or unreadable: write it
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_json(path, record)


def _from_anywhere(url: str) -> str:
    """``url`` with a relative file path made absolute (``journal:///runs/x.log`` and
    ``sqlite:///x.db`` are relative to where the command ran; ``tuner list`` runs elsewhere)."""
    from tuner.orchestrate.storage_url import JOURNAL_PREFIX, Backend, parse_storage_url

    parsed = parse_storage_url(url)
    if parsed.backend is Backend.JOURNAL and parsed.journal_file is not None:
        return f"{JOURNAL_PREFIX}{parsed.journal_file.resolve()}"
    if parsed.backend is Backend.SQLITE and parsed.sqlite_file is not None and "?" not in url:
        return f"sqlite:///{parsed.sqlite_file.resolve()}"
    return url  # a server's address, or SQLite with driver options: as given


def read_pointer(path: Path) -> RememberedStorage:
    """The pointer at ``path``; ``PointerError`` names what is wrong with it."""
    try:
        record = json.loads(path.read_text())
    except (OSError, ValueError) as error:
        raise PointerError(f"{path}: not readable as JSON ({error})") from None
    if not (
        isinstance(record, dict)
        and isinstance(record.get("study"), str)
        and isinstance(record.get("storage"), str)
        and isinstance(record.get("needs_password"), bool)
    ):
        raise PointerError(f"{path}: not a storage pointer (study, storage, needs_password)")
    return RememberedStorage(record["study"], record["storage"], record["needs_password"], path)


DATABASE_FILE = "study.db"  # a study's default storage, in its folder (``default_storage_url``)
RUN_STATUS_FILE = "status.json"  # a run folder's: no study folder is found inside one


@dataclass(frozen=True)
class StudyStorageFiles:
    """The files that say where the studies under an output folder live: each default SQLite
    storage (``study.db``) and each pointer (``storage.json``), sorted."""

    databases: list[Path]
    pointers: list[Path]


def study_storage_files(output_dir: Path) -> StudyStorageFiles:
    """Every ``study.db`` and ``storage.json`` under ``output_dir``, at any depth: ``make demo``
    writes its study to ``runs/demo/digits-mlp/``, one folder deeper than ``runs/<study>/``, and
    an output folder may hold others' output folders so. A study folder (one holding either
    file) and a run folder (``status.json``) are not searched further: their subfolders are
    phases and run folders, which hold no other study; nor are hidden folders (``.workers``)."""
    import os

    databases: list[Path] = []
    pointers: list[Path] = []
    for folder, subfolders, files in os.walk(output_dir):  # symbolic links are not followed
        found = {DATABASE_FILE, POINTER_FILE} & set(files)
        if DATABASE_FILE in found:
            databases.append(Path(folder) / DATABASE_FILE)
        if POINTER_FILE in found:
            pointers.append(Path(folder) / POINTER_FILE)
        if found or RUN_STATUS_FILE in files:
            subfolders.clear()
        else:
            subfolders[:] = [name for name in subfolders if not name.startswith(".")]
    return StudyStorageFiles(sorted(databases), sorted(pointers))


def _pointer_in(folder: Path) -> RememberedStorage | None:
    """``folder``'s pointer, None when it has none that reads as one."""
    try:
        return read_pointer(Path(folder) / POINTER_FILE)
    except PointerError:
        return None


def remembered_storage(output_dir: Path, study: str) -> str | None:
    """The storage ``<output_dir>/<study>/storage.json`` names, for a command given none: so
    ``tuner report`` and round 2 find a study that round 1 ran with ``--storage``. None when the
    default SQLite file exists (it is the study's), or the pointer is missing, unreadable, or
    names a URL whose password tuner did not keep."""
    from tuner.orchestrate.storage_url import default_storage_url, sqlite_file

    default_file = sqlite_file(default_storage_url(output_dir, study))
    if default_file is not None and default_file.exists():
        return None
    pointer = _pointer_in(Path(output_dir) / study)
    return None if pointer is None or pointer.needs_password else pointer.url


def password_hint(folder: Path) -> str:
    """For "no study storage at <folder>/study.db": the storage ``folder``'s pointer names but
    cannot be used (its password was not kept), as a clause to add; "" when there is none."""
    pointer = _pointer_in(folder)
    if pointer is None or not pointer.needs_password:
        return ""
    return (
        f"; {pointer.pointer} names {pointer.url}, whose password tuner never writes down: give it "
        "with --storage URL, or keep it in ~/.pgpass or $PGPASSWORD (docs: Scaling out, Secrets)"
    )
