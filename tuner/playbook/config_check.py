"""Whether a study file still describes the phase it is used with, and if not, which fields differ.

A phase's trials must all train the same configuration (or the comparison between them means
nothing), so ``run-round`` re-run and ``tuner worker`` compare the study file they were given with
the configuration stored in the phase's plan. Budgets may change between runs (a larger
``trials`` adds slots; a longer ``timeout_h`` goes on); everything else that defines what a trial
trains may not: the workload, the objective, ``training``, the search space, the rounds' lengths,
samplers and top-k, and sweep-lr's grid and fit criterion.
"""

from __future__ import annotations

import json
from typing import Any

from tuner.errors import UsageError

DEFINING = ("seed", "workload", "objective", "training", "search_space", "sweep_lr", "rounds")
BUDGET_FIELDS = frozenset(
    {
        "trials",
        "parallel",
        "max_failed",
        "max_retries",
        "trial_timeout_s",
        "stall_multiple",
        "stall_min_s",
        "timeout_h",
        "stop_after_no_improvement",
    }
)
SHOWN_FIELDS = 4


def defining_fields(document: dict[str, Any], *, skip_rounds_from: int | None = None) -> dict[str, Any]:
    """The part of a study document (``model_dump(mode="json")``) that defines its trials.

    ``skip_rounds_from``: leave out ``rounds.roundN`` for N >= this (a later round's settings do
    not change what an earlier phase trained).
    """
    kept = {key: document[key] for key in DEFINING if key in document}
    rounds = {}
    for name, spec in (kept.get("rounds") or {}).items():
        number = int(name.removeprefix("round")) if name.removeprefix("round").isdigit() else None
        if skip_rounds_from is not None and number is not None and number >= skip_rounds_from:
            continue
        rounds[name] = {key: value for key, value in spec.items() if key not in BUDGET_FIELDS}
    kept["rounds"] = rounds
    return kept


def _leaves(data: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(data, dict) and data:
        found: dict[str, Any] = {}
        for key, value in data.items():
            found.update(_leaves(value, f"{prefix}.{key}" if prefix else str(key)))
        return found
    return {prefix: data}


def _short(value: Any) -> str:
    text = "(unset)" if value is _MISSING else json.dumps(value, sort_keys=True)
    return text if len(text) <= 40 else text[:37] + "..."


_MISSING = object()


def differing_fields(stored: dict[str, Any], current: dict[str, Any]) -> list[str]:
    """``["rounds.round1.steps (120 -> 200)", ...]`` between two ``defining_fields`` results."""
    old, new = _leaves(stored), _leaves(current)
    lines = []
    for key in sorted(old.keys() | new.keys()):
        before, after = old.get(key, _MISSING), new.get(key, _MISSING)
        if before != after:
            lines.append(f"{key} ({_short(before)} -> {_short(after)})")
    return lines


def refuse_changed_study(
    stored: dict[str, Any],
    current: dict[str, Any],
    *,
    what: str,
    where: str,
    skip_rounds_from: int | None = None,
) -> None:
    """One line naming the fields that differ, if any (``what``: the file; ``where``: the phase)."""
    changed = differing_fields(
        defining_fields(stored, skip_rounds_from=skip_rounds_from),
        defining_fields(current, skip_rounds_from=skip_rounds_from),
    )
    if not changed:
        return
    more = f" and {len(changed) - SHOWN_FIELDS} more" if len(changed) > SHOWN_FIELDS else ""
    raise UsageError(
        f"{what} differs from the study file that created {where}: "
        f"{', '.join(changed[:SHOWN_FIELDS])}{more}; "
        "use the same file and --set values, or another --output-dir / --storage (or study name) "
        "for the new configuration"
    )
