"""Workload-side checks of a study: the entry point exists and the options fit it."""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from tuner.errors import WorkloadError
from tuner.spec import LoadedStudy, key_to_path
from tuner.spec._checks import candidate_values
from tuner.spec._paths import format_path, set_path
from tuner.workloads._builtins import BUILTINS
from tuner.workloads._entry_points import check_entry_point, parse_entry_point

_OPTIONS = ("workload", "options")


def _check_options(
    loaded: LoadedStudy, options: dict[str, Any], blame: tuple[tuple, Any] | None = None
) -> None:
    builtin = BUILTINS.get(loaded.spec.workload.name)
    if builtin is None:
        return
    try:
        builtin.options.model_validate(options)
    except ValidationError as error:
        located = loaded.validation_error(error, builtin.options, options, _OPTIONS)
        if blame is None:
            raise located from None
        here, value = blame
        message = f"value {value!r} does not fit {located.field}: {located.detail}"
        raise loaded.error(here, message, at_key=True) from None


def check_study(loaded: LoadedStudy) -> None:
    """Raise a located ``SpecError`` for a missing entry point, bad options or search keys."""
    spec = loaded.spec
    try:
        check_entry_point(parse_entry_point(spec.workload.name, loaded.base_dir))
    except WorkloadError as error:
        raise loaded.error(("workload", "name"), str(error)) from None
    _check_options(loaded, spec.workload.options)
    builtin = BUILTINS.get(spec.workload.name)
    for key, param in spec.search_space.items():
        target = key_to_path(key)
        if target[0] != "workload":
            continue
        here = ("search_space", key)
        option_path = target[2:]
        known = builtin.options.model_fields if builtin else spec.workload.options
        if target[:2] != _OPTIONS or len(option_path) != 1 or option_path[0] not in known:
            raise loaded.error(
                here, f"matches no config field (looked for {format_path(target)})", at_key=True
            )
        for value in candidate_values(param):
            options = set_path({"o": spec.workload.options}, ("o", *option_path), value)["o"]
            _check_options(loaded, options, blame=(here, value))
