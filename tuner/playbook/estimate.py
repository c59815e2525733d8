"""What the study's search will cost before it runs: ``tuner estimate``.

The playbook's formulas (product.md section 6):
``search cost = trials x average trial cost`` and
``days = (trials / parallel trials) x (hours per trial / 24)``.

A trial's cost is seconds per step times its steps. Seconds per step come, per phase, from the
phase's own finished trials when it has run (the most honest figure: the real machine, the real
points, evals and checkpoints included), else from a probe: a few training steps and one eval
timed here, with the threads one worker would get. Nothing here prints; the CLI does.
"""

from __future__ import annotations

import enum
import math
import os
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tuner.errors import UsageError
from tuner.spec import LoadedStudy, RoundSpec, ScheduleSegment, StudySpec

SWEEP_LR = "sweep-lr"
RECOMMENDED_ATTR = "tuner:recommended_max_train_steps"  # on the sweep-lr phase
DEFAULT_PROBE_STEPS = 30
MIN_PROBE_STEPS = 3  # the first step is warm-up; the rest are timed


class CostSource(str, enum.Enum):
    """Where a phase's seconds per step come from."""

    MEASURED = "measured"  # the phase's finished trials in the storage
    PROBE = "probe"  # a few steps timed in this process


class LengthSource(str, enum.Enum):
    """Where ``max_train_steps`` (the production length) comes from."""

    STUDY_FILE = "study file"
    SWEEP_LR = "sweep-lr"


@dataclass(frozen=True)
class StepCost:
    """Seconds a trial spends: ``startup_s + steps x step_s + evals x eval_s``.

    A measured cost has everything folded into ``step_s`` (the trials' own durations include
    their evals, checkpoints and start-up); a probe keeps them apart, since a probe of 30 steps
    with one eval would otherwise say nothing of a trial that evaluates every 100 steps.
    """

    step_s: float
    source: CostSource
    detail: str  # "measured over 18 trials" / "probe of 30 steps, 1 thread"
    eval_s: float = 0.0
    startup_s: float = 0.0
    trials: int = 0  # measured trials behind the figure (0 for a probe)

    def trial_seconds(self, steps: int, eval_every: int) -> float:
        evals = math.ceil(steps / eval_every)  # every eval_every steps, and always after the last
        return self.startup_s + steps * self.step_s + evals * self.eval_s

    def seconds_per_step(self, eval_every: int) -> float:
        """Per step, the evals amortised over ``eval_every`` (start-up left out: it is per trial)."""
        return self.step_s + self.eval_s / eval_every


@dataclass(frozen=True)
class PhaseLength:
    """A phase as the study file (and sweep-lr's result) define it: trials and their length."""

    phase: str
    trials: int
    steps: int | None  # None: unknown (``unknown`` says why)
    parallel_cap: int | None = None  # the round's ``parallel``
    upper_bound: bool = False  # sweep-lr trials stop once they fit: ``steps`` is the cap
    unknown: str | None = None


@dataclass(frozen=True)
class PhaseEstimate:
    length: PhaseLength
    parallel: int
    cost: StepCost | None  # None when the trial length is unknown
    eval_every: int

    @property
    def phase(self) -> str:
        return self.length.phase

    @property
    def known(self) -> bool:
        return self.length.steps is not None and self.cost is not None

    @property
    def hours_per_trial(self) -> float | None:
        if not self.known:
            return None
        assert self.cost is not None and self.length.steps is not None
        return self.cost.trial_seconds(self.length.steps, self.eval_every) / 3600

    @property
    def cost_hours(self) -> float | None:
        hours = self.hours_per_trial
        return None if hours is None else search_cost_hours(self.length.trials, hours)

    @property
    def days(self) -> float | None:
        hours = self.hours_per_trial
        return None if hours is None else search_days(self.length.trials, self.parallel, hours)


@dataclass(frozen=True)
class Workers:
    """The workers ``run-round`` would start here (or ``--workers`` / ``--devices``)."""

    labels: list[str]
    device: str  # "cpu" or "cuda"
    threads: int | None  # per CPU worker: the cores are shared
    cores: int


