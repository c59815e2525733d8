"""The ``--set`` values of what ``tuner tune`` decided itself before round 1 (``own_settings.py``
takes the decisions; every phase after them runs these values, read back from the log)."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from tuner.spec import key_to_path

if TYPE_CHECKING:
    from tuner.playbook.tune.context import TuneContext

#: each decision's kind and the study-file key its ``--set`` value sets
OWN_KEYS = {
    "length_raised": "max_train_steps",
    "schedule_scaled": "schedule",
    "eval_every_lowered": "eval_every",
}


def own_sets(context: TuneContext, *, home: bool) -> list[str]:
    """The ``--set`` values of ``tune``'s own decisions; for a next study (not ``home``), without
    those whose key a suggestion applied to it changed."""
    changed = [
        tuple(path)
        for d in context.state.decisions
        if d.kind == "suggestions_applied"
        for path in d.numbers.get("paths", [])
    ]
    sets = []
    for decision in context.state.decisions:
        key = OWN_KEYS.get(decision.kind)
        if key is None:
            continue
        path = key_to_path(key)
        if not home and any(p[: len(path)] == path or path[: len(p)] == p for p in changed):
            continue
        sets.append(f"{key}={json.dumps(decision.numbers['value'])}")
    return sets
