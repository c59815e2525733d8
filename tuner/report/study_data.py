"""A study as the report sees it: its phases, each a list of slots (one learning curve each).

Read from the storage alone (``tuner.orchestrate.stored``), so it works on a study other
machines ran. A slot's attempts (a trial and the retries that resumed it, linked by
``retry_of``) are one learning curve, not separate trials: the slot's outcome is its last
attempt's, its curve the union of theirs, its training time their sum.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import StrEnum
from functools import cached_property
from typing import Any

from tuner.errors import UsageError
from tuner.orchestrate.budget import counted
from tuner.orchestrate.phase import SETTINGS_ATTR, PhaseSettings
from tuner.orchestrate.stored import StorageReader, StoredPhase, StoredTrial
from tuner.playbook.phases import SWEEP_PHASE, round_number
from tuner.playbook.plan import StoredPlan, load_plan
from tuner.playbook.study_results import RECOMMENDED_ATTR

STUDY_FILE_ATTR = "tuner:study_file"


class SlotState(StrEnum):
    COMPLETE = "complete"
    STOPPED = "stopped"  # stopped cleanly without a value (Optuna PRUNED)
    DIVERGED = "diverged"  # NaN/inf loss: a result about the search space, not a failure
    FAILED = "failed"  # crashed, oom, timeout, killed... and not retried (or out of retries)
    RUNNING = "running"
    WAITING = "waiting"  # not started, or a retry queued


_STATES = {
    "COMPLETE": SlotState.COMPLETE,
    "PRUNED": SlotState.STOPPED,
    "RUNNING": SlotState.RUNNING,
    "WAITING": SlotState.WAITING,
}


@dataclass(frozen=True)
class TrialSlot:
    """One slot of a phase: its attempts, first to last (``trial 3`` and ``trial 3 (retry 1)``).

    Immutable; its derived values are computed once (a report of 10,000 trials asks for each
    many times).
    """

    phase: str
    attempts: tuple[StoredTrial, ...]

    @cached_property
    def final(self) -> StoredTrial:
        return self.attempts[-1]

    @property
    def slot(self) -> int:
        return self.final.slot

    @cached_property
    def attrs(self) -> dict[str, Any]:
        return self.final.user_attrs

    @property
    def params(self) -> dict[str, Any]:
        return self.final.params

    @cached_property
    def state(self) -> SlotState:
        final = self.final
        if final.state == "FAIL":
            return SlotState.DIVERGED if self.failure_reason == "diverged" else SlotState.FAILED
        # a COMPLETE trial with an infinite value is complete (as the budget counts it), but has no
        # value to rank: ``value`` is None and ``PhaseData.completed`` leaves it out
        return _STATES.get(final.state, SlotState.FAILED)

    @cached_property
    def value(self) -> float | None:
        """The trial's best objective value (retrospective checkpoint selection), if finite."""
        value = self.final.value
        return (
            value if self.final.state == "COMPLETE" and value is not None and math.isfinite(value) else None
        )

    @cached_property
    def best_step(self) -> int | None:
        step = self.attrs.get("best_step")
        return int(step) if isinstance(step, int | float) else None

    @cached_property
    def max_train_steps(self) -> int | None:
        steps = self.attrs.get("max_train_steps")
        return int(steps) if isinstance(steps, int | float) and steps > 0 else None

    @cached_property
    def position(self) -> float | None:
        """best step / max_train_steps: where in training the best checkpoint was."""
        if self.best_step is None or self.max_train_steps is None:
            return None
        return self.best_step / self.max_train_steps

    @cached_property
    def failure_reason(self) -> str | None:
        reason = self.attrs.get("failure_reason")
        return str(reason) if reason is not None and self.final.state == "FAIL" else None

    @property
    def error(self) -> str | None:
        error = self.attrs.get("error")
        return str(error) if error and self.final.state == "FAIL" else None

    @property
    def run_dir(self) -> str | None:
        run_dir = self.attrs.get("run_dir")
        return str(run_dir) if run_dir else None

    @property
    def reproduce(self) -> str | None:
        command = self.attrs.get("reproduce")
        return str(command) if command else None

    @cached_property
    def train_s(self) -> float:
        """Training time over every attempt."""
        return sum(float(t.user_attrs.get("train_s") or 0.0) for t in self.attempts)

    @property
    def retries(self) -> int:
        return len(self.attempts) - 1

    @property
    def numbers(self) -> list[int]:
        return [t.number for t in self.attempts]

    @property
    def label(self) -> str:
        return f"trial {self.slot}" + (f" ({self.retries} retries)" if self.retries > 1 else "")


