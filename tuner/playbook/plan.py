"""A phase's plan, stored in the phase itself: everything a trial needs, whoever runs it.

A plan is written once, when the phase is created, into the Optuna study's user attributes
(``tuner:plan``). Workers anywhere (``tuner worker`` on another machine) build each trial from
it, never from the study file or from an earlier phase's results: round 2's points come from
round 1's results and sweep-lr's length from its own, and a worker that had to recompute them
could disagree with the one that created the phase (a trial finished in between, a file edited).
The study file a worker is given is only checked against the plan (``config_check.py``).

A trial's configuration = the plan's ``config`` (the study as the phase was created from it)
-> ``overrides`` (every trial: what sweep-lr switches off, round 1's proxy split) -> the slot's
``sets`` (its seed index, an LR that is not searched) -> the slot's point (search-space values)
-> the phase's length and resolved schedule (the slot's own, when it has one: round N extends
each source trial's schedule, searched schedule keys included, so a searched warmup is kept).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from tuner.spec import StudySpec, key_to_path, set_path

PLAN_ATTR = "tuner:plan"
PLAN_VERSION = 1

PlanKind = Literal["round", "sweep-lr"]
SamplerName = Literal["quasi-random", "random", "tpe", "gp", "fixed"]


class _Stored(BaseModel):
    model_config = ConfigDict(extra="forbid")


class SlotPlan(_Stored):
    """One slot of a phase whose points are fixed in advance (sweep-lr, round 2 and later)."""

    values: dict[str, Any]  # the search-space point, as Optuna stores it (param name -> value)
    sets: dict[str, Any] = Field(default_factory=dict)  # other dotted keys for this slot only
    attrs: dict[str, Any] = Field(default_factory=dict)  # recorded on its trials (source trial...)
    # this slot's own explicit-step schedule (round N: its source trial's, searched schedule keys
    # included, extended); None: the plan's ``schedule``. Set last, so it is what the trial trains.
    schedule: list[dict[str, Any]] | None = None


class FitTarget(_Stored):
    """sweep-lr's "the training set is fit": ``metric`` reaches ``threshold`` (direction-aware)."""

    metric: str
    threshold: float
    direction: Literal["maximize", "minimize"]


class StoredPlan(_Stored):
    version: int = PLAN_VERSION
    phase: str
    kind: PlanKind
    config: dict[str, Any]  # the study (``--set`` applied, password masked) the phase was created from
    trial_steps: int
    max_train_steps: int | None = None  # the production length, when the phase used it
    max_train_steps_source: str = ""  # "the study file", "tuner sweep-lr" ...
    schedule: list[dict[str, Any]]  # explicit-step segments, as every trial of the phase runs them
    # True: the study file's own schedule resolved at trial_steps (the trial sets only its length);
    # False: the plan's (sweep-lr's constant LR, round 2's extension), set explicitly in each trial
    schedule_from_file: bool = True
    overrides: dict[str, Any] = Field(default_factory=dict)  # dotted keys set in every trial
    sampler: SamplerName
    space: dict[str, Any]  # the search space the trials' parameters are recorded in
    seed: int
    slots: list[SlotPlan] = Field(default_factory=list)  # fixed points; empty: from the sampler
    fit: FitTarget | None = None
    notes: list[str] = Field(default_factory=list)  # what the plan changed, in plain words
    source_phase: str | None = None  # round N's points came from this phase

    def to_attr(self) -> str:
        return self.model_dump_json()

    @classmethod
    def from_attr(cls, text: str) -> StoredPlan:
        return cls.model_validate_json(text)

    # -- what a trial trains ------------------------------------------------------------------
    def search_space(self) -> dict[str, Any]:
        """The stored space as the spec's parameter models (for distributions and sampling)."""
        return StudySpec.model_validate_json(
            json.dumps({**self.config, "search_space": self.space})
        ).search_space

    def slot(self, slot: int) -> SlotPlan | None:
        return self.slots[slot] if 0 <= slot < len(self.slots) else None

    def trial_config(self, slot: int, values: Mapping[str, Any]) -> dict[str, Any]:
        """The study document a trial of ``slot`` with point ``values`` trains (see module doc)."""
        document = self.config
        for key, value in self.trial_sets(slot, values).items():
            document = set_path(document, key_to_path(key), value)
        return document

    def trial_sets(self, slot: int, values: Mapping[str, Any]) -> dict[str, Any]:
        """Every dotted key a trial sets on top of ``config``, in order (the reproduce command)."""
        planned = self.slot(slot)
        sets: dict[str, Any] = dict(self.overrides)
        if planned is not None:
            sets.update(planned.sets)
        sets.update(values)
        sets["max_train_steps"] = self.trial_steps
        if not self.schedule_from_file:
            own = planned.schedule if planned is not None else None
            sets["schedule"] = own if own is not None else self.schedule
        return sets

    def trial_spec(self, slot: int, values: Mapping[str, Any]) -> StudySpec:
        return StudySpec.model_validate_json(json.dumps(self.trial_config(slot, values)))

    def slot_attrs(self, slot: int) -> dict[str, Any]:
        planned = self.slot(slot)
        return dict(planned.attrs) if planned is not None else {}


def load_plan(attrs: Mapping[str, Any]) -> StoredPlan | None:
    """The plan stored in a phase's user attributes; None for a phase created before plans."""
    text = attrs.get(PLAN_ATTR)
    return StoredPlan.from_attr(text) if text else None


def explicit_schedule(segments: Iterable[Any]) -> list[dict[str, Any]]:
    """Resolved segments (``ResolvedSegment`` or explicit-step ``ScheduleSegment``) as study-file
    segments with ``steps``: the form a trial's config and the reproduce command carry."""
    return [
        {"shape": s.shape, "steps": int(s.steps), "start": float(s.start), "end": float(s.end)}
        for s in segments
    ]


def resolve_schedule(spec: StudySpec, steps: int) -> list[dict[str, Any]]:
    """The study's schedule resolved at ``steps`` (raises ValueError if it does not fit)."""
    from tuner.train.schedules import build_schedule

    return explicit_schedule(build_schedule(spec.training.schedule, steps).segments)
