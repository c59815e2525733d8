"""A stored plan made runnable on this machine: its trials' jobs, points and budgets.

Whoever serves a phase (the command that created it, a re-run, ``tuner worker`` elsewhere) reads
the plan back from the storage, checks its own study file against it, and runs it from here.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tuner.errors import UsageError
from tuner.orchestrate import PhaseSettings, TrialJob, quasi_random_point, random_point
from tuner.playbook.config_check import refuse_changed_study
from tuner.playbook.phase_names import round_number
from tuner.playbook.plan import StoredPlan, load_plan
from tuner.playbook.reproduce import reproduce_command
from tuner.spec import LoadedStudy, RoundSpec

#: ``gp``: the quasi-random points before the Gaussian process proposes (one per dimension of a
#: typical 3-5 dimensional space covers it; fewer leave the GP's first fit to chance)
GP_STARTUP = 5


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
        """Optuna's sampler for ``tpe`` and ``gp`` (every other point is known in advance).

        ``gp``: Optuna's ``GPSampler``, seeded by the plan (it weighs the trials still running,
        so two workers asking at once do not get one point), after ``GP_STARTUP`` quasi-random
        points (``params_for_slot``): the exploration the other rounds start with."""
        if self.stored.sampler == "tpe":
            import optuna

            return optuna.samplers.TPESampler(seed=None)
        if self.stored.sampler == "gp":
            import optuna

            return optuna.samplers.GPSampler(
                seed=self.stored.seed, n_startup_trials=GP_STARTUP, warn_independent_sampling=False
            )
        return None

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
        if stored.sampler == "gp" and slot < GP_STARTUP:
            return quasi_random_point(space, slot, stored.seed)
        return {}  # tpe, gp: Optuna's sampler chooses when the trial starts

    def outpaced_from(self) -> Callable[[list[Any]], int | None] | None:
        """sweep-lr: the phase's trials -> the fewest steps any LR has fit in (on every seed), past
        which an LR still training can no longer be the fastest (``sweep_phase.fit_step_to_beat``);
        None for the rounds, whose trials all matter."""
        if self.stored.fit is None:
            return None
        from tuner.playbook.sweep_phase import fit_step_to_beat

        stored = self.stored
        return lambda trials: fit_step_to_beat(trials, stored)

    def pruner(self) -> Any:
        """Round 1's Optuna pruner (``rounds.round1.pruner``), asked at each of a trial's evals
        (``WorkerOptions.pruner``); None: every trial trains to its length.

        Its warm-up is a share of the length, not a step count: under a decaying schedule the
        early evals understate a run, and a round's length changes with the budget. The median
        rule waits for 4 completed trials and a third of the length; successive halving's first
        rung is a ninth of it (two more at a third and at the end, a third kept at each)."""
        spec = self.round_spec
        if spec is None or spec.pruner == "none" or self.stored.fit is not None:
            return None
        eval_every = int(self.stored.config.get("training", {}).get("eval_every") or 1)
        return round1_pruner(spec.pruner, self.stored.trial_steps, eval_every)

    def make_job(self, slot: int, values: dict[str, Any], run_dir: Path) -> TrialJob:
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


def round1_pruner(kind: str, steps: int, eval_every: int) -> Any:
    """Optuna's pruner ``kind`` (``median``, ``successive-halving``) for a round of ``steps``-step
    trials evaluated every ``eval_every`` (see ``PhasePlan.pruner``; ``benchmarks/pruning_replay``
    replays the same on finished curves)."""
    import optuna

    if kind == "median":
        return optuna.pruners.MedianPruner(n_startup_trials=4, n_warmup_steps=steps // 3)
    first_rung = max(eval_every, steps // 9)
    return optuna.pruners.SuccessiveHalvingPruner(min_resource=first_rung, reduction_factor=3)


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
