"""The options several commands share, declared once: the same flag reads the same everywhere.

Each is a function (a fresh ``typer.Option`` per command, nothing shared between them) with the
help text a command may adapt; a command's own options stay in its module.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

STORAGE_HELP = "Storage URL (default: $TUNER_STORAGE, the study's storage, or SQLite)."


def study_argument() -> Any:
    return typer.Argument(..., metavar="STUDY", help="The study file.")


def set_option(help: str = "Override a study field (repeatable).") -> Any:
    return typer.Option([], "--set", metavar="KEY=VALUE", help=help)


def output_dir_option(help: str = "Output folder.") -> Any:
    return typer.Option(Path("runs"), "--output-dir", metavar="DIR", envvar="TUNER_OUTPUT_DIR", help=help)


def storage_option(help: str = STORAGE_HELP) -> Any:
    return typer.Option(None, "--storage", metavar="URL", help=help)


def workers_option(help: str = "CPU workers (default: one per GPU, else one per core).") -> Any:
    return typer.Option(None, "--workers", metavar="N", help=help)


def devices_option() -> Any:
    return typer.Option(None, "--devices", metavar="IDS", help="GPU ids, one worker each, e.g. 0,1.")


def progress_option() -> Any:
    return typer.Option(True, "--progress/--no-progress", help="Live view on a terminal.")
