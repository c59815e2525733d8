"""The reference pages of the docs site, rendered from the code so that they cannot drift.

``study_file_reference()`` documents every study-file field from the pydantic models' own
descriptions (each field's docstring in ``tuner/spec/_*models.py``); ``cli_reference()`` every
command, argument and option from this app's help texts. A field or an option without a
description raises ``ValueError`` naming it, so the docs build (``make docs``) fails on it.
"""

from __future__ import annotations

import re
import types
import typing
from pathlib import Path
from typing import Any

import typer
from pydantic import BaseModel
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

from tuner._atomic import atomic_write_text
from tuner.cli.app import app
from tuner.spec import StudySpec
from tuner.spec._models import (
    CategoricalParam,
    FloatParam,
    IntParam,
    ObjectiveSpec,
    OptimizerSpec,
    RoundSpec,
    ScheduleSegment,
    SweepLrSpec,
    TrainingSpec,
    WorkloadSpec,
)


def _type_name(annotation: Any) -> str:
    """``int | None`` -> ``integer or null``; ``Literal['a', 'b']`` -> ```a`, `b```: what YAML takes."""
    origin = typing.get_origin(annotation)
    args = [a for a in typing.get_args(annotation) if not isinstance(a, FieldInfo)]
    if origin is typing.Annotated:
        return _type_name(args[0])
    if origin in (typing.Union, types.UnionType):
        names = [_type_name(a) for a in args if a is not type(None)]
        return " or ".join(names) + (" or null" if type(None) in args else "")
    if origin is typing.Literal:
        return ", ".join(f"`{a}`" for a in args)
    if origin is list:
        return f"list of {_type_name(args[0])}"
    if origin is dict:
        return "mapping"
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return "mapping"
    return {int: "integer", float: "number", str: "string", bool: "boolean"}.get(annotation, "any")


def _default(field: FieldInfo) -> str:
    if field.is_required():
        return "required"
    value = field.default_factory() if field.default is PydanticUndefined else field.default  # type: ignore[call-arg,misc]
    if value is None:
        return "none"
    if isinstance(value, BaseModel):
        return "see below"
    if isinstance(value, list) and value and isinstance(value[0], BaseModel):
        return "; ".join(str(v.model_dump(exclude_defaults=True)) for v in value)
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    return f"`{value}`" if value != "" else '`""`'


def field_rows(model: type[BaseModel], prefix: str = "") -> list[tuple[str, str, str, str]]:
    """(key, type, default, description) of each field of ``model``; raises on a missing one."""
    rows = []
    for name, field in model.model_fields.items():
        if not field.description:
            raise ValueError(f"{model.__name__}.{name} has no description")
        rows.append((f"{prefix}{name}", _type_name(field.annotation), _default(field), field.description))
    return rows


def _cell(text: str) -> str:
    """A help or description text as one Markdown table cell: one line, no column breaks."""
    return " ".join(text.split()).replace("|", "&#124;")


def _table(rows: list[tuple[str, str, str, str]]) -> str:
    lines = ["| field | type | default | description |", "| --- | --- | --- | --- |"]
    lines += [f"| `{key}` | {kind} | {default} | {_cell(text)} |" for key, kind, default, text in rows]
    return "\n".join(lines) + "\n"


#: the reference's sections, in order: (title, model, key prefix, a lead before the model's docstring)
SECTIONS: list[tuple[str, type[BaseModel], str, str]] = [
    ("(top level)", StudySpec, "", ""),
    ("workload", WorkloadSpec, "workload.", ""),
    ("objective", ObjectiveSpec, "objective.", ""),
    ("training", TrainingSpec, "training.", ""),
    ("training.optimizer", OptimizerSpec, "training.optimizer.", ""),
    ("training.schedule[]", ScheduleSegment, "", "Each segment of `training.schedule`."),
    ("search_space.KEY (float)", FloatParam, "", ""),
    ("search_space.KEY (int)", IntParam, "", ""),
    ("search_space.KEY (categorical)", CategoricalParam, "", ""),
    ("sweep_lr", SweepLrSpec, "sweep_lr.", ""),
    (
        "rounds.roundN",
        RoundSpec,
        "",
        "`rounds.round1`, `rounds.round2`, and optionally `round3`... (each from the previous round's best).",
    ),
]


