"""A phase (``round-1``, ``sweep-lr``…) is one Optuna study named ``<study>/<phase>``.

The budget is a number of slots stored with the phase. A worker creates a slot's trial when
it starts it, under the phase lock, so slots are numbered ``0..max_trials-1`` however many
workers (on however many machines) start them, and none is created past the budget. Starting
a phase is therefore instant whatever its budget (enqueueing every trial up front cost ~12 ms a
trial, during which no worker could start). A retry is a new trial for the same slot (same
parameters, same run folder), so it never eats into the budget.

Each command that (re)starts a phase opens a new *run window* (``WINDOW_ATTR``, a time on the
storage's clock, see ``storage_clock``): ``timeout_h`` counts from it on that same clock, so
running the same command again continues a phase that ran out of time, while a ``tuner worker``
joining later shares the window it finds.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

from tuner import _clock
from tuner.errors import UsageError
from tuner.orchestrate.locks import has_lock, phase_lock
from tuner.orchestrate.stall import DEFAULT_STALL_MIN_S, DEFAULT_STALL_MULTIPLE

SETTINGS_ATTR = "tuner:settings"
WINDOW_ATTR = "tuner:window_started_at"  # the storage's clock when a command last (re)started the phase
DEFAULT_MAX_RETRIES = 1


@dataclass(frozen=True)
class PhaseSettings:
    """The budgets of a phase; stored in the study so every worker, anywhere, obeys the same ones."""

    max_trials: int
    max_failed: int
    max_parallel: int | None = None
    max_retries: int = DEFAULT_MAX_RETRIES
    trial_timeout_s: float | None = None
    # the progress watchdog (``stall.py``): stalled after max(multiple x median step, min_s) idle
    stall_multiple: float | None = DEFAULT_STALL_MULTIPLE  # None: off
    stall_min_s: float = DEFAULT_STALL_MIN_S
    timeout_h: float | None = None  # wall time, from the run window's start, after which no trial starts
    stop_after_no_improvement: int | None = None  # completed trials without a new best, then no more start
    config_key: str | None = None  # where the budgets are set (``rounds.round1``): named in messages

    @classmethod
    def build(
        cls,
        max_trials: int,
        *,
        max_failed: int | None = None,
        max_parallel: int | None = None,
        max_retries: int | None = None,
        trial_timeout_s: float | None = None,
        stall_multiple: float | None = DEFAULT_STALL_MULTIPLE,
        stall_min_s: float | None = None,
        timeout_h: float | None = None,
        stop_after_no_improvement: int | None = None,
        config_key: str | None = None,
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
        if stall_multiple is not None and not (stall_multiple >= 1 and math.isfinite(stall_multiple)):
            raise UsageError(f"stall_multiple must be at least 1 (null: no watchdog), got {stall_multiple}")
        if stall_min_s is not None and not (stall_min_s > 0 and math.isfinite(stall_min_s)):
            raise UsageError(f"stall_min_s must be positive, got {stall_min_s}")
        if timeout_h is not None and not (timeout_h > 0 and math.isfinite(timeout_h)):
            raise UsageError(f"the phase's wall-time budget (timeout_h) must be positive, got {timeout_h}")
        if stop_after_no_improvement is not None and stop_after_no_improvement < 1:
            raise UsageError(
                f"stop_after_no_improvement must be at least 1 trial, got {stop_after_no_improvement}"
            )
        return cls(
            max_trials=max_trials,
            max_failed=max_failed if max_failed is not None else max(1, math.floor(max_trials / 3)),
            max_parallel=max_parallel,
            max_retries=DEFAULT_MAX_RETRIES if max_retries is None else max_retries,
            trial_timeout_s=trial_timeout_s,
            stall_multiple=stall_multiple,
            stall_min_s=DEFAULT_STALL_MIN_S if stall_min_s is None else stall_min_s,
            timeout_h=timeout_h,
            stop_after_no_improvement=stop_after_no_improvement,
            config_key=config_key,
        )

    @classmethod
    def from_attrs(cls, attrs: Mapping[str, Any]) -> PhaseSettings:
        return cls(**attrs[SETTINGS_ATTR])

    def key(self, name: str) -> str:
        """``rounds.round1.timeout_h``: a setting as the user sets it (bare when the origin is unknown)."""
        return f"{self.config_key}.{name}" if self.config_key else name


def storage_clock(storage: Any) -> float:
    """Seconds since the epoch on the storage's clock: PostgreSQL's server, or for SQLite the
    clock of the one machine its workers share. The run window is stamped and ``timeout_h``
    measured with it, so a worker whose own clock is minutes off still sees the same elapsed
    time as every other (the stamp and the check come from one clock). A storage without an
    engine (Optuna's in-memory one) has one process, whose clock it is."""
    from sqlalchemy import text

    engine = getattr(storage, "engine", None)
    if engine is None:
        return _clock.now()
    query = (
        "SELECT EXTRACT(EPOCH FROM clock_timestamp())"
        if engine.dialect.name == "postgresql"
        else "SELECT (julianday('now') - 2440587.5) * 86400.0"
    )
    with engine.connect() as connection:
        return float(connection.execute(text(query)).scalar())


def window_started_at(attrs: Mapping[str, Any]) -> float | None:
    """When the phase's current run window began (None: a phase started before windows existed)."""
    value = attrs.get(WINDOW_ATTR)
    return float(value) if isinstance(value, int | float) else None


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

    Each call opens a new run window (``timeout_h`` counts from now). Re-running with the same
    budget changes nothing else; a larger budget adds slots (numbered after
    the existing ones); a smaller one than the slots already started is refused, since trials
    cannot be taken back.
    ``expected_attrs`` must match what the phase was started with (e.g. the training config's
    hash): mixing trials of two configurations in one phase would make its results meaningless.
    """
    from tuner.orchestrate.storage_retries import with_retries

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
        optuna_study.set_user_attr(WINDOW_ATTR, storage_clock(storage))
        for key, value in {**(expected_attrs or {}), **(extra_attrs or {})}.items():
            if existing.get(key) != value:
                optuna_study.set_user_attr(key, value)
        optuna_study.set_user_attr(SETTINGS_ATTR, asdict(settings))
    return optuna_study


@dataclass(frozen=True)
class AttrSwap:
    """What :func:`compare_and_set_attr` found: the value held now, and whether this call set it."""

    held: Any
    swapped: bool


def compare_and_set_attr(
    storage: Any, study: str, phase: str, key: str, new: Any, *, expected: Any, direction: str
) -> AttrSwap:
    """Set the phase's attribute ``key`` to ``new`` only if it holds ``expected`` (None: absent),
    under the phase lock; say what it holds afterwards and whether this call wrote it.

    Creating a phase reads what is stored, builds what to store, then writes: two commands doing
    that at once would both write, and the last would win silently. Here the check and the write
    are one step; a caller that gets back something other than ``new`` lost the race and uses
    (or refuses) the winner's value. Creates the phase's Optuna study when it does not exist yet.
    Without a lock (the gRPC proxy): ``_swap_by_marker``.
    """
    import optuna

    from tuner.orchestrate.storage_retries import with_retries

    def attempt() -> AttrSwap:
        name = optuna_study_name(study, phase)
        optuna_study = optuna.create_study(
            study_name=name, storage=storage, direction=direction, load_if_exists=True
        )
        if not has_lock(storage):
            return _swap_by_marker(storage, optuna_study, key, new, expected=expected)
        with phase_lock(storage, name):
            current = optuna_study.user_attrs.get(key)
            if current != expected:
                return AttrSwap(current, swapped=False)
            optuna_study.set_user_attr(key, new)
            return AttrSwap(new, swapped=True)

    return with_retries(attempt)


SWAP_MARKER_PREFIX = "tuner-swap:"  # no "/": never read as a phase (``stored.split_name``)
SWAP_WAIT_S = 60.0  # a winner writes within a storage call of creating its marker


def _swap_by_marker(storage: Any, optuna_study: Any, key: str, new: Any, *, expected: Any) -> AttrSwap:
    """``compare_and_set_attr`` through the storage API alone: the right to move ``key`` away
    from ``expected`` is the creation of one marker study, which every Optuna storage makes
    exclusive (a study name is unique: ``DuplicatedStudyError`` for every other creator; the
    proxy passes it on as ``ALREADY_EXISTS``). The winner writes; a loser waits for the write.
    The marker is named after the phase's study id, so a phase deleted and started again gets
    new ones; markers stay (a few bytes each, one per plan written)."""
    import hashlib
    import json
    import time

    from optuna.exceptions import DuplicatedStudyError
    from optuna.study import StudyDirection

    current = optuna_study.user_attrs.get(key)
    if current != expected:
        return AttrSwap(current, swapped=False)
    from tuner.orchestrate._optuna_adapter import study_id as study_id_of

    study_id = study_id_of(storage, optuna_study)
    digest = hashlib.sha256(json.dumps([study_id, key, expected], default=str).encode()).hexdigest()
    marker = SWAP_MARKER_PREFIX + digest[:40]
    try:
        storage.create_new_study(directions=[StudyDirection.MINIMIZE], study_name=marker)
    except DuplicatedStudyError:
        deadline = time.monotonic() + SWAP_WAIT_S
        while (current := optuna_study.user_attrs.get(key)) == expected:
            if time.monotonic() >= deadline:
                raise UsageError(
                    f"another command took the right to write {key} of {optuna_study.study_name} and has "
                    f"not written it in {SWAP_WAIT_S:g} s; if no command runs, delete the Optuna study "
                    f"{marker} (optuna delete-study) and run again"
                ) from None
            time.sleep(0.2)
        return AttrSwap(current, swapped=False)
    optuna_study.set_user_attr(key, new)
    return AttrSwap(new, swapped=True)


def open_phase(storage: Any, study: str, phase: str, *, sampler: Any = None) -> Any:
    """The running phase ``<study>/<phase>``; a one-line error if nobody started it."""
    import optuna

    from tuner.orchestrate._optuna_adapter import skew_optuna_stamps
    from tuner.orchestrate.storage_retries import with_retries

    skew_optuna_stamps()  # a no-op unless a test sets a clock offset
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
