"""Phases: what each trains (its stored plan), their budgets, and starting or joining one.

The command that creates a phase (``run-round``, ``sweep-lr``) builds its plan (``plan.py``) and
stores it in the phase; whoever serves the phase afterwards (``tuner worker`` here or on another
machine, or the same command re-run) reads that plan back and only checks its own study file
against it. Plans of each kind are built in ``round1.py``, ``later_rounds.py`` and
``sweep_phase.py``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tuner.errors import UsageError
from tuner.orchestrate import PhaseSettings, TrialJob, quasi_random_point, random_point
from tuner.playbook.config_check import refuse_changed_study
from tuner.playbook.plan import PLAN_ATTR, StoredPlan, load_plan
from tuner.spec import LoadedStudy, RoundSpec, StudySpec, key_to_path

SWEEP_PHASE = "sweep-lr"


def round_phase(number: int) -> str:
    return f"round-{number}"


def round_number(phase: str) -> int | None:
    """``round-2`` -> 2; None for another phase."""
    head, _, tail = phase.partition("-")
    return int(tail) if head == "round" and tail.isdigit() and int(tail) >= 1 else None


def known_phases(spec: StudySpec) -> list[str]:
    return [SWEEP_PHASE, *(round_phase(n) for n in spec.rounds.numbers)]


@dataclass
class PhasePlan:
    """A stored plan, plus what this machine needs to run its trials (paths, ``--set`` texts)."""

    stored: StoredPlan
    loaded: LoadedStudy  # this machine's study file (checked against the plan)
    output_dir: Path
    round_spec: RoundSpec | None = None  # the budgets (they may change between runs); None: defaults
    fit_callbacks: Callable[[], list[Any]] | None = None
    _space: dict[str, Any] | None = field(default=None, repr=False)

    @property
    def phase(self) -> str:
        return self.stored.phase

    @property
    def trial_steps(self) -> int:
        return self.stored.trial_steps

    @property
    def sampler_name(self) -> str:
        return self.stored.sampler

    @property
    def budget(self) -> int:
        """Trials of the phase: its fixed points, else the round's ``trials``."""
        if self.stored.slots:
            return len(self.stored.slots)
        return self.round_spec.trial_budget if self.round_spec is not None else 1

    def settings(self, **overrides: Any) -> PhaseSettings:
        """The budgets: the study's ``rounds`` entry, with command-line overrides on top."""
        spec = self.round_spec
        chosen: dict[str, Any] = {"max_trials": self.budget}
        if spec is not None:
            chosen.update(
                max_failed=spec.max_failed,
                max_parallel=spec.parallel,
                max_retries=spec.max_retries,
                trial_timeout_s=spec.trial_timeout_s,
                stall_multiple=spec.stall_multiple,
                stall_min_s=spec.stall_min_s,
                timeout_h=spec.timeout_h,
                stop_after_no_improvement=spec.stop_after_no_improvement,
                config_key=f"rounds.{self.phase.replace('-', '')}",  # round-1 -> rounds.round1, for messages
            )
        chosen.update({key: value for key, value in overrides.items() if value is not None})
        if self.stored.slots and chosen["max_trials"] != len(self.stored.slots):
            raise UsageError(
                f"{self.phase} trains exactly its {len(self.stored.slots)} planned points; "
                "--trials does not apply to it"
            )
        max_trials = chosen.pop("max_trials")
        return PhaseSettings.build(max_trials, **chosen)

    def sampler(self) -> Any:
        """Optuna's sampler, only for ``tpe`` (every other point is known in advance)."""
        if self.stored.sampler != "tpe":
            return None
        import optuna

        return optuna.samplers.TPESampler(seed=None)

    def search_space(self) -> dict[str, Any]:
        """The stored space as parameter models (parsed once: every slot of round 1 asks for it)."""
        if self._space is None:
            self._space = self.stored.search_space()
        return self._space

    def params_for_slot(self, slot: int) -> dict[str, Any]:
        stored = self.stored
        if stored.slots:
            planned = stored.slot(slot)
            return dict(planned.values) if planned is not None else {}
        space = self.search_space()
        if stored.sampler == "quasi-random":
            return quasi_random_point(space, slot, stored.seed)
        if stored.sampler == "random":
            return random_point(space, slot, stored.seed)
        return {}  # tpe: Optuna's sampler chooses when the trial starts

    def make_job(self, slot: int, values: dict[str, Any], run_dir: Path) -> TrialJob:
        from tuner.playbook.reproduce import reproduce_command

        return TrialJob(
            spec=self.stored.trial_spec(slot, values),
            base_dir=self.loaded.base_dir,
            run_dir=run_dir,
            command=reproduce_command(
                self.loaded.path,
                self.stored.trial_sets(slot, values),
                None,
                self.output_dir,
                self.loaded.overrides.values(),
            ),
            attrs=self.stored.slot_attrs(slot),
            extra_callbacks=self.fit_callbacks,
        )


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


@dataclass(frozen=True)
class ProductionLength:
    """``max_train_steps`` of a full-length run, and where the value comes from."""

    steps: int | None
    source: str  # "the study file", "tuner sweep-lr", or "" when unknown

    def describe(self) -> str:
        return f"{self.steps} (from {self.source})" if self.steps is not None else "not set"


