"""The ``tuner train`` command that re-runs one trial (or records how a run was started).

A trial trains the study file with the user's ``--set`` overrides, then its own values on top
(its point, round 2's LR multiplier and extended schedule, the round's length). The command
carries each key once, with the value the trial actually trained: an override the trial
overwrote is left out rather than shown next to the trial's value and relying on the last one
winning, which misleads a reader about what ran.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from tuner.spec import key_to_path, redact_storage_url


def reproduce_command(
    study_path: Path,
    values: Mapping[str, Any],
    steps: int | None,
    output_dir: Path,
    overrides: Iterable[str] = (),
) -> str:
    """``tuner train`` with the ``--set`` overrides and a trial's values, shell-quoted (``tuner
    train`` records its own run's command with no values and ``steps`` None).

    Paths are absolute so the command works from any folder. The overrides come first and only
    those still in effect: one the trial's values (or a later override) replace is dropped, and
    so is one of ``rounds`` (``tune``'s ``rounds.round3.seeds=1``...): ``tuner train`` trains one
    run, which no round's setting changes.
    """
    own = dict(values)
    if steps is not None:
        own["max_train_steps"] = steps
    words = ["tuner", "train", str(Path(study_path).resolve())]
    for text in overrides_in_effect(list(overrides), own):
        if _path(text.partition("=")[0])[:1] == ("rounds",):
            continue
        words += ["--set", redact_storage_url(text)]  # `--set storage=...` must not leak a password
    for key, value in own.items():
        words += ["--set", f"{key}={_format_value(value)}"]
    words += ["--output-dir", str(Path(output_dir).resolve())]
    return shlex.join(words)


def overrides_in_effect(overrides: list[str], values: Mapping[str, Any]) -> list[str]:
    """The ``key=value`` overrides nothing later replaces: neither a later override nor one of
    ``values`` sets the same key or a key that contains it (``schedule`` replaces
    ``schedule.0.steps``). An override of a container keeps its place when a later value sets
    only a key inside it (``optimizer={...}`` then ``optimizer.lr=...``): the rest still applies."""
    later = [_path(key) for key in values]
    kept: list[str] = []
    for text in reversed(overrides):
        path = _path(text.partition("=")[0])
        if not any(path[: len(replacing)] == replacing for replacing in later):
            kept.append(text)
        later.append(path)
    return kept[::-1]


def _path(key: str) -> tuple[str | int, ...]:
    return tuple(key_to_path(key.strip()))


def _format_value(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value)
