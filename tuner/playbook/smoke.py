"""``tuner smoke``: every phase of a study on a tiny budget, what a user's CI runs.

The study is the user's own (workload, model, data, metrics, schedule shape); only the budgets
shrink: a few steps and evals per trial, three grid LRs, two round-1 trials, one trial in each
later round. Everything goes to a throw-away output folder and SQLite storage, so a smoke run
never touches the real study's results. Three LRs rather than two: a grid of fewer than three
points is refused as bad input (an edge could not be told from the middle).
"""

from __future__ import annotations

from dataclasses import dataclass

from tuner.spec import StudySpec

SMOKE_STEPS = 6
SMOKE_EVAL_EVERY = 3
SMOKE_ROUND1_TRIALS = 2


@dataclass(frozen=True)
class SmokePlan:
    phases: list[str]
    overrides: list[str]  # ``--set`` texts, applied after the user's own


def smoke_plan(spec: StudySpec) -> SmokePlan:
    """The phases to run and the overrides that make each tiny."""
    from tuner.playbook.phases import SWEEP_PHASE, round_phase
    from tuner.playbook.sweep_lr import default_grid

    grid = sorted(spec.sweep_lr.grid) if spec.sweep_lr.grid else default_grid(spec.training.optimizer.lr)
    three = [grid[0], grid[len(grid) // 2], grid[-1]]
    overrides = [
        f"eval_every={SMOKE_EVAL_EVERY}",
        f"log_every={SMOKE_EVAL_EVERY}",
        f"max_train_steps={SMOKE_STEPS}",
        f"sweep_lr.grid={three}",
        f"sweep_lr.max_steps={SMOKE_STEPS}",
        "sweep_lr.seeds=1",
        f"rounds.round1.trials={SMOKE_ROUND1_TRIALS}",
        f"rounds.round1.steps={SMOKE_STEPS}",
        "rounds.round1.max_retries=0",
    ]
    # schedules with step lengths longer than a smoke trial are shrunk to fractions of it
    for index, segment in enumerate(spec.training.schedule):
        if segment.steps is not None:
            overrides.append(f"schedule.{index}.steps=1")
    phases = [SWEEP_PHASE]
    for number in spec.rounds.numbers:
        phases.append(round_phase(number))
        if number >= 2:
            key = f"rounds.round{number}"
            overrides += [
                f"{key}.top_k=1",
                f"{key}.seeds=1",
                f"{key}.lr_multipliers=[1.0]",
                f"{key}.steps={SMOKE_STEPS}",
                f"{key}.max_retries=0",
            ]
    return SmokePlan(phases, overrides)
