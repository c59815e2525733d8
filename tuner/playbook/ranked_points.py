"""The previous round's best *points*, for round N to train again.

A round with ``seeds: N`` runs each point N times; its runs are not N points. Ranking runs let
``top_k`` be filled by one point's seeds (dropping the second-best point) and let one lucky seed
outrank a point that is good on every seed. So the completed runs are grouped by the point they
trained (their searched values and their slot's other keys, the seed index aside) and each point
is ranked by the **mean** of its seeds' values: the mean, not the median, because with the usual
2-3 seeds a median is the mean or one run, and because a point whose other seed did badly is
a riskier one to carry to a longer run (the playbook's concern is what holds at full length).
The seeds' values travel with the point, so the spread is shown beside the mean. Equal means:
the point with more seeds first (the same mean on more evidence), then the earlier point.

``points_of`` and ``ranked`` are the one ranking of points: round N's sources (``top_points``) and
the model a study delivers (``tuner.report.delivered``) both use them.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from tuner.errors import UsageError
from tuner.playbook.plan import StoredPlan


def slot_of(trial: Any) -> int:
    return int(trial.user_attrs.get("slot", trial.number))


def seed_of(trial: Any) -> int:
    return int(trial.user_attrs.get("seed_index", 0) or 0)


@dataclass(frozen=True)
class RankedPoint:
    """One point of the previous round: its completed seed runs, lowest seed index first."""

    runs: list[Any]

    @property
    def trial(self) -> Any:
        """The run that stands for the point (its params, slot and best step): its first seed."""
        return self.runs[0]

    @property
    def values(self) -> list[float]:
        return [float(t.value) for t in self.runs]

    @property
    def value(self) -> float:
        """The point's objective: the mean over its completed seeds."""
        return sum(self.values) / len(self.values)

    def best_run(self, direction: str) -> Any:
        """The seed run with the best objective (equal values: the lower seed index)."""
        sign = 1.0 if direction == "minimize" else -1.0
        return min(self.runs, key=lambda t: sign * float(t.value))

    def describe(self) -> str:
        """``trial 2 (0.045)``, or with several seeds ``trial 2 (0.045, 0.04-0.05 over 2 seeds)``."""
        if len(self.runs) == 1:
            return f"trial {slot_of(self.trial)} ({self.value:.6g})"
        low, high = min(self.values), max(self.values)
        return (
            f"trial {slot_of(self.trial)} ({self.value:.6g}, {low:.6g}-{high:.6g} "
            f"over {len(self.runs)} seeds)"
        )


def point_key(plan: StoredPlan | None, trial: Any) -> str:
    """What makes a run's point: its searched values and its slot's other keys, the seed aside."""
    planned = plan.slot(slot_of(trial)) if plan is not None else None
    sets = {k: v for k, v in (planned.sets if planned else {}).items() if k != "seed_index"}
    return _KEY_ENCODER.encode({"params": trial.params, "sets": sets})


# ``json.dumps`` with options builds an encoder per call: a report keys each of 10,000 runs
_KEY_ENCODER = json.JSONEncoder(sort_keys=True, default=str)


def top_points(
    trials: list[Any], plan: StoredPlan, direction: str, top_k: int, number: int, source: str
) -> tuple[list[RankedPoint], str]:
    """The ``top_k`` best points of COMPLETE runs (ranked by their mean over seeds; ties by
    slot), and a note when the source round is unfinished."""

    from tuner.orchestrate.budget import final_failure, superseded
    from tuner.orchestrate.duplicates import counted

    live = counted(trials)
    completed = rankable_runs(trials)  # leaves duplicates out itself
    points = points_of(completed, plan)
    noun = "trials" if len(points) == len(completed) else "points"
    unfinished = sum(1 for t in live if not t.state.is_finished())
    if len(points) < top_k:
        diverged = sum(1 for t in live if t.user_attrs.get("failure_reason") == "diverged")
        replaced = superseded(live)
        failed = sum(1 for t in live if final_failure(t, replaced)) - diverged
        of_runs = f", from {len(completed)} runs" if noun == "points" else ""
        raise UsageError(
            f"round {number} trains {source}'s {top_k} best completed {noun}, but {source} has only "
            f"{len(points)} completed{of_runs} ({failed} failed, {diverged} diverged, {unfinished} running "
            f"or waiting); finish {source} (tuner run-round STUDY --round {number - 1}) or lower "
            f"rounds.round{number}.top_k"
        )
    best_first = ranked(points, direction)
    note = (
        f"{source} is unfinished ({unfinished} trials running or waiting): its best "
        f"{top_k} of {len(points)} completed {noun} so far are used"
        if unfinished
        else ""
    )
    return best_first[:top_k], note


def rankable_runs(trials: Iterable[Any]) -> list[Any]:
    """The runs a point is ranked on: COMPLETE with a finite value; a slot's duplicate run (a
    takeover that lost its race, ``duplicates.py``) is one run, so it is left out."""
    from optuna.trial import TrialState

    from tuner.orchestrate.duplicates import counted

    return [
        t
        for t in counted(list(trials))
        if t.state == TrialState.COMPLETE and t.value is not None and math.isfinite(t.value)
    ]


def points_of(completed: Iterable[Any], plan: StoredPlan | None) -> list[RankedPoint]:
    """COMPLETE runs with a finite value, grouped by the point they trained (their params and their
    slot's keys, the seed index aside); each point's runs lowest seed first. ``plan`` None (a phase
    stored before plans): by params alone."""
    groups: dict[str, list[Any]] = {}
    for trial in sorted(completed, key=lambda t: (seed_of(t), slot_of(t))):
        groups.setdefault(point_key(plan, trial), []).append(trial)
    return [RankedPoint(runs) for runs in groups.values()]


def ranked(points: Iterable[RankedPoint], direction: str) -> list[RankedPoint]:
    """Best mean first; equal means: more seeds first, then the earlier point (lowest slot)."""
    sign = 1.0 if direction == "minimize" else -1.0
    return sorted(points, key=lambda p: (sign * p.value, -len(p.runs), min(slot_of(t) for t in p.runs)))