def round_steps(
    spec: StudySpec, round_spec: RoundSpec, round_number: int, production: int | None = None
) -> int:
    """A round's trial length: ``steps``, else ``length_fraction`` of the production length.

    ``production`` defaults to ``training.max_train_steps``; later rounds without either run at
    the production length.
    """
    if round_spec.steps is not None:
        return round_spec.steps
    production = production if production is not None else spec.training.max_train_steps
    if production is None:
        raise UsageError(
            f"rounds.round{round_number}: set steps, or set training.max_train_steps "
            "(tuner sweep-lr finds it) so the trial length can be a fraction of it"
        )
    fraction = round_spec.length_fraction if round_spec.length_fraction is not None else 1.0
    return max(1, math.ceil(production * fraction))


def check_schedule_fits(loaded: LoadedStudy) -> None:
    """The schedule fits ``max_train_steps`` and round 1's trials, where their lengths are known.

    For ``tuner validate``: ``train`` and ``run-round`` would refuse the same at their start.
    """
    import contextlib

    from tuner.train.schedules import build_schedule

    spec = loaded.spec
    lengths: list[tuple[int, str]] = []
    if spec.training.max_train_steps is not None:
        lengths.append((spec.training.max_train_steps, "training.max_train_steps"))
    if spec.search_space:
        with contextlib.suppress(UsageError):  # no length to check against yet
            lengths.append((round_steps(spec, spec.rounds.round1, 1), "round 1's trials"))
    for total, what in lengths:
        try:
            build_schedule(spec.training.schedule, total)
        except ValueError as error:
            raise loaded.error(
                ("training", "schedule"), f"does not fit {what} of {total} steps: {error}"
            ) from None


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


def production_length(spec: StudySpec, storage: Any) -> ProductionLength:
    """``training.max_train_steps`` from the file, else sweep-lr's recommendation in the storage."""
    if spec.training.max_train_steps is not None:
        return ProductionLength(spec.training.max_train_steps, "the study file")
    from tuner.playbook.study_results import stored_recommendation

    recommended = stored_recommendation(storage, spec.name) if storage is not None else None
    if recommended is not None:
        return ProductionLength(recommended, "tuner sweep-lr")
    return ProductionLength(None, "")


def build_plan(
    loaded: LoadedStudy, phase: str, storage: Any, *, extend_from: StoredPlan | None = None
) -> StoredPlan:
    """The plan of a phase that has none yet (or, for ``sweep-lr --extend``, the longer one)."""
    number = round_number(phase)
    production = production_length(loaded.spec, storage)
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


def phase_plan(loaded: LoadedStudy, stored: StoredPlan, output_dir: Path) -> PhasePlan:
    """The runnable plan of ``stored`` on this machine."""
    number = round_number(stored.phase)
    round_spec = loaded.spec.rounds.get(number) if number is not None else None
    callbacks = None
    if stored.fit is not None:
        fit = stored.fit

        def callbacks() -> list[Any]:
            from tuner.train import FitCriterion

            return [FitCriterion(fit.metric, fit.threshold, fit.direction)]

    return PhasePlan(stored, loaded, output_dir, round_spec, callbacks)


def check_against_plan(loaded: LoadedStudy, stored: StoredPlan, where: str) -> None:
    """The study file (with its ``--set`` values) still describes the phase's stored plan."""
    refuse_changed_study(
        stored.config, loaded.spec.model_dump_for_files(), what=str(loaded.path), where=where
    )


def create_phase(prepared: StartedPhase) -> StartedPhase:
    """Create the phase with its plan (or reopen it and check the file against its plan)."""
    from tuner.orchestrate import open_storage, optuna_study_name, start_phase, with_retries

    loaded, phase = prepared.loaded, prepared.phase
    spec = loaded.spec
    storage = open_storage(prepared.storage_url)
    name = optuna_study_name(spec.name, phase)
    existing = with_retries(_existing_attrs, storage, name)
    stored = load_plan(existing) if existing is not None else None
    if stored is not None:
        check_against_plan(loaded, stored, name)
        if prepared.extend:
            stored = build_plan(loaded, phase, storage, extend_from=stored)
    else:
        if prepared.extend:
            raise UsageError(f"--extend continues a sweep that has run; {name} has not started yet")
        stored = build_plan(loaded, phase, storage)
        prepared.created = True
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
        extra_attrs={
            PLAN_ATTR: stored.to_attr(),
            "tuner:study_file": str(loaded.path.resolve()),
            "tuner:trial_steps": stored.trial_steps,
        },
    )
    return prepared


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


def load_stored_plan(opened_phase: Any) -> StoredPlan:
    """The plan of a running phase (a worker joining it)."""
    from tuner.orchestrate import with_retries

    stored = load_plan(with_retries(lambda: opened_phase.user_attrs))
    if stored is None:
        raise UsageError(
            f"phase {opened_phase.study_name} has no stored plan (created by an older tuner); "
            "re-run the command that started it to continue"
        )
    return stored
