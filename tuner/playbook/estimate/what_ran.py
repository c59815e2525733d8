"""What a phase has run, read from the storage and its trials' run folders: trials, the training
steps they actually trained, the seconds they took, and from those the phase's measured seconds
per step. An estimate only reads: no storage is created, no trial is changed.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tuner.playbook.estimate.figures import CostSource, PhaseRan, StepCost

STEPS_ATTR = "tuner:trial_steps"  # the phase's trial length, stored with its plan


@dataclass(frozen=True)
class StoredPhase:
    """A phase as the storage holds it: its trials, budget and trial length."""

    trials: list[Any]  # optuna FrozenTrials
    budget: int | None  # the trial budget it was last started with (``--trials`` included)
    trial_steps: int | None


def recommended_max_train_steps(storage: Any, study: str) -> int | None:
    """sweep-lr's recommendation stored with its phase, if it has one."""
    from tuner.playbook.study_results import stored_recommendation

    return stored_recommendation(storage, study) if storage is not None else None


def load_stored_phase(storage: Any, study: str, phase: str) -> StoredPhase | None:
    """The phase's trials and stored budget and length; None if the phase was never created."""
    import optuna

    from tuner.orchestrate import optuna_study_name, with_retries
    from tuner.orchestrate.phase import SETTINGS_ATTR

    if storage is None:
        return None
    try:
        loaded = with_retries(optuna.load_study, study_name=optuna_study_name(study, phase), storage=storage)
    except KeyError:
        return None
    attrs = with_retries(lambda: loaded.user_attrs)
    trials = with_retries(loaded.get_trials, deepcopy=False)
    settings = attrs.get(SETTINGS_ATTR) or {}
    budget, steps = settings.get("max_trials"), attrs.get(STEPS_ATTR)
    return StoredPhase(
        list(trials),
        int(budget) if isinstance(budget, int) else None,
        int(steps) if isinstance(steps, (int, float)) and steps > 0 else None,
    )


def _positive(value: Any) -> int | None:
    return int(value) if isinstance(value, (int, float)) and value > 0 else None


def _recorded_step(value: Any) -> int | None:
    """A step a worker recorded (0 included: a trial stopped before its first step trained none)."""
    return (
        int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) and value >= 0 else None
    )


def _status_step(trial: Any) -> int | None:
    """The step a trial's run folder says it ended at (its ``status.json``), if it can be read."""
    from tuner.train.run_folder import read_status

    run_dir = trial.user_attrs.get("run_dir")
    if not isinstance(run_dir, str):
        return None
    status = read_status(Path(run_dir))
    return _positive(status.get("step")) if isinstance(status, dict) else None


def folder_owners(trials: list[Any]) -> set[int]:
    """The numbers of the trials whose run folder's ``status.json`` speaks for them: of the
    trials started in one folder, the latest that counts (``budget.counted``).

    Why: a retry resumes in its failed attempt's folder and rewrites its ``status.json``; read
    for the failed attempt, the retry's step would be counted twice (an attempt interrupted at
    step 0, its retry trained to 200: 400 steps, not 200). A duplicate never owns one."""
    from optuna.trial import TrialState

    from tuner.orchestrate.budget import counted

    latest: dict[str, int] = {}
    for trial in counted(trials):
        run_dir = trial.user_attrs.get("run_dir")
        if isinstance(run_dir, str) and trial.state != TrialState.WAITING:
            latest[run_dir] = max(latest.get(run_dir, trial.number), trial.number)
    return set(latest.values())


def reached_step(trial: Any, phase_steps: int | None, *, owns_folder: bool = True) -> int:
    """The last step a trial trained to: the step it recorded at its end (``final_step``, 0 for
    one stopped before its first step), else its run folder's status when the folder is still
    its own (``owns_folder``: no later attempt resumed there, ``folder_owners``), else its last
    checkpoint or eval (a trial running now, or one killed mid-run). A completed trial recorded
    before ``final_step`` was trained its length (``phase_steps``: the phase's)."""
    from optuna.trial import TrialState

    attrs = trial.user_attrs
    final = _recorded_step(attrs.get("final_step"))
    if final is None and owns_folder:
        final = _status_step(trial)
    if final is None and trial.state == TrialState.COMPLETE:  # recorded before final_step was
        final = _positive(attrs.get("max_train_steps")) or phase_steps
    if final is not None:
        return final
    evals = [int(step) for step in trial.intermediate_values]
    return max([*evals, _positive(attrs.get("last_checkpoint_step")) or 0])


