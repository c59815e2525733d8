"""The model a study delivers: one rule, used by ``tuner list``, ``tuner report`` (terminal, HTML,
JSON) and whatever ends a study with its model.

The rule (``RULE`` below says it in one line):

1. **The candidates** are the completed runs of every round, round 2 or later, that trained at
   full length (its trial length is at least ``max_train_steps``: a round ``tune`` trained
   longer counts; a round whose ``max_train_steps`` is unknown counts, there being no longer
   length to compare with). Round 1 never delivers: it trains at a fraction of
   ``max_train_steps`` and one run per point, to rank points, not to produce the model. sweep-lr
   never does: it trains at one constant LR to measure length.
2. **The chosen point:** those runs grouped by point and length (same hyperparameters and trial
   length, seeds differ; a point trained again on new seeds by a later round at the same length
   pools its runs of both rounds, one trained longer is a point of its own) and ranked by the
   **mean** objective over the point's completed seeds; equal means, the point with more seeds,
   then the earlier point (``tuner.playbook.ranked_points``, the ranking round N uses for its
   sources). A point run once ranks by its one value: a mean is a mean, so a single lucky run
   can win, and its spread (one seed) says how little is known.
3. **The delivered model** is the chosen point's seed run with the best objective, at its best
   step: its checkpoint (``<run_dir>/checkpoints/best-stepN.pt``), its reproduce command, its value
   and step, and every validation metric of that eval (``val/*``: an objective of ``val/mse``
   says nothing of ``val/r2``; read from its run folder's ``metrics.csv``); the point's spread
   over seeds (mean, min, max, seeds) is the test-free uncertainty.

With no full-length round completed yet, the best point of the latest round that has completed
trials is shown as a candidate (``delivered: false``), with why it is not the delivered model and
the round to run; it is never called the study's best.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Literal

from tuner.playbook.phases import round_number
from tuner.playbook.ranked_points import RankedPoint, point_key, ranked, seed_of
from tuner.playbook.verdicts import jsonable
from tuner.report.best_trial import BestTrial, best_trial
from tuner.report.run_folders import Unreadable, metrics_at
from tuner.report.study_data import PhaseData, SlotState, TrialSlot

Split = Literal["validation", "proxy"]

RULE = (
    "of the rounds (2 or later) trained at max_train_steps or longer, the point with the best mean over "
    "seeds (a point's runs at one length pooled across rounds; equal means: more seeds, then the "
    "earlier point), that point's best seed at its best step"
)


def proxy_fraction(phase: PhaseData) -> float:
    """The share of the training split the phase validates on instead of the validation set (0: none)."""
    if phase.plan is None:
        return 0.0
    value = phase.plan.overrides.get("proxy_fraction")
    if value is None:
        value = phase.plan.config.get("training", {}).get("proxy_fraction")
    return float(value) if isinstance(value, int | float) and value > 0 else 0.0


@dataclass(frozen=True)
class SeedSpread:
    """The chosen point's objective over its completed seeds: the test-free uncertainty."""

    mean: float
    low: float
    high: float
    seeds: int
    trials: list[int]  # the seed runs' trial numbers in the delivered run's phase, lowest seed first
    runs: list[tuple[str, int]] = field(default_factory=list)  # every seed run: (phase, trial)

    def describe(self) -> str:
        """``mean 0.12 over 3 seeds (0.11-0.13)``, or ``1 seed: no spread measured``."""
        from tuner.report.findings import fmt

        if self.seeds == 1:
            return "1 seed: no spread measured"
        return f"mean {fmt(self.mean)} over {self.seeds} seeds ({fmt(self.low)}-{fmt(self.high)})"

    def to_json(self) -> dict[str, Any]:
        return {
            "mean": self.mean,
            "min": self.low,
            "max": self.high,
            "seeds": self.seeds,
            "trials": self.trials,
            "runs": [{"phase": phase, "trial": trial} for phase, trial in self.runs],
        }


PER_CLASS = re.compile(r"val/class_\d+_")  # a classifier's per-class figures: in the JSON only