@dataclass(frozen=True)
class Estimate:
    study: str
    max_train_steps: int | None
    max_train_steps_source: LengthSource | None
    workers: Workers
    phases: list[PhaseEstimate]
    notes: list[str] = field(default_factory=list)  # what the figures assume

    @property
    def complete(self) -> bool:
        return all(phase.known for phase in self.phases)

    @property
    def total_trials(self) -> int:
        return sum(phase.length.trials for phase in self.phases)

    @property
    def total_cost_hours(self) -> float:
        """Of the phases whose cost is known (``complete`` says whether that is all of them)."""
        return sum(phase.cost_hours or 0.0 for phase in self.phases)

    @property
    def total_days(self) -> float:
        """Phases run one after the other: their days add up."""
        return sum(phase.days or 0.0 for phase in self.phases)

    def as_json(self) -> dict[str, Any]:
        """The figures under stable keys (documented in the README's ``tuner estimate`` section)."""
        return {
            "study": self.study,
            "max_train_steps": self.max_train_steps,
            "max_train_steps_source": self.max_train_steps_source.value
            if self.max_train_steps_source
            else None,
            "workers": {
                "count": len(self.workers.labels),
                "labels": list(self.workers.labels),
                "device": self.workers.device,
                "threads_per_worker": self.workers.threads,
                "cores": self.workers.cores,
            },
            "phases": [_phase_json(phase) for phase in self.phases],
            "total": {
                "trials": self.total_trials,
                "cost_hours": self.total_cost_hours,
                "days": self.total_days,
                "complete": self.complete,
            },
            "assumptions": list(self.notes),
        }


def _phase_json(phase: PhaseEstimate) -> dict[str, Any]:
    cost = phase.cost
    return {
        "phase": phase.phase,
        "trials": phase.length.trials,
        "steps_per_trial": phase.length.steps,
        "steps_upper_bound": phase.length.upper_bound,
        "seconds_per_step": cost.seconds_per_step(phase.eval_every) if cost else None,
        "startup_s": cost.startup_s if cost else None,
        "cost_source": cost.source.value if cost else None,
        "cost_detail": cost.detail if cost else None,
        "hours_per_trial": phase.hours_per_trial,
        "parallel_trials": phase.parallel,
        "cost_hours": phase.cost_hours,
        "days": phase.days,
        "unknown": phase.length.unknown,
    }


# -- the formulas -----------------------------------------------------------------------------


def search_cost_hours(trials: int, hours_per_trial: float) -> float:
    """``trials x average trial cost``: device-hours (GPU-hours, or CPU-worker-hours)."""
    return trials * hours_per_trial


def search_days(trials: int, parallel: int, hours_per_trial: float) -> float:
    """``(trials / parallel trials) x (hours per trial / 24)``: wall-clock days."""
    if parallel < 1:
        raise ValueError(f"parallel trials must be at least 1, got {parallel}")
    return trials / parallel * hours_per_trial / 24


# -- what the study will run ------------------------------------------------------------------


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


def planned_phases(spec: StudySpec) -> list[PhaseLength]:
    """sweep-lr, round 1, round 2 and any later rounds, with their trials and lengths.

    ``spec.training.max_train_steps`` is the production length (from the file or sweep-lr);
    None leaves the phases whose length depends on it unknown, never an error.
    """
    sweep = spec.sweep_lr
    from tuner.playbook.sweep_lr import default_grid

    grid = sweep.grid if sweep.grid is not None else default_grid(spec.training.optimizer.lr)
    cap = sweep.max_steps or spec.training.max_train_steps  # as sweep-lr chooses its cap
    phases = [
        PhaseLength(
            SWEEP_LR,
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
        steps, unknown = _round_steps(spec, round_spec, number, previous)
        previous = steps
        phases.append(PhaseLength(f"round-{number}", trials, steps, round_spec.parallel, unknown=unknown))
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
        os.cpu_count() or 1,
    )


# -- the storage ------------------------------------------------------------------------------


def open_existing_storage(url: str) -> Any:
    """The storage, or None for an SQLite file that does not exist: an estimate creates nothing."""
    from tuner.playbook.study_results import open_existing_storage as open_existing

    return open_existing(url)


def _load_phase(storage: Any, study: str, phase: str) -> Any:
    import optuna

    from tuner.orchestrate import optuna_study_name, with_retries

    try:
        return with_retries(optuna.load_study, study_name=optuna_study_name(study, phase), storage=storage)
    except KeyError:
        return None


def recommended_max_train_steps(storage: Any, study: str) -> int | None:
    """sweep-lr's recommendation stored with its phase, if it has one."""
    from tuner.playbook.study_results import stored_recommendation

    return stored_recommendation(storage, study) if storage is not None else None


def _trial_steps(trial: Any, phase_steps: Any) -> int | None:
    attrs = trial.user_attrs
    for value in (attrs.get("final_step"), attrs.get("max_train_steps"), phase_steps):
        if isinstance(value, (int, float)) and value > 0:
            return int(value)
    return None


def _trial_seconds(trial: Any) -> float | None:
    seconds = trial.user_attrs.get("train_s")
    if isinstance(seconds, (int, float)) and seconds > 0:
        return float(seconds)
    if trial.datetime_start is not None and trial.datetime_complete is not None:
        elapsed = (trial.datetime_complete - trial.datetime_start).total_seconds()
        return elapsed if elapsed > 0 else None
    return None


def measured_cost(storage: Any, study: str, phase: str) -> StepCost | None:
    """Seconds per step over the phase's completed trials (``train_s``, else their start and
    end times), weighted by steps so trials of different lengths (sweep-lr's early stops) count
    for what they trained. None if the phase has no such trial."""
    from optuna.trial import TrialState

    optuna_study = _load_phase(storage, study, phase) if storage is not None else None
    if optuna_study is None:
        return None
    phase_steps = optuna_study.user_attrs.get("tuner:trial_steps")
    seconds, steps, count = 0.0, 0, 0
    for trial in optuna_study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)):
        trial_s, trial_steps = _trial_seconds(trial), _trial_steps(trial, phase_steps)
        if trial_s is None or trial_steps is None:
            continue
        seconds, steps, count = seconds + trial_s, steps + trial_steps, count + 1
    if not count:
        return None
    noun = "trial" if count == 1 else "trials"
    return StepCost(seconds / steps, CostSource.MEASURED, f"measured over {count} {noun}", trials=count)


