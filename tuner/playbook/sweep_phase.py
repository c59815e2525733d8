"""sweep-lr as a phase: its plan (a constant-LR grid, regularization off) and its result.

Each grid LR (times ``sweep_lr.seeds``) is one trial: a constant schedule (no warmup, no decay),
augmentation off, a built-in workload's own regularisation off (its declared options, e.g.
dropout 0) and ``sweep_lr.overrides`` applied (default: no weight decay), trained until the
training set is fit (``fit_metric`` reaches ``fit_threshold``, checked at every eval) or
``max_steps``. The grid runs from the largest LR down, and an LR still training past the fewest
steps any LR has fit in is stopped there (``fit_step_to_beat``); ``sweep_lr.max_total_steps``
lowers every trial's cap up front (``sweep_cap.py``). The analysis (table, verdicts,
recommendation) is ``sweep_lr.py``; here the phase's trials become its input, and the
recommendation is stored for later phases.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any, Literal

from tuner.errors import SpecError, UsageError
from tuner.playbook.plan import FitTarget, SlotPlan, StoredPlan

if TYPE_CHECKING:
    from tuner.playbook.sweep_lr import SweepResult
    from tuner.playbook.trial_lengths import ProductionLength
    from tuner.spec import LoadedStudy, StudySpec

LR_PARAM = "optimizer.lr"


def _space(grid: list[float]) -> dict[str, Any]:
    return {
        LR_PARAM: {"type": "float", "low": min(grid), "high": max(grid), "log": True, "role": "scientific"}
    }


def _slots(grid: list[float], seeds: int) -> list[SlotPlan]:
    """One trial per LR and seed, the largest LR first.

    The fastest LR to fit is usually among the largest that do not diverge (and one that
    diverges does so within a few steps): trained first, it fits early, and the smaller LRs, which
    need more steps, are then stopped once past its fit step (``fit_step_to_beat``) instead of
    training to the cap before anything has fit.
    """
    return [
        SlotPlan(values={LR_PARAM: lr}, sets={"seed_index": seed} if seed else {}, attrs={"seed_index": seed})
        for lr in sorted(grid, reverse=True)
        for seed in range(seeds)
    ]


def _switched_off(loaded: LoadedStudy, overrides: dict[str, Any]) -> list[str]:
    """What the sweep changes, in plain words, with the study's own values."""
    from tuner.spec import key_to_path
    from tuner.spec._paths import get_path

    document = loaded.spec.model_dump(mode="json")
    lines = ["constant learning rate (no warmup, no decay)"]
    for key, value in overrides.items():
        if key == "augment":
            lines.append("augmentation off")
            continue
        try:
            before = get_path(document, key_to_path(key))
        except KeyError:
            before = None
        lines.append(
            f"{key} = {value}"
            + (f" (the study has {before})" if before is not None and before != value else "")
        )
    return lines


def sweep_overrides(spec: StudySpec) -> dict[str, Any]:
    """What every grid trial sets (augmentation aside): a built-in workload's own regularisation
    off (its declared options), then ``sweep_lr.overrides``, which win. ``tuner validate`` lists
    the same."""
    from tuner.workloads import regularisation_off

    return {**regularisation_off(spec.workload.name), **spec.sweep_lr.overrides}


def sweep_plan(loaded: LoadedStudy, production: ProductionLength) -> StoredPlan:
    from tuner.playbook.sweep_cap import sweep_cap
    from tuner.playbook.sweep_lr import default_grid
    from tuner.train.objective import metric_direction

    spec = loaded.spec
    sweep = spec.sweep_lr
    grid = sorted(sweep.grid) if sweep.grid else default_grid(spec.training.optimizer.lr)
    cap = sweep_cap(spec, sweep.max_steps or production.steps, len(grid) * sweep.seeds)
    max_steps = cap.steps_per_trial
    overrides = {**sweep_overrides(spec), "augment": False}
    plan = StoredPlan(
        phase="sweep-lr",
        kind="sweep-lr",
        config=spec.model_dump_for_files(),
        trial_steps=max_steps,
        schedule=[{"shape": "constant", "steps": max_steps, "start": 1.0, "end": 1.0}],
        schedule_from_file=False,
        overrides=overrides,
        sampler="fixed",
        space=_space(grid),
        seed=spec.points_seed,
        slots=_slots(grid, sweep.seeds),
        fit=FitTarget(
            metric=sweep.fit_metric,
            threshold=sweep.fit_threshold,
            direction=metric_direction(sweep.fit_metric),
        ),
        notes=_switched_off(loaded, overrides) + ([cap.line()] if cap.lowered else []),
    )
    try:
        plan.trial_spec(0, {LR_PARAM: grid[0]})
    except SpecError as error:
        raise UsageError(f"sweep_lr.overrides: {error.detail}") from None
    return plan


def sweep_trials(trials: Iterable[Any], curves: Mapping[int, Mapping[int, float]] | None = None) -> list[Any]:
    """The phase's trials (Optuna ``FrozenTrial``s or ``StoredTrial``s) as ``SweepTrial``s,
    retried attempts (and failures a later attempt replaced) and duplicates left out; ``curves``:
    trial number -> its objective at each eval, where the reader loads them apart."""
    from tuner.orchestrate.budget import superseded
    from tuner.orchestrate.duplicates import counted
    from tuner.playbook.sweep_lr import sweep_trial_from_optuna

    live = counted(list(trials))
    replaced = superseded(live)
    found = [
        sweep_trial_from_optuna(t, (curves or {}).get(t.number)) for t in live if t.number not in replaced
    ]
    return [t for t in found if t is not None]


