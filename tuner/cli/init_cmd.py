"""``tuner init TEMPLATE PATH``: write a commented study to start from."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import typer

from tuner._atomic import atomic_write_text
from tuner.cli._console import out
from tuner.cli._errors import guarded
from tuner.errors import UsageError
from tuner.spec._templates import render_template, template_names


@guarded
def init(
    template: str = typer.Argument(
        ..., metavar="TEMPLATE", help="Template: digits-mlp, digits-cnn, char-lm or imbalanced."
    ),
    path: Path = typer.Argument(
        ..., metavar="PATH", help="Where to write the study file, e.g. studies/my-study.yaml."
    ),
    force: bool = typer.Option(False, "--force", help="Overwrite an existing file."),
) -> None:
    """Write a commented study file from a built-in template."""
    if path.is_dir():
        raise UsageError(f"{path} is a folder; give the path of the study file to write")
    if path.exists() and not force:
        raise UsageError(f"{path} already exists (use --force to overwrite)")
    study_name = re.sub(r"[^A-Za-z0-9._-]", "-", path.stem).lstrip(".-_")[:64] or template
    text = render_template(template, study_name)
    atomic_write_text(path, text)
    out.print(f"wrote {path} (template {template}, study name {study_name!r})")
    out.print(f"next: tuner validate {shlex.quote(str(path))}")


init.__doc__ = (init.__doc__ or "") + f"\n\nTemplates: {', '.join(template_names())}."
