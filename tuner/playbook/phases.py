"""Phases: what each trains (its stored plan), their budgets, and starting or joining one.

The command that creates a phase (``run-round``, ``sweep-lr``) builds its plan (``plan.py``) and
stores it in the phase; whoever serves the phase afterwards (``tuner worker`` here or on another
machine, or the same command re-run) reads that plan back and only checks its own study file
against it (``runnable_plan.py``). Plans of each kind are built in ``round1.py``,
``later_rounds.py`` and ``sweep_phase.py``; creating the plan is compare-and-set, so two commands
racing to create a phase agree on one plan.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tuner.errors import UsageError
from tuner.orchestrate import PhaseSettings
from tuner.playbook.phase_names import SWEEP_PHASE, known_phases, round_number, round_phase
from tuner.playbook.plan import PLAN_ATTR, StoredPlan, load_plan
from tuner.playbook.runnable_plan import (
    PhasePlan,
    check_against_plan,
    load_stored_plan,
    phase_plan,
    reproduce_command,
)
from tuner.playbook.trial_lengths import (
    ProductionLength,
    check_schedule_fits,
    production_length,
    round_steps,
)
from tuner.spec import LoadedStudy, key_to_path

#: This module starts and creates phases; the names of the modules it builds on (phase names,
#: trial lengths, the runnable plan: the plan builders import those without importing this
#: module) stay importable from here.
__all__ = [
    "SWEEP_PHASE",
    "PhasePlan",
    "ProductionLength",
    "StartedPhase",
    "build_plan",
    "check_against_plan",
    "check_phase_input",
    "check_schedule_fits",
    "create_phase",
    "known_phases",
    "load_stored_plan",
    "phase_plan",
    "prepare_phase",
    "production_length",
    "refuse_searched_overrides",
    "reproduce_command",
    "round_number",
    "round_phase",
    "round_steps",
    "start_round",
]


def refuse_searched_overrides(loaded: LoadedStudy) -> None:
    """A ``--set`` on a key the search space sets would be silently overwritten in every trial."""
    searched = {key_to_path(key): key for key in loaded.spec.search_space}
    for target, text in loaded.overrides.items():
        for path, key in searched.items():
            if path[: len(target)] == target or target[: len(path)] == path:
                raise UsageError(
                    f"--set {text}: {key} is searched in this phase (search_space[{key}]), so the "
                    "override would be ignored; change or remove the search_space entry instead"
                )


TRIALS_ATTR = "tuner:trials_given"  # round 1's trial budget as a command gave it (``--trials``)


@dataclass
class StartedPhase:
    """A phase being started (``prepare_phase``) and then created (``create_phase``)."""

    loaded: LoadedStudy
    phase: str
    output_dir: Path
    storage_url: str
    folder: Path  # <output>/<study>/<phase>: the trials' run folders
    budget_overrides: dict[str, Any] = field(default_factory=dict)
    extend: bool = False  # sweep-lr --extend
    plan: PhasePlan | None = None
    settings: PhaseSettings | None = None
    study: Any = None  # the Optuna study of the phase, once created
    created: bool = False  # this command created the plan (False: it continued a stored one)
    started_over: str = ""  # why the stored phase was deleted first (``start_over``), if it was


def check_phase_input(loaded: LoadedStudy, phase: str) -> None:
    """What can be refused from the study file alone, before any worker or storage starts."""
    spec = loaded.spec
    number = round_number(phase)
    if phase != SWEEP_PHASE and (number is None or spec.rounds.get(number) is None):
        known = ", ".join(known_phases(spec))
        raise UsageError(f"unknown phase {phase!r}; this study's phases: {known}")
    if number is not None:
        refuse_searched_overrides(loaded)  # here, so `run-round` and `tuner worker` both refuse
    if number == 1 and not spec.search_space:
        raise UsageError("search_space is empty: round 1 needs at least one hyperparameter to search")


def prepare_phase(
    loaded: LoadedStudy,
    phase: str,
    output_dir: Path,
    *,
    storage_url: str | None = None,
    extend: bool = False,
    **budget_overrides: Any,
) -> StartedPhase:
    """Everything about the phase that needs neither the storage nor torch (bad input fails here).

    ``storage_url`` beats ``$TUNER_STORAGE``, the study's ``storage`` and the SQLite default;
    ``budget_overrides``: ``max_trials``, ``max_failed``, ``max_parallel``, ``max_retries``,
    ``trial_timeout_s`` (None keeps the study file's value).
    """
    from tuner.orchestrate import resolve_storage_url
    from tuner.output import phase_dir

    check_phase_input(loaded, phase)
    if budget_overrides.get("max_trials") is not None and phase != round_phase(1):
        raise UsageError(f"--trials applies to round 1 only; {phase} trains the points its plan fixes")
    spec = loaded.spec
    url = storage_url or resolve_storage_url(spec.storage, output_dir, spec.name)
    overrides = {key: value for key, value in budget_overrides.items() if value is not None}
    PhaseSettings.build(
        overrides.get("max_trials", 1), **{k: v for k, v in overrides.items() if k != "max_trials"}
    )
    return StartedPhase(
        loaded, phase, output_dir, url, phase_dir(output_dir, spec.name, phase), overrides, extend
    )


def build_plan(
    loaded: LoadedStudy, phase: str, storage: Any, *, extend_from: StoredPlan | None = None
) -> StoredPlan:
    """The plan of a phase that has none yet (or, for ``sweep-lr --extend``, the longer one)."""
    number = round_number(phase)
    production = production_length(loaded.spec, storage, loaded.overrides)
    if phase == SWEEP_PHASE:
        from tuner.playbook.sweep_phase import extended_sweep_plan, sweep_plan

        if extend_from is not None:
            return extended_sweep_plan(loaded, extend_from, storage)
        return sweep_plan(loaded, production)
    if number == 1:
        from tuner.playbook.round1 import round1_plan

        return round1_plan(loaded, production)
    from tuner.playbook.later_rounds import later_round_plan

    assert number is not None
    return later_round_plan(loaded, number, storage, production)


def create_phase(prepared: StartedPhase) -> StartedPhase:
    """Create the phase with its plan (or reopen it and check the file against its plan)."""
    from tuner.orchestrate import open_storage, optuna_study_name, start_phase, with_retries
    from tuner.playbook.study_results import open_existing_storage

    loaded, phase = prepared.loaded, prepared.phase
    spec = loaded.spec
    name = optuna_study_name(spec.name, phase)
    storage = open_existing_storage(prepared.storage_url)
    early = None
    if storage is None:  # a new SQLite file: refuse (if at all) before creating it
        early = _plan_before_the_database(prepared, name)
        storage = open_storage(prepared.storage_url)
    existing = with_retries(_existing_attrs, storage, name)
    stored = load_plan(existing) if existing is not None else None
    if stored is not None:
        try:
            check_against_plan(loaded, stored, name)
        except UsageError:
            from tuner.playbook.start_over import start_over, trained_nothing

            if not with_retries(trained_nothing, storage, name):
                raise
            prepared.started_over = start_over(storage, name, prepared.folder)
            existing = stored = None
    if stored is not None and existing is not None:
        if prepared.extend:
            longer = build_plan(loaded, phase, storage, extend_from=stored)
            stored = _store_plan(loaded, longer, existing[PLAN_ATTR], storage)
    else:
        if prepared.extend:
            raise UsageError(f"--extend continues a sweep that has run; {name} has not started yet")
        proposed = early if early is not None else build_plan(loaded, phase, storage)
        stored = _store_plan(loaded, proposed, None, storage)
        prepared.created = stored is proposed
    given = prepared.budget_overrides.get("max_trials")
    if given is None and existing is not None and existing.get(TRIALS_ATTR) is not None:
        # trials given before (``--trials``, ``tune``'s round 1) hold until given again: the
        # study file's own count would grow a phase planned within a budget
        prepared.budget_overrides["max_trials"] = given = int(existing[TRIALS_ATTR])
    plan = phase_plan(loaded, stored, prepared.output_dir)
    settings = plan.settings(**prepared.budget_overrides)
    prepared.plan, prepared.settings = plan, settings
    prepared.study = start_phase(
        storage,
        spec.name,
        phase,
        settings,
        direction=spec.objective.direction,
        sampler=plan.sampler(),
        extra_attrs={  # the plan is not among them: _store_plan stored it, compare-and-set
            "tuner:study_file": str(loaded.path.resolve()),
            "tuner:trial_steps": stored.trial_steps,
            **({TRIALS_ATTR: given} if given is not None else {}),
        },
    )
    from tuner.orchestrate.storage_pointer import remember_storage

    remember_storage(prepared.output_dir, spec.name, prepared.storage_url)  # for ``tuner list``
    return prepared


def _plan_before_the_database(prepared: StartedPhase, name: str) -> StoredPlan:
    """The plan built against an empty storage, for a SQLite file that does not exist yet: a
    refusal (round 2 before round 1, ``--extend`` before the sweep) then comes before the file
    is created, and leaves no empty ``study.db`` for ``report`` and ``list`` to stumble over."""
    import optuna

    if prepared.extend:
        raise UsageError(f"--extend continues a sweep that has run; {name} has not started yet")
    return build_plan(prepared.loaded, prepared.phase, optuna.storages.InMemoryStorage())


def _store_plan(loaded: LoadedStudy, proposed: StoredPlan, seen: str | None, storage: Any) -> StoredPlan:
    """Store ``proposed`` if the phase still holds the plan text ``seen`` (None: no plan), as read
    before ``proposed`` was built. Otherwise another command stored its plan in between: this
    one uses that plan if its study file matches it, and refuses naming the fields if not.
    Returns ``proposed`` itself only when it was stored (the caller then created the phase)."""
    from tuner.orchestrate import compare_and_set_attr, optuna_study_name

    spec = loaded.spec
    swap = compare_and_set_attr(
        storage,
        spec.name,
        proposed.phase,
        PLAN_ATTR,
        proposed.to_attr(),
        expected=seen,
        direction=spec.objective.direction,
    )
    if swap.swapped:
        return proposed
    winner = StoredPlan.from_attr(swap.held)
    check_against_plan(loaded, winner, optuna_study_name(spec.name, proposed.phase))
    return winner


def _existing_attrs(storage: Any, name: str) -> dict[str, Any] | None:
    import optuna

    try:
        return dict(optuna.load_study(study_name=name, storage=storage).user_attrs)
    except KeyError:
        return None


def start_round(
    loaded: LoadedStudy,
    phase: str,
    output_dir: Path,
    *,
    storage_url: str | None = None,
    **budget_overrides: Any,
) -> StartedPhase:
    """``prepare_phase`` then ``create_phase`` (for tests and scripts: no worker is started)."""
    return create_phase(prepare_phase(loaded, phase, output_dir, storage_url=storage_url, **budget_overrides))