def trained_steps(trial: Any, phase_steps: int | None, *, owns_folder: bool = True) -> int:
    """Steps this trial itself trained: a retry resumed from its failed attempt's checkpoint
    (``resumed_from_step``) trained only the steps after it. The failed attempt counts the steps
    it reached, those after its last checkpoint included: they were trained, though lost."""
    resumed = _positive(trial.user_attrs.get("resumed_from_step")) or 0
    return max(0, reached_step(trial, phase_steps, owns_folder=owns_folder) - resumed)


def trial_seconds(trial: Any) -> float | None:
    """The seconds a finished trial trained: ``train_s``, else its start and end times."""
    seconds = trial.user_attrs.get("train_s")
    if isinstance(seconds, (int, float)) and seconds > 0:
        return float(seconds)
    if trial.datetime_start is not None and trial.datetime_complete is not None:
        elapsed = (trial.datetime_complete - trial.datetime_start).total_seconds()
        return elapsed if elapsed > 0 else None
    return None


def _wall_s(trials: list[Any]) -> float:
    starts = [t.datetime_start for t in trials if t.datetime_start is not None]
    ends = [t.datetime_complete for t in trials if t.datetime_complete is not None]
    if not starts or not ends:
        return 0.0
    return max(0.0, (max(ends) - min(starts)).total_seconds())


def what_ran(stored: StoredPhase | None) -> PhaseRan:
    """Trials, slots and trained steps of a phase; seconds where the trials recorded them.

    A trial running now has trained up to its last eval or checkpoint and still has the rest of
    its length to go.
    """
    from optuna.trial import TrialState

    if stored is None:
        return PhaseRan()
    started = [t for t in stored.trials if t.state != TrialState.WAITING]
    owners = folder_owners(stored.trials)
    slots: set[int] = set()
    steps = unmeasured = running_left = 0
    measured_s = 0.0
    for trial in started:
        slots.add(int(trial.user_attrs.get("slot", trial.number)))
        owns_folder = trial.number in owners
        trained = trained_steps(trial, stored.trial_steps, owns_folder=owns_folder)
        steps += trained
        seconds = trial_seconds(trial) if trial.state.is_finished() else None
        if seconds is None:
            unmeasured += trained
        else:
            measured_s += seconds
        if trial.state == TrialState.RUNNING:
            length = _positive(trial.user_attrs.get("max_train_steps")) or stored.trial_steps or 0
            running_left += max(0, length - reached_step(trial, stored.trial_steps, owns_folder=owns_folder))
    return PhaseRan(len(started), len(slots), steps, measured_s, unmeasured, _wall_s(started), running_left)


def measured_cost(stored: StoredPhase | None) -> StepCost | None:
    """Seconds per step over the phase's completed trials (``train_s``, else their start and
    end times), weighted by steps so trials of different lengths (sweep-lr's early stops) count
    for what they trained. None if the phase has no such trial."""
    from optuna.trial import TrialState

    if stored is None:
        return None
    seconds, steps, count = 0.0, 0, 0
    owners = folder_owners(stored.trials)
    for trial in stored.trials:
        if trial.state != TrialState.COMPLETE:
            continue
        owns_folder = trial.number in owners
        trial_s, trial_steps = (
            trial_seconds(trial),
            trained_steps(trial, stored.trial_steps, owns_folder=owns_folder),
        )
        if trial_s is None or not trial_steps:
            continue
        seconds, steps, count = seconds + trial_s, steps + trial_steps, count + 1
    if not count:
        return None
    noun = "trial" if count == 1 else "trials"
    return StepCost(seconds / steps, CostSource.MEASURED, f"measured over {count} {noun}", trials=count)
