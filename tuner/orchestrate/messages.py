"""What a trial's child process tells its worker, and how a supervised trial ended.

Messages cross the pipe pickled: they are frozen dataclasses of plain values. The worker turns
each into storage writes (``record.py``); an ``Outcome`` is what the supervisor hands on once the
child is gone.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tuner.orchestrate.failures import FailureReason
from tuner.orchestrate.stall import Stalled


@dataclass(frozen=True)
class Started:
    """Training began (or resumed) at ``step``."""

    step: int


@dataclass(frozen=True)
class Healthy:
    """The first training step finished: the trial stops reserving failure budget."""

    step: int


@dataclass(frozen=True)
class Evaluated:
    step: int
    value: float


@dataclass(frozen=True)
class CheckpointSaved:
    """A checkpoint of ``step`` is on disk: a retry would resume from there."""

    step: int


@dataclass(frozen=True)
class Finished:
    """The run ended by itself: ``status`` as the training engine reports it."""

    status: str  # completed | stopped | diverged | interrupted | ...
    message: str
    step: int
    best_value: float | None
    best_step: int | None
    resumed_from_step: int | None
    train_s: float
    attrs: dict[str, Any] = field(default_factory=dict)  # recorded on the trial (e.g. fit_step)


@dataclass(frozen=True)
class Errored:
    """The run raised; the child classified it. ``workload``: the error is the workload's own
    (its code raised, or the study and the workload disagree), so the same code would raise it
    again in a fresh process."""

    reason: FailureReason
    message: str
    workload: bool = False


ChildMessage = Started | Healthy | Evaluated | CheckpointSaved | Finished | Errored


@dataclass(frozen=True)
class TimedOut:
    limit_s: float


@dataclass(frozen=True)
class Exited:
    """The child died without a result (a signal, ``os._exit``); ``signals``: stops we forwarded."""

    exitcode: int | None
    signals: int = 0
    unresponsive_s: float | None = None  # killed for not obeying a stop within this many seconds


@dataclass(frozen=True)
class Abandoned:
    """Another worker ended our trial while we were cut off: record nothing, touch nothing."""


Outcome = Finished | Errored | TimedOut | Stalled | Exited | Abandoned
