"""Pydantic errors -> one plain sentence: what was expected, what was found."""

from __future__ import annotations

import difflib
import typing
from typing import Any

from pydantic import BaseModel
from pydantic_core import ErrorDetails

from tuner.spec._paths import Path_


def describe(value: Any) -> str:
    if isinstance(value, str):
        return f"{value!r} (a string)" if value.strip() else "an empty string"
    if value is None:
        return "nothing (null)"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    return repr(value)


def _bound(error: ErrorDetails, op: str, key: str) -> str:
    bound = (error.get("ctx") or {}).get(key)
    value = error["input"]
    if isinstance(value, int) and not isinstance(value, bool) and bound == 0:
        kind = "a positive integer" if op == ">" else "a non-negative integer"
        return f"expected {kind}, got {describe(value)}"
    return f"expected a number {op} {bound}, got {describe(value)}"


def message_for(error: ErrorDetails, model: type[BaseModel], path: Path_) -> str:
    kind = error["type"]
    value = error.get("input")
    ctx = error.get("ctx") or {}
    if kind == "missing":
        return "missing required field"
    if kind == "extra_forbidden":
        allowed = allowed_fields(model, path[:-1])
        hint = ""
        if allowed:
            close = difflib.get_close_matches(str(path[-1]), allowed, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else f" (expected one of: {', '.join(allowed)})"
        return f"unknown field {path[-1]!r}{hint}"
    simple = {
        "int_type": "an integer",
        "int_from_float": "an integer",
        "int_parsing": "an integer",
        "float_type": "a number",
        "float_parsing": "a number",
        "bool_type": "true or false",
        "string_type": "a string",
        "list_type": "a list",
        "dict_type": "a mapping",
        "model_type": "a mapping",
        "model_attributes_type": "a mapping",
    }
    if kind in simple:
        return f"expected {simple[kind]}, got {describe(value)}"
    if kind == "greater_than":
        return _bound(error, ">", "gt")
    if kind == "greater_than_equal":
        return _bound(error, ">=", "ge")
    if kind in ("less_than", "less_than_equal"):
        op, key = ("<", "lt") if kind == "less_than" else ("<=", "le")
        return f"expected a number {op} {ctx.get(key)}, got {describe(value)}"
    if kind == "literal_error":
        return f"expected {ctx.get('expected')}, got {describe(value)}"
    if kind == "union_tag_invalid":
        return f"expected type {ctx.get('expected_tags')}, got {describe(ctx.get('tag'))}"
    if kind == "union_tag_not_found":
        return "missing 'type' (expected 'float', 'int' or 'categorical')"
    if kind == "string_pattern_mismatch":
        if path and path[-1] == "name":
            return (
                f"expected a name of letters, digits, '.', '_' or '-' starting with a letter or digit "
                f"(it becomes a folder name), got {describe(value)}"
            )
        return f"expected text matching {ctx.get('pattern')}, got {describe(value)}"
    if kind == "string_too_long" and path and path[-1] == "name":
        return (
            f"a study name has at most {ctx.get('max_length')} characters (it names the study's folder "
            f"and, with its phase, the study in the storage), got {len(str(value))}: {describe(value)}"
        )
    if kind in ("too_short", "string_too_short"):
        return f"expected at least {ctx.get('min_length')} item(s), got {describe(value)}"
    if kind == "value_error":
        return str(ctx.get("error", error["msg"]))
    return f"{error['msg'][0].lower()}{error['msg'][1:]}, got {describe(value)}"


def _models_in(annotation: Any) -> list[type[BaseModel]]:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    found: list[type[BaseModel]] = []
    for arg in typing.get_args(annotation):
        found.extend(_models_in(arg))
    return found


def allowed_fields(model: type[BaseModel], path: Path_) -> list[str]:
    """Field names valid at ``path`` (best effort through dicts, lists and unions)."""
    models = [model]
    for part in path:
        next_models: list[type[BaseModel]] = []
        for candidate in models:
            if isinstance(part, str) and part in candidate.model_fields:
                next_models.extend(_models_in(candidate.model_fields[part].annotation))
        if next_models:  # else a dict key or list index: the item models stay the same
            models = next_models
    names: list[str] = []
    for candidate in models:
        names.extend(n for n in candidate.model_fields if n not in names)
    return names