def group_slots(phase: str, trials: Iterable[StoredTrial]) -> list[TrialSlot]:
    """Trials -> slots: each retry chain (``retry_of``) in attempt order; duplicates (a slot claimed
    twice where nothing serialised the claims: ``budget.counted``) count for nothing."""
    by_slot: dict[int, list[StoredTrial]] = {}
    for trial in counted(trials):
        by_slot.setdefault(trial.slot, []).append(trial)
    slots = []
    for slot in sorted(by_slot):
        slots.append(TrialSlot(phase, tuple(_chain(by_slot[slot]))))
    return slots


def _chain(attempts: list[StoredTrial]) -> list[StoredTrial]:
    """The attempts in order: follow ``retry_of`` from the first; what the chain misses (an
    attempt whose predecessor is gone) goes by attempt number, then trial number."""
    ordered = sorted(attempts, key=lambda t: (t.attempt, t.number))
    after = {t.user_attrs.get("retry_of"): t for t in ordered if t.user_attrs.get("retry_of") is not None}
    chain = [ordered[0]]
    seen = {ordered[0].number}
    while (nxt := after.get(chain[-1].number)) is not None and nxt.number not in seen:
        chain.append(nxt)
        seen.add(nxt.number)
    chain += [t for t in ordered if t.number not in seen]
    return chain


def merged_curve(attempts: Iterable[StoredTrial], curves: dict[int, dict[int, float]]) -> dict[int, float]:
    """One learning curve from a slot's attempts (a later attempt's value at a step wins: a retry
    that started over re-evaluates those steps)."""
    merged: dict[int, float] = {}
    for trial in attempts:
        merged.update(curves.get(trial.number, {}))
    return dict(sorted(merged.items()))


@dataclass
class PhaseData:
    """One phase: its plan, budgets and slots, as stored."""

    study: str
    phase: str
    direction: str
    plan: StoredPlan | None
    settings: PhaseSettings | None
    slots: list[TrialSlot]
    attempts: int  # Optuna trials that count: each slot's trial and its retries
    study_file: str | None = None
    recommended_max_train_steps: int | None = None
    # trials a slot got twice where nothing serialised the claims (the gRPC proxy, a journal),
    # yielded by the rule every reader applies (``budget.counted``): not retries, and not counted
    duplicates: int = 0

    @property
    def kind(self) -> str:
        if self.phase == SWEEP_PHASE:
            return "sweep-lr"
        return "round" if round_number(self.phase) is not None else "other"

    @property
    def metric(self) -> str:
        if self.plan is None:
            return "objective"
        return str(self.plan.config.get("objective", {}).get("metric", "objective"))

    @property
    def minimize(self) -> bool:
        return self.direction != "maximize"

    @property
    def round_key(self) -> str:
        """Where the study file sets this round (``rounds.round1`` for ``round-1``)."""
        return "rounds." + self.phase.replace("-", "")

    @property
    def searched(self) -> bool:
        """Its points come from a search of the space (round 1, a TPE round), not a fixed plan."""
        return self.plan is not None and self.plan.sampler != "fixed" and bool(self.plan.space)

    @property
    def eval_every(self) -> int | None:
        if self.plan is None:
            return None
        value = self.plan.config.get("training", {}).get("eval_every")
        return int(value) if isinstance(value, int) else None

    @property
    def trial_steps(self) -> int | None:
        return self.plan.trial_steps if self.plan is not None else None

    def with_state(self, *states: SlotState) -> list[TrialSlot]:
        return [s for s in self.slots if s.state in states]

    @cached_property
    def completed(self) -> list[TrialSlot]:
        """Completed slots with a finite value, best first (ties by slot number)."""
        sign = 1.0 if self.minimize else -1.0
        done = [s for s in self.slots if s.state is SlotState.COMPLETE and s.value is not None]
        return sorted(done, key=lambda s: (sign * (s.value or 0.0), s.slot))

    @property
    def best(self) -> TrialSlot | None:
        ranked = self.completed
        return ranked[0] if ranked else None

    def better(self, a: float, b: float) -> bool:
        return a < b if self.minimize else a > b


