"""What the study file plans: each phase's trials and trial length (or, for a phase created
already, its stored length), and the workers that would run them."""

from __future__ import annotations

from collections.abc import Sequence

from tuner._cores import usable_cores
from tuner.playbook.estimate.figures import PhaseLength, Workers
from tuner.playbook.phase_names import SWEEP_PHASE
from tuner.spec import RoundSpec, StudySpec


def with_max_train_steps(spec: StudySpec, steps: int) -> StudySpec:
    training = spec.training.model_copy(update={"max_train_steps": steps})
    return spec.model_copy(update={"training": training})


def _round_steps(
    spec: StudySpec, round_spec: RoundSpec, number: int, previous: int | None
) -> tuple[int | None, str | None]:
    """A round's trial length as ``run-round`` will choose it (round 1, then each later round
    from the one before), or why it is unknown yet."""
    from tuner.playbook.later_rounds import round_length
    from tuner.playbook.phases import ProductionLength, round_steps

    production = spec.training.max_train_steps
    if round_spec.steps is None and production is None:
        return None, "unknown until tuner sweep-lr (or set training.max_train_steps)"
    if number == 1 or previous is None:
        return round_steps(spec, round_spec, number), None
    return round_length(spec, number, previous, ProductionLength(production, "")), None


def planned_phases(spec: StudySpec, stored_steps: dict[str, int] | None = None) -> list[PhaseLength]:
    """sweep-lr, round 1, round 2 and any later rounds, with the study file's trials and lengths.

    ``spec.training.max_train_steps`` is the production length (from the file or sweep-lr);
    None leaves the phases whose length depends on it unknown, never an error.
    ``stored_steps``: the trial length of each phase created already, from its stored plan (what
    its workers train, and what the next round's length follows from).
    """
    from tuner.playbook.sweep_lr import default_grid

    stored = stored_steps or {}
    sweep = spec.sweep_lr
    grid = sweep.grid if sweep.grid is not None else default_grid(spec.training.optimizer.lr)
    cap = stored.get(SWEEP_PHASE)
    if cap is None:
        cap = sweep.max_steps or spec.training.max_train_steps
        if sweep.max_total_steps is not None:  # the per-LR cap the sweep would take
            from tuner.playbook.sweep_cap import sweep_cap

            cap = sweep_cap(spec, cap, len(grid) * sweep.seeds).steps_per_trial
    phases = [
        PhaseLength(
            SWEEP_PHASE,
            len(grid) * sweep.seeds,
            cap,
            upper_bound=True,
            unknown=None if cap is not None else "unknown: set sweep_lr.max_steps",
        )
    ]
    previous: int | None = None
    for number in spec.rounds.numbers:
        round_spec = spec.rounds.get(number)
        assert round_spec is not None
        trials = (
            round_spec.trial_budget
            if number == 1
            else round_spec.top_k * round_spec.seeds * len(round_spec.lr_multipliers)
        )
        name = f"round-{number}"
        if name in stored:
            steps, unknown = stored[name], None
        else:
            steps, unknown = _round_steps(spec, round_spec, number, previous)
        previous = steps
        phases.append(PhaseLength(name, trials, steps, round_spec.parallel, unknown=unknown))
    return phases


def plan_workers(
    *,
    workers: int | None,
    devices: Sequence[str] | None,
    max_parallel: int | None,
    budget: int,
    processes_per_trial: int = 1,
) -> Workers:
    """What ``run-round`` would start for a phase of ``budget`` trials."""
    from tuner.orchestrate import local_workers

    chosen = local_workers(
        workers=workers,
        devices=devices,
        max_parallel=max_parallel,
        budget=budget,
        processes_per_trial=processes_per_trial,
    )
    gpu = any(worker.label.startswith("cuda") for worker in chosen)
    return Workers(
        [worker.label for worker in chosen],
        "cuda" if gpu else "cpu",
        None if gpu else chosen[0].threads,
        usable_cores(),
    )
