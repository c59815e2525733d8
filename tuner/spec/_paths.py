"""Dotted keys (``optimizer.lr``, ``workload.dropout``) -> paths into the study document.

One rule for the search space and for ``--set``, so a key that works in one works in the other:
``workload.X`` means ``workload.options.X``; a top-level study field (``seed``, ``objective...``)
means itself; anything else is relative to ``training`` (``optimizer.lr`` is
``training.optimizer.lr``; ``training.`` may also be written out).
"""

from __future__ import annotations

import copy
import difflib
from typing import Any

Path_ = tuple[str | int, ...]

_TOP_LEVEL = (
    "name",
    "description",
    "seed",
    "search_seed",
    "objective",
    "training",
    "search_space",
    "sweep_lr",
    "rounds",
    "storage",
    "workload",
)


def key_to_path(key: str) -> Path_:
    parts: list[str | int] = [int(p) if p.isdigit() else p for p in key.split(".")]
    head = parts[0]
    if head == "workload":
        if len(parts) > 1 and parts[1] not in ("options", "name"):
            return ("workload", "options", *parts[1:])
        return tuple(parts)
    if head in _TOP_LEVEL:
        return tuple(parts)
    return ("training", *parts)


def format_path(path: Path_) -> str:
    """``('search_space', 'optimizer.lr', 'low')`` -> ``search_space[optimizer.lr].low``."""
    text = ""
    for part in path:
        if isinstance(part, int) or "." in part:
            text += f"[{part}]"
        else:
            text += f".{part}" if text else part
    return text


def get_path(data: Any, path: Path_) -> Any:
    """The value at ``path``; ``KeyError`` if any step is missing."""
    for part in path:
        if (isinstance(data, dict) and part in data) or (
            isinstance(data, list) and isinstance(part, int) and 0 <= part < len(data)
        ):
            data = data[part]
        else:
            raise KeyError(part)
    return data


def has_path(data: Any, path: Path_) -> bool:
    try:
        get_path(data, path)
    except KeyError:
        return False
    return True


def set_path(data: dict[str, Any], path: Path_, value: Any, defaults: Any = None) -> dict[str, Any]:
    """A deep copy of ``data`` with ``value`` at ``path``.

    A missing container on the way is copied from ``defaults`` (e.g. the default schedule list,
    so ``schedule.0.shape`` works on a study that leaves ``schedule`` out), else a new mapping.
    """
    result = copy.deepcopy(data)
    node: Any = result
    for depth, part in enumerate(path[:-1]):
        if isinstance(node, list):
            node = node[part]  # type: ignore[index]
            continue
        if not isinstance(node.get(part), (dict, list)):
            fallback = (
                get_path(defaults, path[: depth + 1]) if has_path(defaults, path[: depth + 1]) else None
            )
            node[part] = copy.deepcopy(fallback) if isinstance(fallback, (dict, list)) else {}
        node = node[part]
    node[path[-1]] = value
    return result


def _dotted_keys(data: Any, prefix: tuple[str, ...] = ()) -> list[str]:
    """Every leaf and container of ``data`` as the dotted key a user would write."""
    keys: list[str] = []
    if isinstance(data, dict):
        for name, value in data.items():
            if not isinstance(name, str) or name in ("search_space", "options"):
                continue
            path = (*prefix, name)
            keys.append(".".join(path))
            if path[0] == "training" and len(path) > 1:
                keys.append(".".join(path[1:]))  # ``optimizer.lr`` is how keys are usually written
            keys += _dotted_keys(value, path)
    return keys


def did_you_mean(key: str, data: Any, extra: tuple[str, ...] = ()) -> str:
    """`` (did you mean 'optimizer.lr'?)`` for a key close to one in ``data``, else ``""``."""
    candidates = [c for c in dict.fromkeys([*_dotted_keys(data), *extra]) if c != key]
    close = difflib.get_close_matches(key, candidates, n=1, cutoff=0.7)
    return f" (did you mean {close[0]!r}?)" if close else ""
