"""Does a value fit a study field? So the report never suggests a range the study would refuse
(a negative dropout, a weight decay below 0): checked against the stored configuration with the
same models ``tuner validate`` uses (the built-in workloads' option models included)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any


def field_checker(config: dict[str, Any]) -> Callable[[str, Any], bool]:
    """``fits(key, value)`` for search-space keys of the study ``config`` (a stored plan's)."""

    def fits(key: str, value: Any) -> bool:
        from pydantic import ValidationError

        from tuner.errors import SpecError
        from tuner.spec import StudySpec, key_to_path, set_path
        from tuner.workloads import BUILTINS

        path = key_to_path(key)
        try:
            if path[0] == "workload":
                builtin = BUILTINS.get(str(config.get("workload", {}).get("name")))
                if builtin is None:
                    return True  # a user's workload: its options are its own business
                options = dict(config.get("workload", {}).get("options") or {})
                options = set_path({"o": options}, ("o", *path[2:]), value)["o"]
                builtin.options.model_validate(options)
                return True
            StudySpec.model_validate_json(json.dumps(set_path(config, path, value)))
            return True
        except (ValidationError, SpecError, ValueError, KeyError, IndexError, TypeError):
            return False

    return fits