def _section(title: str, model: type[BaseModel], prefix: str, lead: str) -> str:
    doc = " ".join(f"{lead} {model.__doc__ or ''}".split())
    return f"## `{title}`\n\n{doc}\n\n{_table(field_rows(model, prefix))}\n"


def study_file_reference() -> str:
    """The study file's every field: the top level, then each nested mapping."""
    head = (
        "# Study file reference\n\n"
        "Generated from the study file's models (`tuner/spec/_*models.py`) each time the docs "
        "build. How the fields work together: [the study file](../guide/study-file.md).\n\n"
    )
    return head + "".join(_section(*section) for section in SECTIONS)


def _param_row(param: Any) -> tuple[str, str, str]:
    help_text = getattr(param, "help", None)
    if not help_text:
        raise ValueError(f"{param.name} has no help")
    if param.param_type_name == "option":
        names = ", ".join(f"`{o}`" for o in [*param.opts, *param.secondary_opts])
        if not param.is_flag and param.metavar:
            names += f" `{param.metavar}`"
        default = param.default
        if default in (None, False, (), []):
            shown = ""
        elif param.is_flag and param.secondary_opts:
            shown = f"`{param.opts[0] if default else param.secondary_opts[0]}`"
        else:
            shown = f"`{default}`"
        if param.envvar:
            shown = f"{shown} (`${param.envvar}`)".strip()
        return names, shown, help_text
    return f"`{(param.metavar or param.name).upper()}`", "required" if param.required else "", help_text


def command_rows(command: Any) -> list[tuple[str, str, str]]:
    """(names, default, help) of each argument and option; raises on a missing help.

    ``command`` is a command of ``typer.main.get_command(app)`` (typer's own click).
    """
    try:
        return [_param_row(p) for p in command.params if not getattr(p, "hidden", False)]
    except ValueError as error:
        raise ValueError(f"tuner {command.name}: {error}") from None


def cli_reference() -> str:
    group = typer.main.get_command(app)
    parts = [
        "# Command reference\n\n",
        "Generated from the typer app (`tuner/cli/`) each time the docs build; `tuner COMMAND "
        "--help` prints the same. Every command exits 0 on success, 1 when the work failed, 2 on "
        "bad input, 70 on a bug in tuner, 130 when interrupted "
        "([commands, errors and exit codes](../guide/commands.md)).\n\n",
    ]
    for name in sorted(group.commands):
        command = group.commands[name]
        if command.hidden:
            continue
        if not command.help:
            raise ValueError(f"tuner {name} has no help")
        usage = " ".join(command.collect_usage_pieces(typer.Context(command, info_name=name)))
        parts.append(f"## `tuner {name}`\n\n```\ntuner {name} {usage}\n```\n\n")
        parts.append(_help_markdown(command.help) + "\n\n")
        parts.append("| argument or option | default | meaning |\n| --- | --- | --- |\n")
        for names, default, text in command_rows(command):
            parts.append(f"| {names} | {default} | {_cell(text)} |\n")
        parts.append("\n")
    return "".join(parts)


def _help_markdown(text: str) -> str:
    """A command's help as Markdown: click's ``\\b`` no-rewrap markers dropped."""
    return re.sub(r"^\s*\x08\s*$", "", text, flags=re.MULTILINE).strip()


#: the reference pages under ``docs/reference/``, as ``make docs`` writes them
PAGES = {"study-file.md": study_file_reference, "cli.md": cli_reference}


def write_pages(folder: str | Path) -> list[Path]:
    """Write the reference pages into ``folder`` (committed, so that links to them work on any
    forge; the suite fails when a committed page differs from what the code renders)."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    for name, render in PAGES.items():
        path = folder / name
        atomic_write_text(path, render(), durable=False)
        written.append(path)
    return written


if __name__ == "__main__":
    import sys

    for page in write_pages(sys.argv[1] if len(sys.argv) > 1 else "docs/reference"):
        print(f"wrote {page}")
