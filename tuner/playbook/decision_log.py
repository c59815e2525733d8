"""``tuner tune``'s decision log and progress, kept in the study's storage.

Every decision ``tune`` takes (the budget split, a sweep cap lowered, round 1's trials, a report
suggestion applied or not, round 2's seeds, the extra round, the model delivered) is a ``Decision``: a stable
``kind`` for scripts, the sentence printed, and its numbers. Each phase ``tune`` runs is a
``Stage``: the study file and ``--set`` values it runs with, decided once. A re-run reads them
back and continues: a stage decided is never decided again (its ``--set`` values must stay the
same, or the phase would refuse the changed file), a stage done is not run again.

Stored as the user attributes of an Optuna study named ``tune:<study>`` in the storage of the
study ``tune`` was started on (public API: ``set_user_attr``), and copied to the storage of each
next study it searched; the name has no ``/``, so it is no phase of any study for ``report`` or
``list``. ``state_for`` finds the log of a study ``tune`` ran, whether it started there or not.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any

from tuner.playbook.budget import Budget

STATE_PREFIX = "tune:"
BUDGET_ATTR = "tuner:tune_budget"
STAGES_ATTR = "tuner:tune_stages"
DECISIONS_ATTR = "tuner:tune_decisions"
SCHEMA = "tuner.tune/1"


@dataclass(frozen=True)
class Decision:
    """One line of the log: ``kind`` (e.g. ``sweep_cap``, ``round1_trials``, ``suggestion_applied``),
    ``stage`` (the phase it is about, ``study/phase``), ``text`` (the decision with its reasons),
    its ``numbers``, and ``short``: the decision alone, in one short line, which is what the
    terminal shows (the reasons stay in the log: ``--json``, ``tuner report``)."""

    kind: str
    stage: str
    text: str
    numbers: dict[str, Any] = field(default_factory=dict)
    short: str = ""

    @property
    def line(self) -> str:
        """``short``, else ``text`` up to its first ``; `` (its reasons follow there)."""
        return self.short or self.text.split("; ", 1)[0]

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Decision:
        return cls(
            str(data["kind"]),
            str(data["stage"]),
            str(data["text"]),
            dict(data.get("numbers") or {}),
            str(data.get("short") or ""),
        )


@dataclass
class Stage:
    """A phase ``tune`` runs: ``study``'s ``phase`` from ``study_file`` with ``sets`` (``--set``
    values) and ``trials`` (round 1's budget); ``planned_steps`` its share; ``done`` once it ended."""

    study: str
    phase: str
    study_file: str
    sets: list[str] = field(default_factory=list)
    trials: int | None = None
    planned_steps: int = 0
    upper_bound: bool = False  # sweep-lr: trials stop when they fit
    done: bool = False
    steps_per_trial: int | None = None

    @property
    def key(self) -> str:
        return f"{self.study}/{self.phase}"

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Stage:
        return cls(**data)


@dataclass
class TuneState:
    """The budget, the stages decided so far (in order) and the decision log."""

    budget: Budget | None = None
    budget_steps: int | None = None  # the budget in steps (a duration converted once)
    stages: list[Stage] = field(default_factory=list)
    decisions: list[Decision] = field(default_factory=list)
    switches: dict[str, Any] = field(
        default_factory=dict
    )  # the flags of the last run (estimate plans with them)
    spent_s: float = 0.0  # wall seconds the runs of ``tune`` have taken so far (a duration budget)

    def stage(self, study: str, phase: str) -> Stage | None:
        return next((s for s in self.stages if s.study == study and s.phase == phase), None)

    def to_json(self) -> dict[str, Any]:
        return {
            "schema": SCHEMA,
            "budget": self.budget.to_json() if self.budget else None,
            "budget_steps": self.budget_steps,
            "switches": self.switches,
            "spent_s": self.spent_s,
            "stages": [s.to_json() for s in self.stages],
            "decisions": [d.to_json() for d in self.decisions],
        }


def state_study_name(study: str) -> str:
    return f"{STATE_PREFIX}{study}"


def load_state(storage: Any, study: str) -> TuneState | None:
    """The state ``tune`` stored for ``study``; None if it never ran there (or no storage)."""
    import optuna

    from tuner.orchestrate import with_retries

    if storage is None:
        return None
    try:
        holder = with_retries(optuna.load_study, study_name=state_study_name(study), storage=storage)
    except KeyError:
        return None
    return state_from_attrs(with_retries(lambda: holder.user_attrs))


def state_from_attrs(attrs: dict[str, Any] | None) -> TuneState | None:
    """The state held in the user attributes of ``tune:<study>`` (``tuner report`` reads them)."""
    if not attrs or BUDGET_ATTR not in attrs:
        return None
    budget = json.loads(attrs[BUDGET_ATTR])
    return TuneState(
        budget=Budget.from_json(budget["budget"]),
        budget_steps=budget.get("steps"),
        switches=dict(budget.get("switches") or {}),
        spent_s=float(budget.get("spent_s") or 0.0),
        stages=[Stage.from_json(s) for s in json.loads(attrs.get(STAGES_ATTR, "[]"))],
        decisions=[Decision.from_json(d) for d in json.loads(attrs.get(DECISIONS_ATTR, "[]"))],
    )


def save_state(storage: Any, study: str, state: TuneState) -> None:
    """Write the whole state (three attributes; each write is one transaction of the storage)."""
    import optuna

    from tuner.orchestrate import with_retries

    holder = with_retries(
        optuna.create_study, study_name=state_study_name(study), storage=storage, load_if_exists=True
    )
    budget = {
        "budget": state.budget.to_json() if state.budget else None,
        "steps": state.budget_steps,
        "switches": state.switches,
        "spent_s": round(state.spent_s, 3),
    }
    with_retries(holder.set_user_attr, BUDGET_ATTR, json.dumps(budget))
    with_retries(holder.set_user_attr, STAGES_ATTR, json.dumps([s.to_json() for s in state.stages]))
    with_retries(holder.set_user_attr, DECISIONS_ATTR, json.dumps([d.to_json() for d in state.decisions]))


def state_for(study: str, names: list[str], read_attrs: Any) -> TuneState | None:
    """The log of ``tune`` runs that ran ``study``: its own (``tune:<study>``), else one that
    started on another study and searched this one (a next study). ``names``: the Optuna study
    names of the storage; ``read_attrs(name)``: their user attributes."""
    own = state_from_attrs(read_attrs(state_study_name(study)))
    if own is not None:
        return own
    for name in names:
        if name.startswith(STATE_PREFIX) and name != state_study_name(study):
            found = state_from_attrs(read_attrs(name))
            if found is not None and any(s.study == study for s in found.stages):
                return found
    return None
