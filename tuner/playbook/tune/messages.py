"""What ``tune`` says as it goes, as typed messages for its caller to render (``tuner tune``
prints them: ``tuner.cli._tune_view``).

They go to a function the caller passes (``Emit``), not out of a generator: a decision is said
the moment it is stored, from deep in the loop, and the messages interleave with what each
phase shows while it runs (its header, live view and summary, drawn by the phase runner). A
generator would have to be threaded through every step that decides (``yield from`` all the
way down) to keep that order.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tuner.playbook.decision_log import Decision, Stage, TuneState

if TYPE_CHECKING:
    from tuner.playbook.tune_plan import TunePlan


@dataclass(frozen=True)
class Note:
    """A line on how the run goes that decides nothing: a duration converted to steps, a fresh
    search, a failure budget, round 1's mode on a run that continues."""

    text: str


@dataclass(frozen=True)
class Decided:
    """A decision, stored in the log before anything acts on it."""

    decision: Decision


@dataclass(frozen=True)
class StageSkipped:
    """A stage an earlier run of the same command finished: not run again."""

    stage: Stage


@dataclass(frozen=True)
class BudgetStanding:
    """Where the whole budget stands, before each phase (the phases' own bars show only theirs):
    the steps trained so far, and the seconds the rest takes at most at the pace of every run so
    far (an upper bound: the rest may not all be spent)."""

    spent: int
    budget_steps: int
    seconds_left: float


@dataclass(frozen=True)
class Projected:
    """``--dry-run``'s answer: the plan within the budget, from what ran and what is decided;
    nothing ran."""

    study: str
    budget_steps: int
    plan: TunePlan


@dataclass(frozen=True)
class Spent:
    """After the last phase: the steps each phase trained, against the budget."""

    budget_steps: int
    plan: TunePlan


@dataclass(frozen=True)
class Finished:
    """The end: the state with its decision log, the plan as it ran, and the model the study
    delivers (the report's own object, handed on for the command to show: ``Delivery``; None
    when no round has a completed trial)."""

    state: TuneState
    plan: TunePlan
    model: Any


TuneMessage = Note | Decided | StageSkipped | BudgetStanding | Projected | Spent | Finished
Emit = Callable[[TuneMessage], None]


def silent(message: TuneMessage) -> None:
    """An ``Emit`` that says nothing: a projection for ``tuner estimate`` decides nothing to say."""