def phase_data(stored: StoredPhase) -> PhaseData:
    attrs = stored.user_attrs
    plan = None
    try:
        plan = load_plan(attrs)
    except ValueError:  # a plan this version cannot read: report the trials without it
        plan = None
    settings = None
    if isinstance(attrs.get(SETTINGS_ATTR), dict):
        try:
            settings = PhaseSettings.from_attrs(attrs)
        except TypeError:
            settings = None
    recommended = attrs.get(RECOMMENDED_ATTR)
    live = counted(stored.trials)
    return PhaseData(
        study=stored.study,
        phase=stored.phase,
        direction=stored.direction,
        plan=plan,
        settings=settings,
        slots=group_slots(stored.phase, stored.trials),
        attempts=len(live),
        duplicates=len(stored.trials) - len(live),
        study_file=attrs.get(STUDY_FILE_ATTR),
        recommended_max_train_steps=int(recommended) if isinstance(recommended, int) else None,
    )


@dataclass
class StudyData:
    """Every phase of one study (latest first) and the reader, for learning curves on demand."""

    study: str
    storage: str  # shown (password masked)
    phases: list[PhaseData]
    reader: StorageReader = field(repr=False)

    _others: dict[str, PhaseData | None] = field(default_factory=dict, repr=False)

    def phase(self, name: str) -> PhaseData | None:
        """A phase of the study: one of ``phases``, else read now (``--phase round-2`` still
        needs round 1 to measure the transfer)."""
        found = next((p for p in self.phases if p.phase == name), None)
        if found is None and self.reader is not None:
            if name not in self._others:
                stored = self.reader.read_phase(self.study, name)
                self._others[name] = phase_data(stored) if stored is not None else None
            found = self._others[name]
        return found

    def every_phase(self) -> list[PhaseData]:
        """All of the study's phases, those not asked for read now (the model a study delivers is
        the study's, whichever phases ``--phase`` shows)."""
        names = self.reader.studies().get(self.study, []) if self.reader is not None else []
        found = [p for name in names if (p := self.phase(name)) is not None]
        return found or list(self.phases)

    def curves(self, phase: PhaseData, slots: Iterable[TrialSlot]) -> dict[int, dict[int, float]]:
        """Slot number -> its merged learning curve (intermediate values of every attempt)."""
        chosen = list(slots)
        numbers = [n for s in chosen for n in s.numbers]
        raw = self.reader.intermediate_values(phase.study, phase.phase, numbers)
        return {s.slot: merged_curve(s.attempts, raw) for s in chosen}


def read_study(reader: StorageReader, study: str, phases: list[str] | None = None) -> StudyData:
    """The study's phases (all, or ``phases``), latest first; a one-line error if it has none."""
    known = reader.studies()
    if study not in known:
        names = ", ".join(sorted(known)) or "none"
        raise UsageError(f"storage {reader.shown_url} has no study {study!r} (studies there: {names})")
    available = known[study]
    wanted = available if phases is None else phases
    missing = [p for p in wanted if p not in available]
    if missing:
        raise UsageError(
            f"study {study!r} has no phase {missing[0]!r} in {reader.shown_url}; "
            f"its phases: {', '.join(available)}"
        )
    return study_data(reader, study, wanted)


def study_data(reader: StorageReader, study: str, phases: list[str]) -> StudyData:
    """The study's ``phases`` (names in creation order) read, latest first; no checks (see
    ``read_study``): ``tuner list`` reads every study of a storage this way."""
    read = [phase_data(stored) for name in reversed(phases) if (stored := reader.read_phase(study, name))]
    return StudyData(study, reader.shown_url, read, reader)
