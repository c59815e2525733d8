"""What each phase trains: the trials' configs, their length, their points, their budgets.

``run-round`` (which starts a phase) and ``worker`` (which joins one, maybe on another machine)
build the same plan from the same study file, so a trial is the same whoever runs it.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import shlex
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tuner.errors import UsageError
from tuner.orchestrate import PhaseSettings, TrialJob, quasi_random_point, random_point
from tuner.spec import LoadedStudy, RoundSpec, StudySpec, key_to_path

ROUND_PHASES = {1: "round-1"}
CONFIG_HASH_ATTR = "tuner:config_hash"


@dataclass
class PhasePlan:
    phase: str
    round_spec: RoundSpec
    trial_steps: int
    params_for_slot: Callable[[int], dict[str, Any]]
    make_job: Callable[[dict[str, Any], Path], TrialJob]
    sampler_name: str

    def settings(self, **overrides: Any) -> PhaseSettings:
        """The budgets: the study's ``rounds`` entry, with command-line overrides on top."""
        chosen = {
            "max_trials": self.round_spec.trials,
            "max_failed": self.round_spec.max_failed,
            "max_parallel": self.round_spec.parallel,
            "max_retries": self.round_spec.max_retries,
            "trial_timeout_s": self.round_spec.trial_timeout_s,
            "timeout_h": self.round_spec.timeout_h,
            "stop_after_no_improvement": self.round_spec.stop_after_no_improvement,
            "config_key": f"rounds.{self.phase.replace('-', '')}",  # round-1 -> rounds.round1, for messages
        }
        chosen.update({key: value for key, value in overrides.items() if value is not None})
        max_trials = chosen.pop("max_trials")
        return PhaseSettings.build(max_trials, **chosen)

    def sampler(self) -> Any:
        """Optuna's sampler, only for ``tpe`` (quasi-random and random points are precomputed)."""
        if self.sampler_name != "tpe":
            return None
        import optuna

        return optuna.samplers.TPESampler(seed=None)


def training_config_hash(spec: StudySpec) -> str:
    """What defines a trial's training; a worker with a different study file must not join."""
    relevant = spec.model_dump(
        mode="json", include={"seed", "workload", "objective", "training", "search_space"}
    )
    return hashlib.sha256(json.dumps(relevant, sort_keys=True).encode()).hexdigest()[:16]


def _format_value(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value)


def reproduce_command(
    study_path: Path,
    values: dict[str, Any],
    steps: int | None,
    output_dir: Path,
    overrides: Iterable[str] = (),
) -> str:
    """``tuner train`` with the ``--set`` overrides and a trial's values, shell-quoted (``tuner
    train`` records its own run's command with no values and ``steps`` None).

    Paths are absolute so the command works from any folder; the overrides come first, so the
    trial's own values and length win exactly as they did in the trial.
    """
    from tuner.spec import redact_storage_url

    words = ["tuner", "train", str(Path(study_path).resolve())]
    for text in overrides:
        words += ["--set", redact_storage_url(text)]  # `--set storage=...` must not leak a password
    for key, value in values.items():
        words += ["--set", f"{key}={_format_value(value)}"]
    if steps is not None:
        words += ["--set", f"max_train_steps={steps}"]
    words += ["--output-dir", str(Path(output_dir).resolve())]
    return shlex.join(words)


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


def round_steps(spec: StudySpec, round_spec: RoundSpec, round_number: int) -> int:
    """A round's trial length: ``steps``, else ``length_fraction`` of ``max_train_steps``."""
    if round_spec.steps is not None:
        return round_spec.steps
    production = spec.training.max_train_steps
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