def sweep_result(phase_study: Any, stored: StoredPlan, study_ref: str = "STUDY") -> SweepResult:
    """The table and verdicts of the phase's trials so far (``study_ref``: the file, for hints)."""
    from tuner.orchestrate import with_retries

    return sweep_result_of(with_retries(phase_study.get_trials, False), stored, study_ref)


def sweep_result_of(
    trials: Iterable[Any],
    stored: StoredPlan,
    study_ref: str = "STUDY",
    curves: Mapping[int, Mapping[int, float]] | None = None,
) -> SweepResult:
    """``sweep_result`` from trials already read (the report reads them, and ``curves``: trial
    number -> its objective at each eval, its own way)."""
    from tuner.playbook.sweep_lr import analyze_sweep

    assert stored.fit is not None
    grid = sorted({slot.values[LR_PARAM] for slot in stored.slots})
    seeds = 1 + max((slot.attrs.get("seed_index", 0) for slot in stored.slots), default=0)
    return analyze_sweep(
        sweep_trials(trials, curves),
        grid=grid,
        max_steps=stored.trial_steps,
        eval_every=int(stored.config["training"]["eval_every"]),
        fit_metric=stored.fit.metric,
        fit_threshold=stored.fit.threshold,
        seeds=seeds,
        direction=stored.fit.direction,
        study_ref=study_ref,
        objective=str(stored.config.get("objective", {}).get("metric", "the objective")),
        objective_direction=objective_direction(stored.config),
    )


def objective_direction(config: dict[str, Any]) -> Literal["maximize", "minimize"]:
    """The study objective's direction, as the plan stored it."""
    objective = config.get("objective", {})
    return (
        "maximize" if isinstance(objective, dict) and objective.get("direction") == "maximize" else "minimize"
    )


def fit_step_to_beat(trials: Iterable[Any], stored: StoredPlan) -> int | None:
    """The fewest steps an LR has fit the training set in on every seed (its slowest seed's fit
    step, as the recommendation ranks it); None before any LR has.

    An LR still training at or past that step without having fit would fit later, if ever, so its
    slowest seed would be slower: it can no longer be the fastest nor tie with it, and its
    trials stop there (``tuner.orchestrate.outpaced``). Edge, tie and best-step verdicts are
    about the fastest LR and the LRs tied with it, so no stop changes them.
    """
    result = sweep_result_of(trials, stored)
    steps = [row.slowest_fit_step for row in result.rows if row.slowest_fit_step is not None]
    return min(steps, default=None)


def extended_sweep_plan(loaded: LoadedStudy, stored: StoredPlan, storage: Any) -> StoredPlan:
    """``sweep-lr --extend``: the same plan with the grid points beyond the edge the fastest LR sits
    on, or below the grid when every LR diverged."""
    import optuna

    from tuner.orchestrate import optuna_study_name, with_retries
    from tuner.playbook.sweep_cap import check_extension
    from tuner.playbook.sweep_lr import AllDiverged, FastestAtEdge, GridTooHigh

    study = with_retries(
        optuna.load_study, study_name=optuna_study_name(loaded.spec.name, "sweep-lr"), storage=storage
    )
    trials = with_retries(study.get_trials, False)
    result = sweep_result_of(trials, stored)
    edges = [v for v in result.verdicts if isinstance(v, FastestAtEdge | AllDiverged | GridTooHigh)]
    if not edges:
        raise UsageError(
            "--extend: nothing to extend: the fastest LR to fit is not at an edge of the grid"
            if result.fastest_lr is not None
            else "--extend: no LR has fit the training set yet, so there is no edge to extend towards "
            "(see the verdict of tuner sweep-lr)"
        )
    have = {slot.values[LR_PARAM] for slot in stored.slots}
    new = [lr for lr in edges[0].new_points if lr not in have]
    if not new:
        return stored
    grid = sorted(have | set(new))
    seeds = loaded.spec.sweep_lr.seeds
    # what finished trained, plus the cap for every planned trial that has not finished
    done = [t for t in sweep_trials(trials) if t.outcome.finished]
    unfinished = max(0, len(stored.slots) - len(done))
    trained = sum(t.steps_trained for t in done) + unfinished * stored.trial_steps
    check_extension(loaded.spec, trained, len(new) * seeds, stored.trial_steps)
    return stored.model_copy(
        update={
            "slots": [*stored.slots, *_slots(new, seeds)],
            "space": _space(grid),
            "notes": [*stored.notes, f"extended with lr {', '.join(f'{lr:.3g}' for lr in new)}"],
        }
    )


def record_result(phase_study: Any, result: SweepResult, finished: bool) -> None:
    """Store the recommendation once every grid trial has finished (None withdraws it)."""
    from tuner.playbook.study_results import store_recommendation

    if finished:
        store_recommendation(phase_study, result.recommended_max_train_steps)


def stored_sweep_result(storage: Any, study: str) -> SweepResult | None:
    """sweep-lr's table and verdicts as the storage holds them (``tuner tune`` logs what they say
    once the sweep is done); None when the study has no sweep-lr phase."""
    import optuna

    from tuner.orchestrate import optuna_study_name, with_retries
    from tuner.playbook.phase_names import SWEEP_PHASE
    from tuner.playbook.plan import load_plan

    name = optuna_study_name(study, SWEEP_PHASE)
    try:
        phase = with_retries(optuna.load_study, study_name=name, storage=storage)
    except KeyError:
        return None
    stored = load_plan(with_retries(lambda: phase.user_attrs))
    if stored is None or stored.fit is None:
        return None
    return sweep_result(phase, stored)
