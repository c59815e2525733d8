"""Where a phase stands against its budgets, and whether a worker may start another trial.

Counts are made from the storage (never from a worker's memory), so they hold across workers
and machines. A failed trial that was retried is not a failure of the phase: only the last
attempt of a slot counts.

A diverged trial (NaN/inf loss) is information about the search space, not a failure of the
machinery: it fills its slot, is never retried nor best, and spends none of the failure budget.

Two budgets stop a phase before its trial budget is met, both read from the storage: a wall
time (``timeout_h``, from the run window's start, both on the storage's clock) and
``stop_after_no_improvement`` completed trials without a new best (in trial-number order). No
machine's own clock decides either. They only stop *new* trials: running ones finish.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from tuner import _clock
from tuner.orchestrate.phase import PhaseSettings

FAILURE_WARNING_RATE = 0.2
DUPLICATE_ATTR = "duplicate_of"  # a trial that lost a race for its slot (see claim.py): never counted
# the workload's own error before a trial's first step: never retried (the same code raises it
# again), and while no trial of the phase has trained a step it stops the phase (``decide``)
BROKEN_ATTR = "workload_broken"


def slot_key(trial: Any) -> tuple[int, int]:
    """(slot, attempt): what a trial fills. Two trials with one key are one of them too many."""
    return int(trial.user_attrs.get("slot", trial.number)), int(trial.user_attrs.get("attempt", 0))


def superseded(trials: Iterable[Any]) -> set[int]:
    """The numbers of the trials a later attempt of their slot replaced (its ``retry_of``): a
    retry, or a failure re-run once the workload's code changed (``failures.missing_retries``)."""
    return {int(t.user_attrs["retry_of"]) for t in trials if t.user_attrs.get("retry_of") is not None}


def final_failure(trial: Any, replaced: set[int]) -> bool:
    """A FAIL trial that stands as its slot's outcome: not marked ``retried``, not replaced by a
    later attempt (``replaced``: ``superseded``); diverged trials included (they are results).
    An Optuna ``FrozenTrial`` or a ``StoredTrial`` (whose state is the plain name)."""
    state = getattr(trial.state, "name", trial.state)
    return state == "FAIL" and not trial.user_attrs.get("retried") and trial.number not in replaced


def counted(trials: Iterable[Any]) -> list[Any]:
    """The trials that count: one per (slot, attempt), the lowest-numbered not marked ``duplicate_of``.

    Why the lowest number: it is a rule every process applies alike without a lock, even before
    the others are marked (``duplicates.yield_duplicates`` marks them): a duplicate is found by
    whoever reads, and never counted twice meanwhile. Trial numbers are the storage's one sequence.
    """
    live = [t for t in trials if DUPLICATE_ATTR not in t.user_attrs]
    first: dict[tuple[int, int], int] = {}
    for trial in live:
        key = slot_key(trial)
        first[key] = min(first.get(key, trial.number), trial.number)
    return [t for t in live if first[slot_key(t)] == t.number]


@dataclass
class PhaseCounts:
    completed: int = 0
    failed: int = 0  # final failures: retried attempts and diverged trials excluded
    diverged: int = 0  # FAIL trials whose loss went NaN/inf: finished, never against the failure budget
    running: int = 0
    waiting: int = 0
    unproven: int = 0  # running trials that have not finished a training step yet
    broken: int = 0  # final failures of the workload's own error before their first step
    slots: int = 0  # slots started so far (a retry reuses its slot)
    reasons: Counter[str] = field(default_factory=Counter)
    best_value: float | None = None
    best_number: int | None = None
    best_slot: int | None = None
    since_best: int = 0  # trials completed (finite value) numbered after the best one

    @property
    def finished(self) -> int:
        return self.completed + self.failed + self.diverged

    @property
    def failure_rate(self) -> float:
        return self.failed / self.finished if self.finished else 0.0

    def to_start(self, settings: PhaseSettings) -> int:
        """Trials not started yet: retries waiting, plus slots of the budget never started."""
        return self.waiting + max(0, settings.max_trials - self.slots)

    @property
    def workload_broken(self) -> bool:
        """A trial failed of the workload's own error before its first step, and no trial has
        trained a step since (none completed, none running past its first step): every trial
        would fail so, and the phase stops without spending its failure budget on them."""
        return bool(self.broken) and self.completed == 0 and self.running == self.unproven

    def failure_summary(self) -> str:
        """``2 crashed, 1 oom`` (diverged trials are not failures: see ``diverged``)."""
        return ", ".join(f"{count} {reason}" for reason, count in sorted(self.reasons.items()))


def _better(value: float, than: float | None, direction: str) -> bool:
    return than is None or (value < than if direction == "minimize" else value > than)


def _since_best(finite: list[Any], direction: str) -> int:
    """How many of the finite completed trials, in trial order, came after the last new best.

    Trial order, not completion time: numbers are given out by the storage under the phase lock,
    one sequence for every worker, while ``datetime_complete`` is stamped by each worker's own
    clock, and a machine minutes fast would reorder the trials it records."""
    best: float | None = None
    since = 0
    ordered = sorted(finite, key=lambda t: t.number)
    for trial in ordered:
        if _better(trial.value, best, direction):
            best, since = trial.value, 0
        else:
            since += 1
    return since


