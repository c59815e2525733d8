"""The docs cannot drift: every study-file field and every command option carries its own
description (the reference pages are rendered from them), the README stays a first screen,
and the project speaks of itself alone."""

from __future__ import annotations

import re
import typing
from pathlib import Path

import pytest
import typer
from pydantic import BaseModel, Field

from tuner.cli.app import app
from tuner.cli.reference import SECTIONS, cli_reference, command_rows, field_rows, study_file_reference
from tuner.spec import StudySpec
from tuner.spec._models import RoundsSpec

ROOT = Path(__file__).resolve().parent.parent


def _models(model: type[BaseModel], seen: set[type[BaseModel]]) -> set[type[BaseModel]]:
    """Every model a study file can reach from ``model``, through unions, lists and mappings."""
    if model in seen:
        return seen
    seen.add(model)
    for field in model.model_fields.values():
        stack = [field.annotation]
        while stack:
            annotation = stack.pop()
            if isinstance(annotation, type) and issubclass(annotation, BaseModel):
                _models(annotation, seen)
            stack.extend(typing.get_args(annotation))
    return seen


def test_every_study_file_field_has_a_description_and_a_row_in_the_reference() -> None:
    page = study_file_reference()
    models = _models(StudySpec, set())
    assert len(models) >= 10  # the walk reaches the nested models, not just the top level
    # each has a section of its own, but ``rounds`` (its round1, round2 share RoundSpec's section)
    assert models - {section[1] for section in SECTIONS} == {RoundsSpec}
    for model in models:
        for key, _kind, _default, description in field_rows(model):
            assert description.strip(), f"{model.__name__}.{key}"
            assert f"{key}`" in page, f"{model.__name__}.{key} is not on the study-file reference page"


def test_every_command_argument_and_option_has_help() -> None:
    group = typer.main.get_command(app)
    commands = group.commands  # type: ignore[attr-defined]
    assert {"tune", "report", "run-round", "sweep-lr", "list"} <= set(commands)
    page = cli_reference()
    for name, command in commands.items():
        if command.hidden:
            continue
        assert command.help, name
        rows = command_rows(command)
        assert rows, name
        assert f"## `tuner {name}`" in page
        for names, _default, help_text in rows:
            assert help_text.strip(), f"tuner {name} {names}"


def test_a_field_without_a_description_fails_the_reference() -> None:
    class Documented(BaseModel):
        size: int = Field(3, description="How big.")
        colour: str = "red"

    with pytest.raises(ValueError, match=r"Documented\.colour has no description"):
        field_rows(Documented)


def test_an_option_without_help_fails_the_reference() -> None:
    lonely = typer.Typer()

    @lonely.command()
    def go(count: int = typer.Option(1, "--count"), loud: bool = typer.Option(False, help="Shout.")) -> None:
        """Go."""

    with pytest.raises(ValueError, match="count has no help"):
        command_rows(typer.main.get_command(lonely))


def test_the_readme_is_a_first_screen_whose_links_exist() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(readme.splitlines()) <= 300
    for command in ("make demo", "make test", "tuner init", "tuner tune", "load_model"):
        assert command in readme
    links = re.findall(r"\]\((docs/[^)#]+)", readme)
    assert len(links) >= 10
    for link in links:
        assert (ROOT / link).is_file(), link


DIARY = re.compile(r"(session|issue) [0-9]", re.IGNORECASE)


def test_the_project_speaks_of_itself_alone() -> None:
    """No numbered work periods or tracker numbers in the docs, code, tests or benchmarks."""
    folders = ["README.md", "docs", "tuner", "tests", "benchmarks", "examples", "studies", "Makefile"]
    found = []
    for entry in folders:
        path = ROOT / entry
        files = [path] if path.is_file() else [p for p in path.rglob("*") if p.is_file()]
        for file in files:
            if file.suffix in {".png", ".pyc", ".db", ".pt"} or "__pycache__" in file.parts:
                continue
            text = file.read_text(encoding="utf-8", errors="ignore")
            found += [f"{file.relative_to(ROOT)}: {m.group(0)}" for m in DIARY.finditer(text)]
    assert found == []


@pytest.mark.parametrize("name", ["study-file.md", "cli.md"])
def test_the_committed_reference_pages_are_what_the_code_renders(name: str) -> None:
    from tuner.cli.reference import PAGES

    committed = (ROOT / "docs" / "reference" / name).read_text(encoding="utf-8")
    assert committed == PAGES[name](), f"docs/reference/{name} is stale: run `make docs` and commit it"
