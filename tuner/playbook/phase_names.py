"""The phases' names: ``sweep-lr``, ``round-1``, ``round-2``... and which a study has.

Its own module, below everything that builds or runs a phase, so that the plan builders
(``round1.py``, ``later_rounds.py``, ``sweep_phase.py``) and ``phases.py``, which calls them,
both import it without importing each other.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tuner.spec import StudySpec

SWEEP_PHASE = "sweep-lr"


def round_phase(number: int) -> str:
    return f"round-{number}"


def round_number(phase: str) -> int | None:
    """``round-2`` -> 2; None for another phase."""
    head, _, tail = phase.partition("-")
    return int(tail) if head == "round" and tail.isdigit() and int(tail) >= 1 else None


def known_phases(spec: StudySpec) -> list[str]:
    return [SWEEP_PHASE, *(round_phase(n) for n in spec.rounds.numbers)]