def count_trials(trials: Iterable[Any], direction: str = "minimize") -> PhaseCounts:
    """Tally Optuna ``FrozenTrial``s of one phase (a slot's duplicate trial counts for nothing)."""
    from optuna.trial import TrialState

    counts = PhaseCounts()
    slots: set[int] = set()
    finite: list[Any] = []  # completed with a finite value: what "a new best" is judged on
    live = counted(trials)
    replaced = superseded(live)
    for trial in live:
        slots.add(int(trial.user_attrs.get("slot", trial.number)))
        if trial.state == TrialState.COMPLETE:
            counts.completed += 1
            value = trial.value
            if value is None or not math.isfinite(value):
                continue
            finite.append(trial)
            if _better(value, counts.best_value, direction):
                counts.best_value, counts.best_number = value, trial.number
                counts.best_slot = int(trial.user_attrs.get("slot", trial.number))
        elif trial.state == TrialState.PRUNED:
            counts.completed += 1
        elif trial.state == TrialState.FAIL:
            reason = trial.user_attrs.get("failure_reason", "crashed")
            if reason == "diverged":  # never retried
                counts.diverged += 1
            elif final_failure(trial, replaced):
                counts.failed += 1
                counts.reasons[reason] += 1
                counts.broken += bool(trial.user_attrs.get(BROKEN_ATTR))
        elif trial.state == TrialState.RUNNING:
            counts.running += 1
            if not trial.user_attrs.get("healthy"):
                counts.unproven += 1
        elif trial.state == TrialState.WAITING:
            counts.waiting += 1
    counts.slots = len(slots)
    counts.since_best = _since_best(finite, direction)
    return counts


class Action(StrEnum):
    """What a worker does next (compares equal to the plain string)."""

    START = "start"  # claim a trial
    WAIT = "wait"  # poll again later
    DONE = "done"  # the trial budget is met
    FAILED = "failed"  # the failure budget is spent
    STOPPED = "stopped"  # a stopping budget (timeout_h, stop_after_no_improvement) ended the phase early


@dataclass(frozen=True)
class Decision:
    """What a worker does next, and why (see ``Action``)."""

    action: Action
    reason: str = ""


def early_stop(
    counts: PhaseCounts,
    settings: PhaseSettings,
    *,
    window_started_at: float | None = None,
    now: float | None = None,
    metric: str | None = None,
) -> str | None:
    """Why no more trials start although the trial budget is not met (None: they may).

    ``window_started_at``: the run window's start (``phase.window_started_at``), ``now`` the wall
    clock (default: now); ``metric`` names the objective in the message (default ``value``).
    """
    if settings.timeout_h is not None and window_started_at is not None:
        elapsed_h = ((_clock.now() if now is None else now) - window_started_at) / 3600
        if elapsed_h >= settings.timeout_h:
            return (
                f"stopped starting trials: the {settings.timeout_h:g} h wall-time budget "
                f"({settings.key('timeout_h')}) ran out after {counts.finished} of "
                f"{settings.max_trials} trials; run the same command again to continue"
            )
    patience = settings.stop_after_no_improvement
    if patience is not None and counts.best_value is not None and counts.since_best >= patience:
        return (
            f"stopped starting trials: no new best in the last {counts.since_best} completed trials "
            f"(best {metric or 'value'} {counts.best_value:.6g} from trial {counts.best_slot}; "
            f"{settings.key('stop_after_no_improvement')}: {patience})"
        )
    return None


def decide(
    counts: PhaseCounts,
    settings: PhaseSettings,
    *,
    window_started_at: float | None = None,
    now: float | None = None,
    metric: str | None = None,
) -> Decision:
    """The budget rules, in order.

    - The workload broken (``PhaseCounts.workload_broken``): stop the phase, retrying nothing.
    - Failure budget reached: stop the phase (exit code 1). Diverged trials do not count.
    - Nothing left to start (no retry waiting, every slot of the budget started): done if
      nothing runs either, else wait (a running trial may die and be retried).
    - A stopping budget ran out (``early_stop``): no trial starts, not even a waiting retry;
      once nothing runs, the phase is ``stopped`` (exit code 0: a budget did its job).
    - ``max_parallel`` trials running: wait.
    - A trial starts only if every running trial that has not yet proven itself (finished
      a training step) could fail without the phase overshooting its failure budget. Trials that
      crash do so at once, so a phase of crashing trials stops at exactly ``max_failed``;
      healthy trials stop reserving budget after their first step, so parallelism is not lost.
    """
    if counts.workload_broken:
        return Decision(
            Action.FAILED,
            "the workload failed before its first training step, as every trial would (none was "
            "retried): fix it, then run the same command again",
        )
    if counts.failed >= settings.max_failed:
        return Decision(
            Action.FAILED,
            f"the failure budget is spent: {counts.failed} of {counts.finished} finished "
            f"{'trial' if counts.finished == 1 else 'trials'} failed "
            f"({counts.failure_summary()}); the limit is {settings.max_failed}",
        )
    if counts.to_start(settings) == 0:
        if counts.running == 0:
            return Decision(Action.DONE)
        return Decision(Action.WAIT, "the last trials are running")
    stop = early_stop(counts, settings, window_started_at=window_started_at, now=now, metric=metric)
    if stop is not None:
        if counts.running == 0:
            return Decision(Action.STOPPED, stop)
        return Decision(Action.WAIT, f"no new trials ({stop.removeprefix('stopped starting trials: ')})")
    if settings.max_parallel is not None and counts.running >= settings.max_parallel:
        return Decision(
            Action.WAIT,
            f"{counts.running} {'trial' if counts.running == 1 else 'trials'} running "
            f"(max_parallel {settings.max_parallel})",
        )
    if counts.failed + counts.unproven + 1 > settings.max_failed:
        return Decision(Action.WAIT, "running trials must train a step first (failure budget)")
    return Decision(Action.START)
