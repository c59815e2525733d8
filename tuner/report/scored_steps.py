"""Did a later round score its trials at the steps its source round was scored at?

The engine evaluates every ``eval_every`` steps and once more after a run's last step. Round 1's
value is taken from its evals: when its length is off the eval grid (``rounds.round1.steps: 190``
with ``eval_every`` 50), its last eval is at step 190, a step round 2's runs (150, 200, ... 950)
never evaluate. Round 1's top points can then look tied, or ordered, at a step nothing else
measures, and the transfer verdict compares values taken at different steps. A length derived
from ``length_fraction`` is always put on the grid (``tuner.playbook.trial_lengths``); a length
the user gives in ``steps`` is kept, ``tuner validate`` says it is off the grid, and the report
says here that the two rounds cannot be compared step for step.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from tuner.playbook.eval_grid import eval_steps
from tuner.report.findings import Finding, Level
from tuner.report.study_data import PhaseData

RULE = (
    "a round is compared with its source step for step only when every step the source scored its "
    "trials at (each eval_every, and its last step) is one the round evaluates too"
)


@dataclass(frozen=True)
class ScoredAtOtherSteps(Finding):
    kind: ClassVar[str] = "scored_at_other_steps"
    source_phase: str
    steps: tuple[int, ...]  # the source's eval steps this round never evaluates
    source_trial_steps: int
    source_eval_every: int
    eval_every: int
    trial_steps: int


def scored_at_other_steps(phase: PhaseData, source: PhaseData) -> ScoredAtOtherSteps | None:
    """A warning when ``source`` scored its trials at a step ``phase`` never evaluates; None when
    every source step is one ``phase`` evaluates too, or when either grid is unknown."""
    from tuner.playbook.trial_lengths import on_eval_grid

    every, steps = phase.eval_every, phase.trial_steps
    source_every, source_steps = source.eval_every, source.trial_steps
    if not (every and steps and source_every and source_steps):
        return None
    unshared = tuple(sorted(eval_steps(source_every, source_steps) - eval_steps(every, steps)))
    if not unshared:
        return None
    shown = ", ".join(str(s) for s in unshared[:3]) + (", ..." if len(unshared) > 3 else "")
    on_grid = on_eval_grid(source_steps, every, steps)
    # one eval_every serves every phase of a study: the commands refuse a study file that changed it
    fix = (
        f"give {source.round_key}.steps a multiple of training.eval_every ({on_grid} is on the grid), "
        "or leave steps out: a length_fraction is put on the eval grid"
    )
    return ScoredAtOtherSteps(
        source_phase=source.phase,
        steps=unshared,
        source_trial_steps=source_steps,
        source_eval_every=source_every,
        eval_every=every,
        trial_steps=steps,
        level=Level.WARNING,
        rule=RULE,
        text=f"{source.phase} scored its trials at step {shown}, which {phase.phase} never evaluates "
        f"(every {every} steps to {steps}): the two rounds' values cannot be compared step for step, "
        "and the transfer verdict compares them anyway",
        advice=f"{fix}, so every round is scored at steps the others share",
    )