@dataclass(frozen=True)
class ValMetrics:
    """Every validation metric (``val/*``) of the delivered run's best eval, as its run folder's
    ``metrics.csv`` logged them at its best step; ``unreadable`` says why none could be read (a
    run folder of another machine, a damaged file)."""

    values: dict[str, float] = field(default_factory=dict)
    unreadable: Unreadable | None = None

    def shown(self, objective: str) -> list[tuple[str, float]]:
        """The ones a terminal line and the HTML page show: all but the objective (said beside
        them) and a classifier's per-class figures (``val/class_3_recall``...: ``--json``)."""
        return [(k, v) for k, v in self.values.items() if k != objective and not PER_CLASS.match(k)]

    @property
    def per_class(self) -> bool:
        """A classifier's per-class figures are among them (left out of ``shown``)."""
        return any(PER_CLASS.match(key) for key in self.values)

    def to_json(self) -> dict[str, Any]:
        return {
            "values": jsonable(self.values),  # a NaN (r2 of a constant target) is null
            "unreadable": self.unreadable.to_json() if self.unreadable is not None else None,
        }


def val_metrics(run: BestTrial) -> ValMetrics | None:
    """The ``val/*`` metrics of ``run`` at its best step; None for a run that recorded no run
    folder or best step (nothing to look for)."""
    if run.run_dir is None or run.best_step is None:
        return None
    found = metrics_at(run.run_dir, run.best_step)
    if isinstance(found, Unreadable):
        return ValMetrics(unreadable=found)
    return ValMetrics({key: value for key, value in found.items() if key.startswith("val/")})


@dataclass(frozen=True)
class DeliveredModel:
    """The study's model by the module's rule (``delivered``), or, before a full-length round has
    completed, the candidate that is not one yet (``why_not`` and ``next_step`` say so)."""

    delivered: bool
    run: BestTrial  # the chosen point's best seed run: phase, trial, value, step, checkpoint, reproduce
    spread: SeedSpread
    split: Split  # what the value was scored on: a proxy split only for a round-1 candidate
    why_not: str | None  # "round 1 trains at a fraction of max_train_steps, 8 of 40 steps"
    next_step: str | None  # "run round 2 (tuner run-round STUDY --round 2)"
    unfinished: int  # the phase's trials still running or waiting: the choice may change
    #: a point run once (a study file's round 3 with ``seeds: 1``, say): the same point's spread
    #: over seeds at another length, and that length, when a round measured it there
    at_another_length: tuple[int, SeedSpread] | None = None
    #: every ``val/*`` of its best eval (None: the run recorded no run folder or best step)
    val_metrics: ValMetrics | None = None

    @property
    def spread_text(self) -> str:
        """The spread in words; for one seed, the same point's spread at another length if a
        round measured it, else the round setting that would measure it."""
        text = self.spread.describe()
        if self.spread.seeds == 1 and self.at_another_length is not None:
            steps, spread = self.at_another_length
            return f"{text} at its length; the same point at {steps} steps: {spread.describe()}"
        if self.spread.seeds == 1:
            text += f" (rounds.{self.run.phase.replace('-', '')}.seeds: 2 or more measures it)"
        return text

    @property
    def val_metrics_text(self) -> str | None:
        """``val/loss = 0.0583, val/mae = 0.1873, val/r2 = 0.9421``: its other validation metrics
        at its best step (``ValMetrics.shown``), or why they could not be read; None when there
        is nothing to say."""
        from tuner.output import shown_path
        from tuner.report.findings import fmt

        metrics = self.val_metrics
        if metrics is None:
            return None
        if metrics.unreadable is not None:
            return f"not read: {shown_path(metrics.unreadable.path)}: {metrics.unreadable.problem}"
        shown = metrics.shown(self.run.metric)
        text = ", ".join(f"{key} = {fmt(value)}" for key, value in shown)
        if metrics.per_class:
            text += (", " if text else "") + "per class in --json"
        return text or None

    @property
    def status(self) -> str:
        """The headline: ``delivered model`` or ``not a delivered model yet (...): run round 2``."""
        if self.delivered:
            return "delivered model"
        return f"not a delivered model yet ({self.why_not}): {self.next_step}"

    def to_json(self) -> dict[str, Any]:
        return {
            "delivered": self.delivered,
            "status": self.status,
            "rule": RULE,
            "why_not": self.why_not,
            "next_step": self.next_step,
            "split": self.split,
            "unfinished": self.unfinished,
            **self.run.to_json(),
            "seeds": self.spread.to_json(),
            "seeds_at_another_length": None
            if self.at_another_length is None
            else {"steps": self.at_another_length[0], **self.at_another_length[1].to_json()},
            "val_metrics": self.val_metrics.to_json() if self.val_metrics is not None else None,
        }


