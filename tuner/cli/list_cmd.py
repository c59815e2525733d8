"""``tuner list``: every study of a storage in the playbook's experiment-tracking table.

Which storages: ``--storage URL`` (or ``$TUNER_STORAGE``), every study in it; else each
``study.db`` under the output folder, at any depth (the default layout: one SQLite file per
study, ``<output-dir>/<study>/study.db``; ``make demo``'s is ``runs/demo/digits-mlp/study.db``)
and, for a study run on another storage (a journal file, PostgreSQL, a proxy), the one its
folder's ``storage.json`` names (``storage_pointer``), that study alone. Of several, one that
cannot be read is skipped with a warning and the others are listed; a single storage that cannot
be read, or nothing to list at all, is one error line (exit 2). Reads only; never writes to a
storage.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from tuner.cli._console import err, out, plural, warning_line
from tuner.cli._errors import guarded
from tuner.errors import UsageError
from tuner.output import shown_path

if TYPE_CHECKING:
    from tuner.report.tracking import TrackingRow


@dataclass(frozen=True)
class _Source:
    """A storage to list: every study in it (``studies`` None), or only those named."""

    url: str
    studies: frozenset[str] | None = None


def _sources(storage: str | None, output_dir: Path) -> list[_Source]:
    """``storage``; or every ``study.db`` under ``output_dir``, then every other storage a study
    folder's ``storage.json`` names (each once, with the studies that named it). A pointer
    that cannot be used is a warning, as an unreadable ``study.db`` among several is."""
    if storage:
        return [_Source(storage)]
    from tuner.orchestrate.storage_pointer import PointerError, read_pointer, study_storage_files

    found = study_storage_files(output_dir)
    sources = [_Source(f"sqlite:///{path.resolve()}") for path in found.databases]
    named: dict[str, set[str]] = {}
    pointers = found.pointers
    for path in pointers:
        try:
            pointer = read_pointer(path)
        except PointerError as error:
            warning_line(f"skipped: {error}")
            continue
        if pointer.needs_password:
            warning_line(
                f"skipped: study {pointer.study}: its storage {pointer.url} needs a password, which "
                "tuner never writes down; list it with --storage URL (or $TUNER_STORAGE)"
            )
            continue
        named.setdefault(pointer.url, set()).add(pointer.study)
    sources += [_Source(url, frozenset(studies)) for url, studies in named.items()]
    if not sources:
        why = (
            "no such folder"
            if not output_dir.is_dir()
            else "no study.db" + ("" if pointers else " nor storage.json") + " in it or its folders"
        )
        raise UsageError(
            f"no study storage under {output_dir} ({why}); give the output folder the studies ran "
            "with (--output-dir DIR) or their storage (--storage URL)"
        )
    return sources


@guarded
def list_studies(
    storage: str | None = typer.Option(
        None,
        "--storage",
        metavar="URL",
        envvar="TUNER_STORAGE",
        help=(
            "List every study in this storage (default: each study.db under DIR, and the "
            "storage each storage.json under DIR names)."
        ),
    ),
    output_dir: Path = typer.Option(
        Path("runs"),
        "--output-dir",
        metavar="DIR",
        envvar="TUNER_OUTPUT_DIR",
        help="Output folder whose studies are listed: each study.db (and storage.json) in it, at any depth.",
    ),
    csv_path: Path | None = typer.Option(
        None, "--csv", metavar="PATH", help="Also write one CSV row per study."
    ),
    as_json: bool = typer.Option(False, "--json", help="Print the table as JSON (a list of studies)."),
) -> None:
    """Every study: notes, phases, trials by state, best value and checkpoint, cost, code version."""
    from tuner.orchestrate.storage import redact_url
    from tuner.orchestrate.stored import open_reader
    from tuner.report.tracking import tracking_rows

    if csv_path is not None and csv_path.is_dir():  # said before the table, not after it
        raise UsageError(f"--csv {csv_path}: is a folder; give a file path")
    sources = _sources(storage, output_dir)
    notes = err if as_json else out  # with --json, stdout holds the JSON alone
    rows: list[TrackingRow] = []
    skipped = 0
    for source in sources:
        try:
            with open_reader(source.url) as reader:
                found = 0
                for row in tracking_rows(reader, only=source.studies):  # one study at a time
                    found += 1
                    if not as_json:
                        _print_row(row, first=not rows)
                    rows.append(row)
                if not found:
                    raise UsageError(f"storage {reader.shown_url} holds no tuner study{_named(source)}")
        except UsageError as error:
            if len(sources) == 1:
                raise
            warning_line(f"skipped: {error}")
            skipped += 1
    if not rows:
        raise UsageError(
            f"none of the {len(sources)} study storages under {output_dir} could be read "
            "(see the warnings above)"
        )
    if as_json:
        typer.echo(json.dumps([row.to_json() for row in rows], indent=2, allow_nan=False))
    else:
        where = (
            redact_url(storage)
            if storage
            else f"{plural(len(sources) - skipped, 'storage')} under {output_dir}"
        )
        out.print("")
        out.print(f"{plural(len(rows), 'study', 'studies')} in {where}", markup=False)
    if csv_path is not None:
        from tuner.report.tracking import write_tracking_csv

        write_tracking_csv(rows, csv_path)
        notes.print(
            f"csv          {shown_path(csv_path)} ({plural(len(rows), 'study', 'studies')})", markup=False
        )


def _named(source: _Source) -> str:
    return f" named {', '.join(sorted(source.studies))}" if source.studies else ""


def _print_row(row: TrackingRow, *, first: bool) -> None:
    from tuner.report.tracking_terminal import render_row

    width = out.width if out.is_terminal else 100  # a pipe or file: the table's own width
    if not first:
        out.print("")
    for line in render_row(row, width=width):
        out.print(line, soft_wrap=True)
