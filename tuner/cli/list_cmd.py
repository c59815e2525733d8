"""``tuner list``: every study of a storage in the playbook's experiment-tracking table.

Which storages: ``--storage URL`` (or ``$TUNER_STORAGE``), every study in it; else each
``<output-dir>/*/study.db`` (the default layout: one SQLite file per study). Of several study
files, one that cannot be read is skipped with a warning and the others are listed; a single
storage that cannot be read, or nothing to list at all, is one error line (exit 2). Reads only;
never writes to a storage.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from tuner.cli._console import err, out, plural, warning_line
from tuner.cli._errors import guarded
from tuner.errors import UsageError
from tuner.output import shown_path

if TYPE_CHECKING:
    from tuner.report.tracking import TrackingRow


def storage_urls(storage: str | None, output_dir: Path) -> list[str]:
    """The storages to list: ``storage``, or every ``study.db`` one folder under ``output_dir``."""
    if storage:
        return [storage]
    found = sorted(output_dir.glob("*/study.db")) if output_dir.is_dir() else []
    if not found:
        why = "no such folder" if not output_dir.is_dir() else f"no {output_dir / '*' / 'study.db'}"
        raise UsageError(
            f"no study storage under {output_dir} ({why}); give the output folder the studies ran "
            "with (--output-dir DIR) or their storage (--storage URL)"
        )
    return [f"sqlite:///{path.resolve()}" for path in found]


@guarded
def list_studies(
    storage: str | None = typer.Option(
        None,
        "--storage",
        metavar="URL",
        envvar="TUNER_STORAGE",
        help="List every study in this storage (default: each DIR/*/study.db).",
    ),
    output_dir: Path = typer.Option(
        Path("runs"),
        "--output-dir",
        metavar="DIR",
        envvar="TUNER_OUTPUT_DIR",
        help="Output folder whose DIR/*/study.db are listed.",
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
    urls = storage_urls(storage, output_dir)
    notes = err if as_json else out  # with --json, stdout holds the JSON alone
    rows: list[TrackingRow] = []
    skipped = 0
    for url in urls:
        try:
            with open_reader(url) as reader:
                found = 0
                for row in tracking_rows(reader):  # one study at a time
                    found += 1
                    if not as_json:
                        _print_row(row, first=not rows)
                    rows.append(row)
                if not found:
                    raise UsageError(f"storage {reader.shown_url} holds no tuner study")
        except UsageError as error:
            if len(urls) == 1:
                raise
            warning_line(f"skipped: {error}")
            skipped += 1
    if not rows:
        raise UsageError(
            f"none of the {len(urls)} study storages under {output_dir} could be read "
            "(see the warnings above)"
        )
    if as_json:
        typer.echo(json.dumps([row.to_json() for row in rows], indent=2, allow_nan=False))
    else:
        where = (
            redact_url(urls[0]) if storage else f"{plural(len(urls) - skipped, 'storage')} under {output_dir}"
        )
        out.print("")
        out.print(f"{plural(len(rows), 'study', 'studies')} in {where}", markup=False)
    if csv_path is not None:
        from tuner.report.tracking import write_tracking_csv

        write_tracking_csv(rows, csv_path)
        notes.print(
            f"csv          {shown_path(csv_path)} ({plural(len(rows), 'study', 'studies')})", markup=False
        )


def _print_row(row: TrackingRow, *, first: bool) -> None:
    from tuner.report.tracking_terminal import render_row

    width = out.width if out.is_terminal else 100  # a pipe or file: the table's own width
    if not first:
        out.print("")
    for line in render_row(row, width=width):
        out.print(line, soft_wrap=True)
