"""A phase (``round-1``, ``sweep-lr``…) is one Optuna study named ``<study>/<phase>``.

The budget is a number of slots stored with the phase. A worker creates a slot's trial when
it starts it, under the phase lock, so slots are numbered ``0..max_trials-1`` however many
workers (on however many machines) start them, and none is created past the budget. Starting
a phase is therefore instant whatever its budget (enqueueing every trial up front cost ~12 ms a
trial, during which no worker could start). A retry is a new trial for the same slot (same
parameters, same run folder), so it never eats into the budget.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

from tuner.errors import UsageError
from tuner.orchestrate.locks import phase_lock

SETTINGS_ATTR = "tuner:settings"
DEFAULT_MAX_RETRIES = 1


@dataclass(frozen=True)
class PhaseSettings:
    """The budgets of a phase; stored in the study so every worker, anywhere, obeys the same ones."""

    max_trials: int
    max_failed: int
    max_parallel: int | None = None
    max_retries: int = DEFAULT_MAX_RETRIES
    trial_timeout_s: float | None = None

    @classmethod
    def build(
        cls,
        max_trials: int,
        *,
        max_failed: int | None = None,
        max_parallel: int | None = None,
        max_retries: int | None = None,
        trial_timeout_s: float | None = None,
    ) -> PhaseSettings:
        """Defaults: a failure budget of a third of the trials (at least one), one retry."""
        if max_trials < 1:
            raise UsageError(f"the trial budget must be at least 1, got {max_trials}")
        if max_failed is not None and max_failed < 1:
            raise UsageError(f"the failure budget must be at least 1, got {max_failed}")
        if max_parallel is not None and max_parallel < 1:
            raise UsageError(f"max parallel trials must be at least 1, got {max_parallel}")
        if trial_timeout_s is not None and not trial_timeout_s > 0:
            raise UsageError(f"the trial timeout must be positive, got {trial_timeout_s}")
        return cls(
            max_trials=max_trials,
            max_failed=max_failed if max_failed is not None else max(1, math.floor(max_trials / 3)),
            max_parallel=max_parallel,
            max_retries=DEFAULT_MAX_RETRIES if max_retries is None else max_retries,
            trial_timeout_s=trial_timeout_s,
        )

    @classmethod
    def from_attrs(cls, attrs: Mapping[str, Any]) -> PhaseSettings:
        return cls(**attrs[SETTINGS_ATTR])


def optuna_study_name(study: str, phase: str) -> str:
    return f"{study}/{phase}"


def start_phase(
    storage: Any,
    study: str,
    phase: str,
    settings: PhaseSettings,
    *,
    direction: str,
    sampler: Any = None,
    expected_attrs: Mapping[str, Any] | None = None,
    extra_attrs: Mapping[str, Any] | None = None,
) -> Any:
    """Create the phase (or reopen it) with budget ``settings``; workers create the trials.

    Re-running with the same budget changes nothing; a larger budget adds slots (numbered after
    the existing ones); a smaller one than the slots already started is refused, since trials
    cannot be taken back.
    ``expected_attrs`` must match what the phase was started with (e.g. the training config's
    hash): mixing trials of two configurations in one phase would make its results meaningless.
    """
    from tuner.orchestrate.storage import with_retries

    # every step is idempotent: a storage error (a dropped connection) just runs it again
    return with_retries(
        _start_phase, storage, study, phase, settings, direction, sampler, expected_attrs, extra_attrs
    )


def _start_phase(
    storage: Any,
    study: str,
    phase: str,
    settings: PhaseSettings,
    direction: str,
    sampler: Any,
    expected_attrs: Mapping[str, Any] | None,
    extra_attrs: Mapping[str, Any] | None,
) -> Any:
    import optuna

    name = optuna_study_name(study, phase)
    optuna_study = optuna.create_study(
        study_name=name, storage=storage, direction=direction, sampler=sampler, load_if_exists=True
    )
    with phase_lock(storage, name):
        existing = optuna_study.user_attrs
        for key, value in (expected_attrs or {}).items():
            if key in existing and existing[key] != value:
                raise UsageError(
                    f"phase {name} was started from a different study configuration ({key} differs); "
                    "rename the study or use another --output-dir / storage for the new configuration"
                )
        slots = {t.user_attrs.get("slot", t.number) for t in optuna_study.get_trials(deepcopy=False)}
        if len(slots) > settings.max_trials:
            raise UsageError(
                f"phase {name} already has {len(slots)} trials; a budget of {settings.max_trials} "
                "cannot take them back (budgets can only grow)"
            )
        # the settings last: a worker waits for them, so whatever else it reads is there by then
        for key, value in {**(expected_attrs or {}), **(extra_attrs or {})}.items():
            if existing.get(key) != value:
                optuna_study.set_user_attr(key, value)
        optuna_study.set_user_attr(SETTINGS_ATTR, asdict(settings))
    return optuna_study


def open_phase(storage: Any, study: str, phase: str, *, sampler: Any = None) -> Any:
    """The running phase ``<study>/<phase>``; a one-line error if nobody started it."""
    import optuna

    from tuner.orchestrate.storage import with_retries

    name = optuna_study_name(study, phase)
    try:
        optuna_study = with_retries(optuna.load_study, study_name=name, storage=storage, sampler=sampler)
    except KeyError:
        raise UsageError(
            f"phase {name} does not exist in this storage; start it first (e.g. tuner run-round)"
        ) from None
    if SETTINGS_ATTR not in with_retries(lambda: optuna_study.user_attrs):
        raise UsageError(f"study {name} was not created by tuner (it has no budget settings)")
    return optuna_study
