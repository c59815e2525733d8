"""sweep-lr's share of a budget: ``sweep_lr.max_total_steps`` caps the steps of all its trials.

The rule: the sweep plans ``LRs x seeds`` grid trials, each trained up to the same per-LR cap,
so it never trains more than their number times that cap. With ``max_total_steps = N`` the
per-LR cap is the smaller of ``sweep_lr.max_steps`` and ``N // trials`` rounded down to a
multiple of ``eval_every`` (a trial's length ends on an evaluation). Every LR gets the same cap,
so their steps to fit stay comparable: the cap is lowered up front, never by cutting the last
LRs short. Without ``max_steps`` (nor a production length), the cap alone sets the per-LR cap.
A per-LR cap of fewer than ``MIN_EVALS`` evaluations cannot tell the LRs apart (nearly every fit
would be "at the first evaluation"): refused. ``--extend`` adds LRs at the plan's per-LR cap
only while the steps already trained plus the new trials' caps stay within ``N``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from tuner.errors import UsageError

if TYPE_CHECKING:
    from tuner.spec import StudySpec

MIN_EVALS = 3  # evaluations each grid trial gets at least, under a total cap


@dataclass(frozen=True)
class SweepCap:
    """The per-LR cap the sweep trains with, and what it came from."""

    steps_per_trial: int
    asked: int | None  # sweep_lr.max_steps (or the production length), before the total cap
    trials: int  # LRs x seeds
    max_total_steps: int | None

    @property
    def lowered(self) -> bool:
        """The total cap set the per-LR cap (it was lower than what was asked, or nothing was)."""
        return self.max_total_steps is not None and (self.asked is None or self.steps_per_trial < self.asked)

    def line(self) -> str:
        """One line on what the total cap did."""
        if self.max_total_steps is None:
            return f"each grid trial trains at most {self.steps_per_trial} steps"
        instead = f" (not {self.asked})" if self.lowered and self.asked is not None else ""
        return (
            f"sweep_lr.max_total_steps {self.max_total_steps}: each of the {self.trials} grid trials "
            f"trains at most {self.steps_per_trial} steps{instead}, "
            f"{self.trials * self.steps_per_trial} in all"
        )


def sweep_cap(spec: StudySpec, asked: int | None, trials: int) -> SweepCap:
    """The per-LR cap for ``trials`` grid trials (rule: module docstring); ``asked`` is
    ``sweep_lr.max_steps`` or the production length. Raises ``UsageError`` when there is no cap
    at all, or the total cap leaves each trial fewer than ``MIN_EVALS`` evaluations."""
    total = spec.sweep_lr.max_total_steps
    if total is None:
        if asked is None:
            raise UsageError(
                "sweep_lr.max_steps is not set (the cap on each grid trial): set it, e.g. to a few "
                "times the steps you expect the model to need (or set sweep_lr.max_total_steps)"
            )
        return SweepCap(asked, asked, trials, None)
    eval_every = spec.training.eval_every
    need = MIN_EVALS * eval_every if asked is None else min(asked, MIN_EVALS * eval_every)
    share = total // trials // eval_every * eval_every
    if share < need:
        raise UsageError(
            f"sweep_lr.max_total_steps = {total} is too small for {trials} grid trials: each would get "
            f"{share} steps, fewer than {need} ({MIN_EVALS} evaluations at eval_every {eval_every}); "
            f"give at least {trials * need}"
        )
    return SweepCap(share if asked is None else min(asked, share), asked, trials, total)


def check_extension(spec: StudySpec, trained: int, new_trials: int, steps_per_trial: int) -> None:
    """``--extend`` under a total cap: the steps already trained (``trained``) plus the new
    trials at the plan's per-LR cap must stay within it."""
    total = spec.sweep_lr.max_total_steps
    if total is None:
        return
    planned = trained + new_trials * steps_per_trial
    if planned > total:
        raise UsageError(
            f"--extend: {new_trials} more grid trials of {steps_per_trial} steps after the {trained} "
            f"trained would make {planned} steps, over sweep_lr.max_total_steps = {total}"
        )
