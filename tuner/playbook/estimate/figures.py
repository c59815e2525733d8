"""The figures of an estimate: per phase what ran, what is still planned, and their sum.

A phase's figures add two parts: what ran (read from the storage, in trials and in the training
steps the trials actually trained) and what is still planned (the trials the phase has not
started, at its trial length, plus the steps its running trials have left). Nothing here reads
or prints anything.
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass, field
from typing import Any

from tuner.playbook.estimate.formulas import search_cost_hours, search_days


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
    """A phase's trials in all (run and planned) and their length, as the study file, sweep-lr's
    result and the phase's stored plan and budget define them."""

    phase: str
    trials: int
    steps: int | None  # None: unknown (``unknown`` says why)
    parallel_cap: int | None = None  # the round's ``parallel``
    upper_bound: bool = False  # sweep-lr trials stop once they fit: ``steps`` is the cap
    unknown: str | None = None


@dataclass(frozen=True)
class PhaseRan:
    """What a phase has run so far, from the storage and its trials' run folders.

    ``steps``: training steps the trials actually trained (a sweep-lr trial that fit stopped
    early; a retry that resumed from a checkpoint counts only the steps after it). ``slots``:
    the phase's trial slots started; the rest of its budget is still planned. ``running_steps_left``:
    what the trials running now have still to train.
    """

    trials: int = 0
    slots: int = 0
    steps: int = 0
    measured_s: float = 0.0  # device-seconds of the trials that recorded a duration
    unmeasured_steps: int = 0  # steps of trials without one (running, killed): costed per step
    wall_s: float = 0.0  # from the first trial's start to the last one's end
    running_steps_left: int = 0


NOTHING_RAN = PhaseRan()


@dataclass(frozen=True)
class PhaseEstimate:
    length: PhaseLength
    parallel: int
    cost: StepCost | None  # None when nothing is known to cost it with
    eval_every: int
    ran: PhaseRan = NOTHING_RAN

    @property
    def phase(self) -> str:
        return self.length.phase

    @property
    def trials_to_run(self) -> int:
        return max(0, self.length.trials - self.ran.slots)

    @property
    def trials_total(self) -> int:
        """Trials run (every attempt, retries too) plus trials still planned."""
        return self.ran.trials + self.trials_to_run

    @property
    def steps_to_run(self) -> int | None:
        """Steps still planned: the trials not started at the trial length, and what the running
        ones have left; None when the trial length is unknown and trials are left."""
        if self.trials_to_run and self.length.steps is None:
            return None
        return self.trials_to_run * (self.length.steps or 0) + self.ran.running_steps_left

    @property
    def steps_total(self) -> int | None:
        left = self.steps_to_run
        return None if left is None else self.ran.steps + left

    @property
    def known(self) -> bool:
        """Every figure of the phase is known (its planned part has a length and a cost)."""
        nothing_left = self.steps_to_run == 0
        return nothing_left or (self.steps_to_run is not None and self.cost is not None)

    @property
    def hours_per_trial(self) -> float | None:
        """A planned trial's hours (the formulas' ``average trial cost``)."""
        if self.cost is None or self.length.steps is None:
            return None
        return self.cost.trial_seconds(self.length.steps, self.eval_every) / 3600

    @property
    def hours_ran(self) -> float:
        """Device-hours already spent: the trials' own durations, else their steps at the cost."""
        per_step = self.cost.seconds_per_step(self.eval_every) if self.cost else 0.0
        return (self.ran.measured_s + self.ran.unmeasured_steps * per_step) / 3600

    def _running_left_hours(self) -> float:
        per_step = self.cost.seconds_per_step(self.eval_every) if self.cost else 0.0
        return self.ran.running_steps_left * per_step / 3600

    @property
    def cost_hours(self) -> float | None:
        """What ran plus what is planned; None when the planned part cannot be costed."""
        if not self.known:
            return None
        planned = 0.0
        if self.trials_to_run:
            assert self.hours_per_trial is not None
            planned = search_cost_hours(self.trials_to_run, self.hours_per_trial)
        return self.hours_ran + planned + self._running_left_hours()

    @property
    def days(self) -> float | None:
        """Wall-clock days: those the phase has taken, plus the planned trials in waves of
        ``parallel`` (the running trials' rest shared among the workers)."""
        if not self.known:
            return None
        planned = 0.0
        if self.trials_to_run:
            assert self.hours_per_trial is not None
            planned = search_days(self.trials_to_run, self.parallel, self.hours_per_trial)
        return self.ran.wall_s / 86400 + planned + self._running_left_hours() / self.parallel / 24


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
        return sum(phase.trials_total for phase in self.phases)

    @property
    def total_trials_ran(self) -> int:
        return sum(phase.ran.trials for phase in self.phases)

    @property
    def total_steps_ran(self) -> int:
        return sum(phase.ran.steps for phase in self.phases)

    @property
    def total_steps_to_run(self) -> int:
        """Of the phases whose length is known (``complete`` says whether that is all of them)."""
        return sum(phase.steps_to_run or 0 for phase in self.phases)

    @property
    def total_steps(self) -> int:
        return self.total_steps_ran + self.total_steps_to_run

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
                "trials_ran": self.total_trials_ran,
                "steps": self.total_steps,
                "steps_ran": self.total_steps_ran,
                "steps_to_run": self.total_steps_to_run,
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
        "trials": phase.trials_total,
        "trials_ran": phase.ran.trials,
        "trials_to_run": phase.trials_to_run,
        "steps_per_trial": phase.length.steps,
        "steps_upper_bound": phase.length.upper_bound,
        "steps": phase.steps_total,
        "steps_ran": phase.ran.steps,
        "steps_to_run": phase.steps_to_run,
        "seconds_per_step": cost.seconds_per_step(phase.eval_every) if cost else None,
        "startup_s": cost.startup_s if cost else None,
        "cost_source": cost.source.value if cost else None,
        "cost_detail": cost.detail if cost else None,
        "hours_per_trial": phase.hours_per_trial,
        "parallel_trials": phase.parallel,
        "hours_ran": phase.hours_ran,
        "cost_hours": phase.cost_hours,
        "days": phase.days,
        "unknown": phase.length.unknown,
    }
