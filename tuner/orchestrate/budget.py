"""Where a phase stands against its budgets, and whether a worker may start another trial.

Counts are made from the storage (never from a worker's memory), so they hold across workers
and machines. A failed trial that was retried is not a failure of the phase: only the last
attempt of a slot counts.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from tuner.orchestrate.phase import PhaseSettings

FAILURE_WARNING_RATE = 0.2
DUPLICATE_ATTR = "duplicate_of"  # a trial that lost a race for its slot (see claim.py): never counted


@dataclass
class PhaseCounts:
    completed: int = 0
    failed: int = 0  # final failures: retried attempts excluded
    running: int = 0
    waiting: int = 0
    unproven: int = 0  # running trials that have not finished a training step yet
    slots: int = 0  # slots started so far (a retry reuses its slot)
    next_slot: int = 0  # the number the next new slot gets
    reasons: Counter[str] = field(default_factory=Counter)
    best_value: float | None = None
    best_number: int | None = None

    @property
    def finished(self) -> int:
        return self.completed + self.failed

    @property
    def failure_rate(self) -> float:
        return self.failed / self.finished if self.finished else 0.0

    def to_start(self, settings: PhaseSettings) -> int:
        """Trials not started yet: retries waiting, plus slots of the budget never started."""
        return self.waiting + max(0, settings.max_trials - self.slots)

    def failure_summary(self) -> str:
        """``2 crashed, 1 diverged``."""
        return ", ".join(f"{count} {reason}" for reason, count in sorted(self.reasons.items()))


def count_trials(trials: Iterable[Any], direction: str = "minimize") -> PhaseCounts:
    """Tally Optuna ``FrozenTrial``s of one phase (a slot's duplicate trial counts for nothing)."""
    from optuna.trial import TrialState

    counts = PhaseCounts()
    slots: set[int] = set()
    for trial in trials:
        if DUPLICATE_ATTR in trial.user_attrs:
            continue
        slots.add(int(trial.user_attrs.get("slot", trial.number)))
        if trial.state == TrialState.COMPLETE:
            counts.completed += 1
            value = trial.value
            if (
                value is not None
                and math.isfinite(value)
                and (
                    counts.best_value is None
                    or (value < counts.best_value if direction == "minimize" else value > counts.best_value)
                )
            ):
                counts.best_value, counts.best_number = value, trial.number
        elif trial.state == TrialState.PRUNED:
            counts.completed += 1
        elif trial.state == TrialState.FAIL:
            if not trial.user_attrs.get("retried"):
                counts.failed += 1
                counts.reasons[trial.user_attrs.get("failure_reason", "crashed")] += 1
        elif trial.state == TrialState.RUNNING:
            counts.running += 1
            if not trial.user_attrs.get("healthy"):
                counts.unproven += 1
        elif trial.state == TrialState.WAITING:
            counts.waiting += 1
    counts.slots, counts.next_slot = len(slots), max(slots, default=-1) + 1
    return counts


@dataclass(frozen=True)
class Decision:
    """What a worker does next: ``start`` a trial, ``wait``, or stop (``done`` / ``failed``)."""

    action: str
    reason: str = ""


def decide(counts: PhaseCounts, settings: PhaseSettings) -> Decision:
    """The budget rules, in order.

    - Failure budget reached: stop the phase (exit code 1).
    - Nothing left to start (no retry waiting, every slot of the budget started): done if
      nothing runs either, else wait (a running trial may die and be retried).
    - ``max_parallel`` trials running: wait.
    - A trial starts only if every running trial that has not yet proven itself (finished
      a training step) could fail without the phase overshooting its failure budget. Trials that
      crash do so at once, so a phase of crashing trials stops at exactly ``max_failed``;
      healthy trials stop reserving budget after their first step, so parallelism is not lost.
    """
    if counts.failed >= settings.max_failed:
        return Decision(
            "failed",
            f"the failure budget is spent: {counts.failed} of {counts.finished} finished "
            f"{'trial' if counts.finished == 1 else 'trials'} failed "
            f"({counts.failure_summary()}); the limit is {settings.max_failed}",
        )
    if counts.to_start(settings) == 0:
        return Decision("done") if counts.running == 0 else Decision("wait", "the last trials are running")
    if settings.max_parallel is not None and counts.running >= settings.max_parallel:
        return Decision(
            "wait",
            f"{counts.running} {'trial' if counts.running == 1 else 'trials'} running "
            f"(max_parallel {settings.max_parallel})",
        )
    if counts.failed + counts.unproven + 1 > settings.max_failed:
        return Decision("wait", "waiting for running trials to prove healthy before spending failure budget")
    return Decision("start")
