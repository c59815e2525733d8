"""Every built-in reads every option it is given, and uses every option it validates: the engine
refuses an option a workload never reads, so a built-in must never be the one that does not."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

from tuner.workloads import BUILTINS, RecordedOptions, WorkloadContext, import_entry_point, parse_entry_point


@pytest.mark.parametrize("name", sorted(BUILTINS))
def test_a_builtin_given_every_option_reads_them_all(name: str) -> None:
    builtin = BUILTINS[name]
    options = RecordedOptions(builtin.options().model_dump())
    assert set(options) == set(builtin.options.model_fields)
    options.asked.clear()  # the line above looked at every key
    build = import_entry_point(parse_entry_point(name, Path.cwd()))
    build(WorkloadContext(options=options, seed=0))
    assert options.unread() == []


@pytest.mark.parametrize("name", sorted(BUILTINS))
def test_a_builtin_uses_every_option_it_validates(name: str) -> None:
    """Read is not used: pydantic reads every key of a model that forbids extras, so a field the
    built-in validated and then ignored would pass the engine's check. Each field must appear as
    ``opts.<field>`` in the built-in's module."""
    builtin = BUILTINS[name]
    module = importlib.import_module(builtin.entry_point.partition(":")[0])
    tree = ast.parse(Path(module.__file__ or "").read_text(encoding="utf-8"))
    used = {
        node.attr
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "opts"
    }
    assert set(builtin.options.model_fields) - used == set()