def delivered_model(phases: list[PhaseData]) -> DeliveredModel | None:
    """The model of a study whose ``phases`` are all of its phases (any order), by the module's
    rule; None when no round has a completed trial."""
    rounds = sorted(
        (p for p in phases if p.kind == "round" and p.completed),
        key=lambda p: round_number(p.phase) or 0,
        reverse=True,
    )
    if not rounds:
        return None
    full = [p for p in rounds if (round_number(p.phase) or 0) >= 2 and _full_length(p)]
    candidates = full or rounds[:1]
    points, home = _points(candidates)
    chosen = points[0]
    best = chosen.best_run(candidates[0].direction)
    phase, slot = home[id(best)]
    number = round_number(phase.phase) or 1
    run = best_trial(phase, slot)
    assert run is not None
    spread = _spread(chosen, home, phase)
    unfinished = sum(len(p.with_state(SlotState.RUNNING, SlotState.WAITING)) for p in candidates)
    return DeliveredModel(
        delivered=bool(full),
        run=run,
        spread=spread,
        split="proxy" if proxy_fraction(phase) > 0 else "validation",
        why_not=None if full else _why_not(phase, number),
        next_step=None if full else _next_step(phase, number + 1),
        unfinished=unfinished,
        at_another_length=_at_another_length(chosen, points, home) if spread.seeds == 1 else None,
        val_metrics=val_metrics(run),
    )


def _spread(point: RankedPoint, home: dict[int, tuple[PhaseData, TrialSlot]], phase: PhaseData) -> SeedSpread:
    """``point``'s objective over its seed runs (``trials``: those in ``phase``)."""
    return SeedSpread(
        mean=point.value,
        low=min(point.values),
        high=max(point.values),
        seeds=len(point.runs),
        trials=[home[id(t)][1].slot for t in point.runs if home[id(t)][0] is phase],
        runs=[(home[id(t)][0].phase, home[id(t)][1].slot) for t in point.runs],
    )


def _at_another_length(
    chosen: RankedPoint, points: list[RankedPoint], home: dict[int, tuple[PhaseData, TrialSlot]]
) -> tuple[int, SeedSpread] | None:
    """The chosen point (run once) as another round trained it at another length on 2 or more
    seeds: that length and its spread (the most seeds first), or None."""
    first = chosen.runs[0]
    key = point_key(home[id(first)][0].plan, first)
    measured = [
        p for p in points if len(p.runs) >= 2 and point_key(home[id(p.runs[0])][0].plan, p.runs[0]) == key
    ]
    if not measured:
        return None
    other = max(measured, key=lambda p: len(p.runs))
    phase = home[id(other.runs[0])][0]
    if phase.plan is None:
        return None
    return phase.plan.trial_steps, _spread(other, home, phase)


def _points(phases: list[PhaseData]) -> tuple[list[RankedPoint], dict[int, tuple[PhaseData, TrialSlot]]]:
    """The points of ``phases`` ranked by the rule, best first (a point's runs pooled across
    them per length), and each run's phase and slot (by ``id`` of the stored trial)."""
    groups: dict[tuple[int | None, str], list[Any]] = {}
    home: dict[int, tuple[PhaseData, TrialSlot]] = {}
    for phase in phases:
        length = phase.plan.trial_steps if phase.plan is not None else None
        for slot in phase.completed:
            run = slot.final
            home[id(run)] = (phase, slot)
            groups.setdefault((length, point_key(phase.plan, run)), []).append(run)
    points = [RankedPoint(sorted(runs, key=seed_of)) for runs in groups.values()]
    return ranked(points, phases[0].direction), home


def _full_length(phase: PhaseData) -> bool:
    plan = phase.plan
    return plan is None or plan.max_train_steps is None or plan.trial_steps >= plan.max_train_steps


def _why_not(phase: PhaseData, number: int) -> str:
    plan = phase.plan
    if plan is not None and plan.max_train_steps is not None and plan.trial_steps < plan.max_train_steps:
        return (
            f"round {number} trains at a fraction of max_train_steps, "
            f"{plan.trial_steps} of {plan.max_train_steps} steps"
        )
    return "round 1 ranks points, one run each; round 2 trains the best of them again at full length"


def _next_step(phase: PhaseData, number: int) -> str:
    from tuner.output import shown_path

    study = shown_path(phase.study_file) if phase.study_file else "STUDY"
    return f"run round {number} (tuner run-round {study} --round {number})"