# -- the probe --------------------------------------------------------------------------------


def _stopwatch_callbacks() -> tuple[Any, Any]:
    """Two training callbacks noting when the fit starts, steps end, and the eval (with its
    checkpoint) starts and ends: the first runs before every other callback of an event, the
    second after the loggers and the checkpoint writer.

    Their notes are their ``state_dict``: a run of several processes runs them in rank 0 and
    hands their state back (``time.perf_counter`` is the machine's monotonic clock, the same
    in every process).
    """
    from tuner.train import Callback

    class ProbeStart(Callback):
        order = -1000

        def __init__(self) -> None:
            self.notes: dict[str, Any] = {"fit_start": None, "eval_start": None}

        def on_fit_start(self, loop: Any) -> None:
            self.notes["fit_start"] = time.perf_counter()

        def on_eval_start(self, loop: Any) -> None:
            self.notes["eval_start"] = time.perf_counter()

        def state_dict(self) -> dict[str, Any]:
            return dict(self.notes)

        def load_state_dict(self, state: dict[str, Any]) -> None:
            self.notes = dict(state)

    class ProbeEnd(Callback):
        order = 1000

        def __init__(self) -> None:
            self.notes: dict[str, Any] = {"step_ends": [], "eval_end": None}

        def on_train_step_end(self, loop: Any) -> None:
            self.notes["step_ends"].append(time.perf_counter())

        def on_checkpoint(self, loop: Any) -> None:
            self.notes["eval_end"] = time.perf_counter()

        def state_dict(self) -> dict[str, Any]:
            return {"step_ends": list(self.notes["step_ends"]), "eval_end": self.notes["eval_end"]}

        def load_state_dict(self, state: dict[str, Any]) -> None:
            self.notes = dict(state)

    return ProbeStart(), ProbeEnd()


def probe_cost(
    loaded: LoadedStudy, *, steps: int = DEFAULT_PROBE_STEPS, threads: int | None, device: str
) -> StepCost:
    """Train ``steps`` steps of the study at its fixed hyperparameters, here, and time them.

    Step time: the steps after the first (whose warm-up is start-up). Eval time: the one eval
    at the end, with its checkpoint. Start-up: building the workload and the engine, plus the
    first step's excess (and the workload's imports, which every trial's process repeats); what
    a worker imports once for all its trials (torch, the engine) is not in it. ``threads``: a
    CPU worker's share of the cores, so the figure is one worker's while the others run too.
    Side effects: a temporary run folder; the global RNGs reseeded.
    """
    import torch

    from tuner.orchestrate.trial_process import warm_up
    from tuner.train import run_training

    if steps < MIN_PROBE_STEPS:
        raise UsageError(f"--probe-steps must be at least {MIN_PROBE_STEPS}, got {steps}")
    spec = loaded.spec
    training = spec.training.model_copy(
        update={
            "max_train_steps": steps,
            "eval_every": steps,  # one eval, at the end
            "schedule": [ScheduleSegment(shape="constant")],  # fits any length; costs the same
            "device": device,
        }
    )
    probe_spec = spec.model_copy(update={"training": training})
    warm_up(spec, loaded.base_dir)  # what a worker imports once for all its trials: not start-up
    first, last = _stopwatch_callbacks()
    previous_threads = torch.get_num_threads()
    if threads:
        torch.set_num_threads(threads)
    try:
        with tempfile.TemporaryDirectory(prefix="tuner-estimate-") as folder:
            called = time.perf_counter()
            run_training(
                probe_spec,
                Path(folder) / "probe",
                base_dir=loaded.base_dir,
                extra_callbacks=[first, last],
                progress=False,
                stop_signals=(),
                start_method="fork",  # warm_up imports only: no torch operation has run here
            )
    finally:
        torch.set_num_threads(previous_threads)
    ends, fit_start = last.notes["step_ends"], first.notes["fit_start"]
    eval_start, eval_end = first.notes["eval_start"], last.notes["eval_end"]
    assert fit_start is not None and len(ends) == steps
    assert eval_start is not None and eval_end is not None
    step_s = (ends[-1] - ends[0]) / (steps - 1)
    first_step_s = ends[0] - fit_start
    startup_s = (fit_start - called) + max(0.0, first_step_s - step_s)
    where = f"{threads} thread{'s' if threads != 1 else ''}" if device == "cpu" else device
    return StepCost(
        step_s,
        CostSource.PROBE,
        f"probe of {steps} steps ({where})",
        eval_s=eval_end - eval_start,
        startup_s=startup_s,
    )


