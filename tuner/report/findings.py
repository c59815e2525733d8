"""What every diagnostic returns: findings (a verdict with its level and rule) and suggestions.

A ``Finding`` is a verdict in plain words with the numbers behind it as fields, the rule that
produced it (printed with it: "consistently" must mean something a user can check), and a level:
``warning`` (act on it), ``ok`` (checked, nothing to do) or ``info`` (context, or too little data
to judge). A ``Suggestion`` is a concrete change to the study file, with its reason: what
``tuner report --write-next`` applies.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, ClassVar

from tuner.playbook.verdicts import Verdict, jsonable


class Level(StrEnum):
    WARNING = "warning"
    OK = "ok"
    INFO = "info"


@dataclass(frozen=True)
class Finding(Verdict):
    """A report verdict: ``kind`` (stable, for scripts), its numbers, ``text``, ``advice``, ``rule``."""

    kind: ClassVar[str] = "finding"
    level: Level = field(default=Level.INFO, kw_only=True)
    rule: str | None = field(default=None, kw_only=True)


@dataclass(frozen=True)
class Suggestion:
    """Set ``path`` (a path into the study file, e.g. ``("search_space", "optimizer.lr", "high")``)
    from ``old`` to ``new``; ``reason`` becomes the YAML comment above the change. ``new`` None
    removes the key; ``drop`` removes one value from a list (a categorical choice)."""

    path: tuple[str | int, ...]
    old: Any
    new: Any
    reason: str
    drop: Any = None

    @property
    def key(self) -> str:
        return ".".join(str(part) for part in self.path)

    def to_json(self) -> dict[str, Any]:
        return {
            "key": self.key,
            "path": list(self.path),
            "old": jsonable(self.old),
            "new": jsonable(self.new),
            "drop": jsonable(self.drop),
            "reason": self.reason,
        }


def fmt(value: Any) -> str:
    """A number as the report prints it: 4 significant digits, no trailing noise."""
    if isinstance(value, bool) or value is None:
        return str(value)
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            return str(value)
        return f"{value:.4g}"
    return str(value)


def pct(share: float) -> str:
    """0.083 -> ``8%``; 0.0049 -> ``0.5%``."""
    return f"{share * 100:.0f}%" if share * 100 >= 1 or share == 0 else f"{share * 100:.1g}%"


def of(count: int, total: int, noun: str = "trials") -> str:
    """``3 of 5 trials``."""
    return f"{count} of {total} {noun if total != 1 else noun.rstrip('s')}"


def ordinal(n: int) -> str:
    """1 -> ``1st``, 12 -> ``12th``, 23 -> ``23rd``."""
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"
