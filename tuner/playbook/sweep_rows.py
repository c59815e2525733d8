"""sweep-lr's trials (one LR, one seed) and the table's rows (one LR over its seeds).

The rules that make a row (which trial of a seed counts, "fit" only when every seed fit, the
fit-metric's direction) are listed in ``sweep_lr.py``'s docstring.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from tuner.playbook.sweep_grid import LR_PARAM

_LR_MATCH = 1e-6  # relative tolerance when matching a trial's LR to a grid point


# -- trials -----------------------------------------------------------------------------------


class SweepOutcome(StrEnum):
    """What one grid trial (one LR, one seed) came to."""

    FIT = "fit"
    NOT_FIT = "not_fit"  # trained to max_steps without meeting the fit criterion
    DIVERGED = "diverged"
    FAILED = "failed"  # infrastructure: crashed, oom, timeout, killed, ...; not "did not fit"
    RUNNING = "running"
    PENDING = "pending"  # not started yet
    # stopped without having fit once another LR had fit in fewer steps: it can no longer be
    # the fastest (its steps to fit, if any, are more than it trained); not "did not fit"
    CANNOT_WIN = "cannot_win"

    @property
    def finished(self) -> bool:
        return self in (
            SweepOutcome.FIT,
            SweepOutcome.NOT_FIT,
            SweepOutcome.DIVERGED,
            SweepOutcome.CANNOT_WIN,
        )


@dataclass(frozen=True)
class SweepTrial:
    """One grid trial, built by the phase from an Optuna trial (:func:`sweep_trial_from_optuna`)."""

    lr: float
    seed_index: int
    outcome: SweepOutcome
    fit_step: int | None
    steps_trained: int
    final_train_loss: float | None
    best_fit_value: float | None
    number: int | None = None  # the trial's slot, for messages
    failure_reason: str | None = None  # on FAILED / DIVERGED: the worker's failure_reason
    best_step: int | None = None  # where the objective (validation) was best, on a finished trial
    outpaced_at: int | None = None  # on CANNOT_WIN: the fit step it could no longer beat
    # the objective at each eval (step, value), when the reader has it: whether it rose after
    # its best beyond the noise (``curve_trend``); empty: not read, the best step alone decides
    curve: tuple[tuple[int, float], ...] = ()


def _attr_int(value: Any) -> int | None:
    return None if value is None else int(value)


def _attr_float(value: Any) -> float | None:
    return None if value is None else float(value)


def sweep_trial_from_optuna(trial: Any, curve: Mapping[int, float] | None = None) -> SweepTrial | None:
    """A :class:`SweepTrial` from an Optuna ``FrozenTrial`` (anything with ``params``, ``state``,
    ``user_attrs``, ``number``); ``None`` for a trial that does not count:

    - a FAIL marked ``retried`` (its retry is another trial, which counts instead);
    - a trial without ``optimizer.lr`` yet (enqueued, not started: the grid shows it as not started).

    COMPLETE is FIT when ``fit_step`` is recorded, else NOT_FIT; FAIL is DIVERGED when
    ``failure_reason == "diverged"``, else FAILED; PRUNED with ``outpaced_at`` (stopped because
    another LR fit sooner, ``tuner.orchestrate.outpaced``) is CANNOT_WIN, any other PRUNED FAILED.
    A CANNOT_WIN trial has no ``best_step``: its objective's best is cut off at its stop, not
    where it would have been (the "val best at" column leaves it out). ``curve``: the objective
    at each eval when the reader loaded it apart (else the trial's ``intermediate_values``).
    """
    attrs = dict(trial.user_attrs)
    params = dict(trial.params)
    if LR_PARAM not in params:
        return None
    state = getattr(trial.state, "name", str(trial.state)).upper()
    fit_step = _attr_int(attrs.get("fit_step"))
    reason = attrs.get("failure_reason")
    if state == "COMPLETE":
        outcome = SweepOutcome.FIT if fit_step is not None else SweepOutcome.NOT_FIT
    elif state == "FAIL":
        if attrs.get("retried"):
            return None
        outcome = SweepOutcome.DIVERGED if reason == "diverged" else SweepOutcome.FAILED
    elif state == "RUNNING":
        outcome = SweepOutcome.RUNNING
    elif state == "WAITING":
        outcome = SweepOutcome.PENDING
    elif state == "PRUNED" and attrs.get("outpaced_at") is not None:
        outcome = SweepOutcome.CANNOT_WIN
    else:  # another PRUNED: nothing else in a sweep prunes; count it as not run, not "not fit"
        outcome, reason = SweepOutcome.FAILED, reason or state.lower()
    steps = attrs.get("final_step")
    if steps is None and outcome is SweepOutcome.FIT:
        steps = fit_step
    if steps is None and outcome is SweepOutcome.NOT_FIT:
        steps = attrs.get("max_train_steps")
    slot = attrs.get("slot")
    return SweepTrial(
        lr=float(params[LR_PARAM]),
        seed_index=int(attrs.get("seed_index", 0)),
        outcome=outcome,
        fit_step=fit_step if outcome is SweepOutcome.FIT else None,
        steps_trained=int(steps or 0),
        final_train_loss=_attr_float(attrs.get("final_train_loss")),
        best_fit_value=_attr_float(attrs.get("best_fit_value")),
        number=int(slot) if slot is not None else trial.number,
        failure_reason=str(reason) if reason is not None and outcome is not SweepOutcome.FIT else None,
        best_step=_attr_int(attrs.get("best_step"))
        if outcome.finished and outcome is not SweepOutcome.CANNOT_WIN
        else None,
        outpaced_at=_attr_int(attrs.get("outpaced_at")) if outcome is SweepOutcome.CANNOT_WIN else None,
        curve=_curve_of(trial, curve),
    )


def _curve_of(trial: Any, curve: Mapping[int, float] | None) -> tuple[tuple[int, float], ...]:
    """The trial's reported objective at each eval; empty when the reader did not load them."""
    values = curve if curve is not None else getattr(trial, "intermediate_values", None) or {}
    return tuple(sorted((int(step), float(value)) for step, value in values.items()))


# -- rows -------------------------------------------------------------------------------------


class RowOutcome(StrEnum):
    """One LR's outcome over its seeds."""

    FIT = "fit"  # every seed fit
    PARTLY_FIT = "partly_fit"  # some seeds fit, the others finished (or failed) without fitting
    NOT_FIT = "not_fit"
    DIVERGED = "diverged"  # no seed fit and at least one diverged, none merely "not fit"
    FAILED = "failed"  # every seed failed for infrastructure reasons
    CANNOT_WIN = "cannot_win"  # no seed fit, at least one was stopped because another LR fit sooner
    RUNNING = "running"  # some seeds are still running or not started
    PENDING = "pending"  # no seed started


@dataclass(frozen=True)
class SweepRow:
    """One LR of the table (see the module docstring for the rules)."""

    lr: float
    seeds: int
    seed_outcomes: tuple[SweepOutcome, ...]
    fit_steps: list[int]
    median_fit_step: float | None
    spread: tuple[int, int] | None
    slowest_fit_step: int | None  # only when every seed fit: what the recommendation uses
    outcome: RowOutcome
    outcome_text: str
    final_train_loss: float | None
    best_fit_value: float | None
    failure_reasons: tuple[str, ...] = ()
    median_best_step: float | None = None  # the objective's best step, median over finished seeds
    stopped_steps: tuple[int, ...] = ()  # steps each CANNOT_WIN seed trained
    stopped_at_step: int | None = None  # the max of those

    def count(self, outcome: SweepOutcome) -> int:
        return sum(1 for seed in self.seed_outcomes if seed is outcome)


STOPPED_TEXT = "stopped (cannot win)"

_PREFERENCE = {
    SweepOutcome.FIT: 3,
    SweepOutcome.NOT_FIT: 3,
    SweepOutcome.DIVERGED: 3,
    SweepOutcome.CANNOT_WIN: 3,
    SweepOutcome.RUNNING: 2,
    SweepOutcome.PENDING: 1,
    SweepOutcome.FAILED: 0,
}


def _outcome_text(
    counts: dict[SweepOutcome, int], seeds: int, reasons: tuple[str, ...]
) -> tuple[RowOutcome, str]:
    unfinished = counts[SweepOutcome.RUNNING] + counts[SweepOutcome.PENDING]
    failed_word = f"failed ({', '.join(sorted(set(reasons)))})" if reasons else "failed"
    if unfinished:
        if counts[SweepOutcome.PENDING] == seeds:
            return RowOutcome.PENDING, "not started"
        done = seeds - unfinished
        suffix = f" ({done} of {seeds} seeds done)" if seeds > 1 and done else ""
        return RowOutcome.RUNNING, "running" + suffix
    for single, row, word in (
        (SweepOutcome.FIT, RowOutcome.FIT, "fit"),
        (SweepOutcome.NOT_FIT, RowOutcome.NOT_FIT, "not fit"),
        (SweepOutcome.DIVERGED, RowOutcome.DIVERGED, "diverged"),
        (SweepOutcome.FAILED, RowOutcome.FAILED, failed_word),
        (SweepOutcome.CANNOT_WIN, RowOutcome.CANNOT_WIN, STOPPED_TEXT),
    ):
        if counts[single] == seeds:
            return row, word
    others = [
        f"{counts[o]} {w}"
        for o, w in (
            (SweepOutcome.NOT_FIT, "not fit"),
            (SweepOutcome.DIVERGED, "diverged"),
            (SweepOutcome.FAILED, "failed"),
            (SweepOutcome.CANNOT_WIN, STOPPED_TEXT),
        )
        if counts[o]
    ]
    if counts[SweepOutcome.FIT]:
        return RowOutcome.PARTLY_FIT, f"fit {counts[SweepOutcome.FIT]} of {seeds} seeds, " + ", ".join(others)
    row = (
        RowOutcome.NOT_FIT
        if counts[SweepOutcome.NOT_FIT]
        else RowOutcome.CANNOT_WIN
        if counts[SweepOutcome.CANNOT_WIN]
        else RowOutcome.DIVERGED
    )
    return row, f"{', '.join(others)} (of {seeds} seeds)"


class FitDirection:
    """Which fit-metric values are better: given, or read off the trials.

    Without a direction, a fit trial's best value lies on the met side of the threshold, which
    gives it; with no fit trial, every value lies on the unmet side, so the closest to the
    threshold is the best whichever the direction.
    """

    def __init__(self, direction: str | None, threshold: float, trials: Iterable[SweepTrial]) -> None:
        self.threshold = threshold
        if direction is None:
            for trial in trials:
                value = trial.best_fit_value
                if trial.outcome is SweepOutcome.FIT and value is not None and value != threshold:
                    direction = "maximize" if value > threshold else "minimize"
                    break
        self.direction = direction

    def key(self, value: float) -> float:
        """Larger is better."""
        if self.direction == "maximize":
            return value
        if self.direction == "minimize":
            return -value
        return -abs(value - self.threshold)

    def best(self, values: Iterable[float | None]) -> float | None:
        finite = [v for v in values if v is not None and math.isfinite(v)]
        return max(finite, key=self.key) if finite else None

    @property
    def comparator(self) -> str:
        return "<=" if self.direction == "minimize" else ">="


def build_row(lr: float, by_seed: dict[int, SweepTrial], seeds: int, better: FitDirection) -> SweepRow:
    n = max([seeds, *(index + 1 for index in by_seed)])
    outcomes = tuple(by_seed[i].outcome if i in by_seed else SweepOutcome.PENDING for i in range(n))
    chosen = list(by_seed.values())
    fit_steps = sorted(t.fit_step for t in chosen if t.outcome is SweepOutcome.FIT and t.fit_step is not None)
    reasons = tuple(t.failure_reason or "failed" for t in chosen if t.outcome is SweepOutcome.FAILED)
    counts = {o: outcomes.count(o) for o in SweepOutcome}
    outcome, text = _outcome_text(counts, n, reasons)
    losses = [
        t.final_train_loss
        for t in chosen
        if t.final_train_loss is not None and math.isfinite(t.final_train_loss)
    ]
    all_fit = counts[SweepOutcome.FIT] == n and len(fit_steps) == n
    best_steps = [t.best_step for t in chosen if t.best_step is not None]
    stopped = [t.steps_trained for t in chosen if t.outcome is SweepOutcome.CANNOT_WIN]
    return SweepRow(
        lr=lr,
        seeds=n,
        seed_outcomes=outcomes,
        fit_steps=fit_steps,
        median_fit_step=float(statistics.median(fit_steps)) if fit_steps else None,
        spread=(fit_steps[0], fit_steps[-1]) if len(fit_steps) >= 2 else None,
        slowest_fit_step=fit_steps[-1] if all_fit else None,
        outcome=outcome,
        outcome_text=text,
        final_train_loss=float(statistics.median(losses)) if losses else None,
        best_fit_value=better.best(t.best_fit_value for t in chosen),
        failure_reasons=reasons,
        median_best_step=float(statistics.median(best_steps)) if best_steps else None,
        stopped_steps=tuple(stopped),
        stopped_at_step=max(stopped) if stopped else None,
    )


def group_trials(trials: Iterable[SweepTrial], grid: list[float]) -> dict[float, dict[int, SweepTrial]]:
    """Trials by grid point (an LR not in the grid gets its own row), one per seed."""
    groups: dict[float, dict[int, SweepTrial]] = {lr: {} for lr in grid}
    for trial in trials:
        lr = next((g for g in groups if math.isclose(g, trial.lr, rel_tol=_LR_MATCH)), trial.lr)
        by_seed = groups.setdefault(lr, {})
        held = by_seed.get(trial.seed_index)
        rank = (_PREFERENCE[trial.outcome], trial.number if trial.number is not None else -1)
        if held is None or rank > (_PREFERENCE[held.outcome], held.number if held.number is not None else -1):
            by_seed[trial.seed_index] = trial
    return groups
