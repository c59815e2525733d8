"""A verdict: a finding in plain words, with the numbers behind it as fields (for ``--json``).

sweep-lr's verdicts and the report's findings share this base, so every JSON verdict has the same
shape: ``kind``, the verdict's own numbers, ``text`` and ``advice``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields
from enum import StrEnum
from typing import Any, ClassVar


def jsonable(value: Any) -> Any:
    """``value`` for ``json.dumps``: NaN/inf become ``None`` (JSON has no such numbers), enums
    their value, tuples lists, dataclass-like objects with ``to_json`` their JSON."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, StrEnum):
        return str(value)
    if hasattr(value, "to_json"):
        return jsonable(value.to_json())
    return value


@dataclass(frozen=True)
class Verdict:
    """A finding: its numbers as fields, ``text`` in plain words, maybe ``advice``."""

    kind: ClassVar[str] = "verdict"
    text: str = field(default="", kw_only=True)
    advice: str | None = field(default=None, kw_only=True)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"kind": self.kind}
        for f in fields(self):
            out[f.name] = jsonable(getattr(self, f.name))
        return out
