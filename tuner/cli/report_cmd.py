"""``tuner report STUDY``: the playbook's verdicts on a study, in plain words (or JSON, CSV, HTML).

Reads only the storage and the run folders it can reach, so it works on a study that other
machines ran; it never writes to the storage.
"""

from __future__ import annotations

import json
from pathlib import Path

import typer

from tuner.cli._console import err, out
from tuner.cli._errors import guarded
from tuner.cli._options import output_dir_option, storage_option
from tuner.errors import UsageError
from tuner.output import shown_path


def locate(study: str, output_dir: Path, storage: str | None) -> tuple[str, str, Path | None]:
    """``(study name, storage URL, study file)`` from a study file, or from a study's name.

    A study file gives the name and its storage (``--storage`` and ``$TUNER_STORAGE`` win, as
    everywhere); a name needs the storage to be found where the default one would be.
    """
    from tuner.orchestrate import resolve_storage_url
    from tuner.output import phase_dir

    path = Path(study)
    if path.is_file() or study.endswith((".yaml", ".yml")):
        from tuner.spec import load_study

        loaded = load_study(path)
        spec = loaded.spec
        return spec.name, storage or resolve_storage_url(spec.storage, output_dir, spec.name), path
    phase_dir(output_dir, study, "report")  # a name that would escape the output folder is refused
    return study, storage or resolve_storage_url(None, output_dir, study), None


@guarded
def report(
    study: str = typer.Argument(
        ..., metavar="STUDY", help="The study file, or a study's name (found in --storage / --output-dir)."
    ),
    phase: str | None = typer.Option(
        None, "--phase", metavar="PHASE", help="One phase (sweep-lr, round-1...); default: all, latest first."
    ),
    html: Path | None = typer.Option(
        None, "--html", metavar="PATH", help="Also write an offline HTML report."
    ),
    csv_path: Path | None = typer.Option(
        None, "--csv", metavar="PATH", help="Also write one CSV row per trial."
    ),
    as_json: bool = typer.Option(False, "--json", help="Print every verdict with its numbers as JSON."),
    write_next: Path | None = typer.Option(
        None, "--write-next", metavar="PATH", help="Write the next study file, the suggestions applied."
    ),
    output_dir: Path = output_dir_option(),
    storage: str | None = storage_option(),
) -> None:
    """What the study's trials say: best-step position, search-space edges, health, transfer."""
    from tuner.orchestrate.stored import open_reader
    from tuner.report import build_report, read_study

    name, url, study_file = locate(study, output_dir, storage)
    if write_next is not None:
        if study_file is None:
            raise UsageError(
                "--write-next needs the study file (the next study is a copy of it): give its path"
            )
        from tuner.report.next_study import check_destination

        check_destination(study_file, write_next)  # refused before the report is printed, not after
    for target, option in ((csv_path, "--csv"), (html, "--html")):
        if target is not None and target.is_dir():  # said before the report, not after it
            raise UsageError(f"{option} {target}: is a folder; give a file path")
    notes = err if as_json else out  # with --json, stdout holds the JSON alone
    if html is not None:
        from tuner.report.html import require_plotly

        require_plotly()  # before any output: a missing extra is one line, not a report then an error
    with open_reader(url) as reader:
        data = read_study(reader, name, [phase] if phase else None)
        result = build_report(data)
        from tuner.report.tuned_into import tuned_into

        result.tuned_into = tuned_into(name, result.tune, output_dir, storage)
        if as_json:
            from tuner.report import report_json

            typer.echo(json.dumps(report_json(result), indent=2, allow_nan=False))
        else:
            from tuner.report import render_report

            width = out.width if out.is_terminal else 100  # a pipe or file: the report's own width
            for line in render_report(result, width=width):
                out.print(line, soft_wrap=True)
        if csv_path is not None:
            from tuner.report import write_csv

            rows = write_csv(result, csv_path)
            notes.print(f"csv          {shown_path(csv_path)} ({rows} trials)", markup=False)
        if html is not None:
            from tuner.report.html import write_html

            write_html(result, data, html)
            notes.print(f"html         {shown_path(html)}", markup=False)
    if write_next is not None:
        from tuner.report.next_study import write_next_study

        written = write_next_study(study_file, result, write_next)  # type: ignore[arg-type]
        for line in written.lines():
            notes.print(line, markup=False, highlight=False)
