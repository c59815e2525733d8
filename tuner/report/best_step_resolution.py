"""Whether the eval grid can place a best step at all, and the verdicts that say it cannot.

A trial's best step is only known to the resolution of ``eval_every``. When the first eval comes
after 10% of training, "best step in the first 10%" cannot be observed: a note
(``BestStepCoarse``). With fewer than ``MIN_EVALS`` evals in a run, or ``MIN_LATE_EVALS`` in its
last 25%, the position is set by the grid, not by the training: the best-step verdict
(``best_step``) gives way to "cannot tell" (``BestStepUnresolved``), with the largest readable
``eval_every`` that would tell it in the study's shortest round (``eval_grid``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from tuner._format import plural
from tuner.playbook.eval_grid import (
    EARLY,
    LATE,
    MIN_EVALS,
    MIN_LATE_EVALS,
    eval_counts,
    readable_at_most,
    suggested_eval_every,
)
from tuner.report.findings import Finding, Level, Suggestion, pct
from tuner.report.length_cut import production_of
from tuner.report.study_data import PhaseData

RESOLUTION_RULE = (
    f"a position verdict needs at least {MIN_EVALS} evals in a run, and 'late' at least "
    f"{MIN_LATE_EVALS} in its last {1 - LATE:.0%}"
)


@dataclass(frozen=True)
class BestStepCoarse(Finding):
    """The first eval is after 10% of training: a best step in the first 10% cannot be observed."""

    kind: ClassVar[str] = "best_step_coarse"
    eval_every: int
    trial_steps: int
    first_eval_position: float


@dataclass(frozen=True)
class BestStepUnresolved(Finding):
    """Too few evals for the position to mean anything: where the best step lands is set by the
    eval grid, not by the training."""

    kind: ClassVar[str] = "best_step_unresolved"
    eval_every: int
    trial_steps: int
    evals: int  # in a run
    late_evals: int  # in its last 25%
    suggested_eval_every: int | None


def coarse_finding(eval_every: int, trial_steps: int) -> BestStepCoarse | None:
    """The note that a best step in the first 10% cannot be seen, when the first eval comes later;
    None when it can (or the grid is unknown)."""
    if not eval_every or not trial_steps or eval_every / trial_steps <= EARLY:
        return None
    finer = readable_at_most(EARLY * trial_steps)  # the first eval within the first 10%
    return BestStepCoarse(
        eval_every=eval_every,
        trial_steps=trial_steps,
        first_eval_position=eval_every / trial_steps,
        level=Level.INFO,
        text=f"the first eval is at step {eval_every} of {trial_steps} "
        f"({pct(eval_every / trial_steps)} of training), so a best step in the first 10% "
        "cannot be seen",
        advice=f"lower training.eval_every (e.g. to {finer}) for a finer answer",
    )


def unresolved(
    phase: PhaseData, findings: list[Finding], suggestions: list[Suggestion], what: str, shortest: int | None
) -> None:
    """Say that ``what`` cannot be told on this eval grid (``BestStepUnresolved``, in place of the
    coarse note), with the ``eval_every`` that would tell it in the study's ``shortest`` round."""
    eval_every, trial_steps = phase.eval_every or 0, phase.trial_steps or 0
    evals, late_evals = eval_counts(eval_every, trial_steps)
    shortest = min(shortest or trial_steps, trial_steps)
    suggested = suggested_eval_every(shortest)
    better = suggested if suggested is not None and suggested < eval_every else None
    advice = "train longer runs, so that evals can fall in more places"
    if better is not None:
        short_evals, short_late = eval_counts(better, shortest)
        which = " (the shortest round)" if shortest < trial_steps else ""
        advice = (
            f"lower training.eval_every {eval_every} -> {better} ({short_evals} evals a run of {shortest} "
            f"steps{which}, {short_late} in its last 25%"
        )
        production = production_of(phase)
        if production is not None and production > shortest:
            advice += f"; {eval_counts(better, production)[0]} at the full {production} steps"
        advice += "), then judge the length again"
    # the coarse note's advice is this one's: one verdict says it
    findings[:] = [f for f in findings if not isinstance(f, BestStepCoarse)]
    findings.append(
        BestStepUnresolved(
            eval_every=eval_every,
            trial_steps=trial_steps,
            evals=evals,
            late_evals=late_evals,
            suggested_eval_every=better,
            level=Level.WARNING,
            rule=RESOLUTION_RULE,
            text=f"cannot tell {what}: {plural(evals, 'eval')} in a run of "
            f"{trial_steps} steps (eval_every {eval_every}), {late_evals} in its last 25%, so the "
            "best step's position is set by the eval grid",
            advice=advice,
        )
    )
    if better is not None:
        reason = (
            f"{plural(evals, 'eval')} a run, {late_evals} in its last 25%: too few to place best steps "
            f"({phase.phase})"
        )
        suggestions.append(Suggestion(("training", "eval_every"), eval_every, better, reason))