def phase_plan(loaded: LoadedStudy, phase: str, output_dir: Path) -> PhasePlan:
    """The plan of ``phase`` (``round-1``) for the study in ``loaded``."""
    spec = loaded.spec
    if phase != "round-1":
        known = ", ".join(ROUND_PHASES.values())
        raise UsageError(f"unknown phase {phase!r}; phases that run trials: {known}")
    refuse_searched_overrides(loaded)  # here, so `run-round` and `tuner worker` both refuse
    round_spec = spec.rounds.round1
    steps = round_steps(spec, round_spec, 1)
    space = spec.search_space
    if not space:
        raise UsageError("search_space is empty: round 1 needs at least one hyperparameter to search")
    seed = spec.seed

    def params_for_slot(slot: int) -> dict[str, Any]:
        if round_spec.sampler == "quasi-random":
            return quasi_random_point(space, slot, seed)
        if round_spec.sampler == "random":
            return random_point(space, slot, seed)
        return {}  # tpe: Optuna's sampler chooses when the trial starts

    def make_job(values: dict[str, Any], run_dir: Path) -> TrialJob:
        trial_spec = loaded.with_values({**values, "max_train_steps": steps})
        return TrialJob(
            spec=trial_spec,
            base_dir=loaded.base_dir,
            run_dir=run_dir,
            command=reproduce_command(loaded.path, values, steps, output_dir, loaded.overrides.values()),
        )

    return PhasePlan(phase, round_spec, steps, params_for_slot, make_job, round_spec.sampler)


@dataclass
class StartedPhase:
    plan: PhasePlan
    settings: PhaseSettings
    storage_url: str
    folder: Path  # <output>/<study>/<phase>: the trials' run folders
    study: Any = None  # the Optuna study of the phase, once created


def prepare_round(
    loaded: LoadedStudy,
    phase: str,
    output_dir: Path,
    *,
    storage_url: str | None = None,
    **budget_overrides: Any,
) -> StartedPhase:
    """Everything about the phase that needs neither the storage nor torch (bad input fails here).

    ``storage_url`` beats ``$TUNER_STORAGE``, the study's ``storage`` and the SQLite default;
    ``budget_overrides``: ``max_trials``, ``max_failed``, ``max_parallel``, ``max_retries``,
    ``trial_timeout_s`` (None keeps the study file's value).
    """
    from tuner.orchestrate import resolve_storage_url
    from tuner.output import phase_dir

    spec = loaded.spec
    plan = phase_plan(loaded, phase, output_dir)
    settings = plan.settings(**budget_overrides)
    url = storage_url or resolve_storage_url(spec.storage, output_dir, spec.name)
    return StartedPhase(plan, settings, url, phase_dir(output_dir, spec.name, phase))


def create_round(loaded: LoadedStudy, prepared: StartedPhase) -> StartedPhase:
    """Create (or reopen and top up) the prepared phase in its storage; no trial runs here."""
    from tuner.orchestrate import open_storage, start_phase
    from tuner.train.schedules import build_schedule

    spec, plan = loaded.spec, prepared.plan
    try:
        build_schedule(spec.training.schedule, plan.trial_steps)
    except ValueError as error:
        raise UsageError(
            f"training.schedule does not fit {plan.phase}'s trials of {plan.trial_steps} steps "
            f"(set by rounds.round1.steps or length_fraction): {error}"
        ) from None
    prepared.study = start_phase(
        open_storage(prepared.storage_url),
        spec.name,
        plan.phase,
        prepared.settings,
        direction=spec.objective.direction,
        sampler=plan.sampler(),
        expected_attrs={CONFIG_HASH_ATTR: training_config_hash(spec)},
        extra_attrs={"tuner:study_file": str(loaded.path.resolve()), "tuner:trial_steps": plan.trial_steps},
    )
    return prepared


def start_round(
    loaded: LoadedStudy,
    phase: str,
    output_dir: Path,
    *,
    storage_url: str | None = None,
    **budget_overrides: Any,
) -> StartedPhase:
    """``prepare_round`` then ``create_round``."""
    prepared = prepare_round(loaded, phase, output_dir, storage_url=storage_url, **budget_overrides)
    return create_round(loaded, prepared)
