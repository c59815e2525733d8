"""Commented study templates for ``tuner init`` (the same files as ``studies/*.yaml``)."""

from __future__ import annotations

import re
from importlib import resources

from tuner.errors import UsageError
from tuner.spec._yaml import parse_scalar


def template_names() -> list[str]:
    folder = resources.files("tuner.spec") / "templates"
    return sorted(p.name[:-5] for p in folder.iterdir() if p.name.endswith(".yaml"))


def render_template(template: str, study_name: str | None = None) -> str:
    """The template's text, with ``name:`` replaced by ``study_name`` when given."""
    if template not in template_names():
        raise UsageError(f"unknown template {template!r}; choose one of: {', '.join(template_names())}")
    text = (resources.files("tuner.spec") / "templates" / f"{template}.yaml").read_text(encoding="utf-8")
    if study_name:
        # `2024`, `true`, `1e3` would read back as numbers or booleans: quote what is not a string.
        quoted = study_name if isinstance(parse_scalar(study_name), str) else f'"{study_name}"'
        text = re.sub(r"(?m)^name: .*$", f"name: {quoted}", text, count=1)
    return text