# -- the whole estimate -----------------------------------------------------------------------


def estimate(
    loaded: LoadedStudy,
    *,
    storage_url: str,
    workers: int | None = None,
    devices: Sequence[str] | None = None,
    probe_steps: int = DEFAULT_PROBE_STEPS,
    announce: Callable[[str], None] | None = None,
) -> Estimate:
    """Per phase: trials, length, seconds per step (measured, else probed), parallel trials,
    cost and days. Reads the storage only if it exists; probes only if a phase needs it
    (``announce`` hears what the probe does before it starts: it may take a while)."""
    from tuner.orchestrate.pool import check_devices

    if probe_steps < MIN_PROBE_STEPS:
        raise UsageError(f"--probe-steps must be at least {MIN_PROBE_STEPS}, got {probe_steps}")
    spec = loaded.spec
    # the widest phase decides the workers the probe is timed with (run-round starts them all)
    budget = max(p.trials for p in planned_phases(spec))
    per = spec.training.processes_per_trial
    widest = plan_workers(
        workers=workers, devices=devices, max_parallel=None, budget=budget, processes_per_trial=per
    )
    if devices:
        check_devices(devices)  # before anything is read or timed
    storage = open_existing_storage(storage_url)
    length_source: LengthSource | None = None
    if spec.training.max_train_steps is not None:
        length_source = LengthSource.STUDY_FILE
    elif (recommended := recommended_max_train_steps(storage, spec.name)) is not None:
        spec = with_max_train_steps(spec, recommended)
        length_source = LengthSource.SWEEP_LR
    lengths = planned_phases(spec)
    measured = {p.phase: measured_cost(storage, spec.name, p.phase) for p in lengths}
    probe: StepCost | None = None
    if any(p.steps is not None and measured[p.phase] is None for p in lengths):
        device = "cpu" if spec.training.device == "cpu" else widest.device
        if announce is not None:
            announce(
                f"timing {probe_steps} training steps and one eval here ({device}) for the phases not run yet"
            )
        probe = probe_cost(loaded, steps=probe_steps, threads=widest.threads, device=device)
    phases = []
    for length in lengths:
        chosen = plan_workers(
            workers=workers,
            devices=devices,
            max_parallel=length.parallel_cap,
            budget=length.trials,
            processes_per_trial=per,
        )
        # the round's `parallel` caps trials at once over all workers, whatever their number
        parallel = min(len(chosen.labels), length.parallel_cap or length.trials, length.trials)
        cost = None if length.steps is None else (measured[length.phase] or probe)
        phases.append(PhaseEstimate(length, parallel, cost, spec.training.eval_every))
    result = Estimate(spec.name, spec.training.max_train_steps, length_source, widest, phases)
    result.notes.extend(_assumptions(result, probe))
    return result


def _assumptions(result: Estimate, probe: StepCost | None) -> list[str]:
    """What the figures take for granted, in a few words each (printed on one line)."""
    workers = result.workers
    count = len(workers.labels)
    if workers.device == "cpu":
        threads = f"{workers.threads} thread{'s' if workers.threads != 1 else ''}"
        notes = [
            f"{count} CPU worker{'s' if count != 1 else ''} sharing {workers.cores} cores ({threads} each)"
        ]
    else:
        notes = [f"{count} GPU worker{'s' if count != 1 else ''} ({', '.join(workers.labels)})"]
    if probe is not None:
        notes.append(
            f"probe at the study's fixed hyperparameters, {probe.startup_s:.2g} s start-up per trial"
        )
    if any(p.length.upper_bound for p in result.phases):
        notes.append("sweep-lr trials run to their cap (they stop once they fit)")
    notes.append("phases one after another")
    return notes
