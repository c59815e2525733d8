"""A shorter length to suggest when best steps come early: the one rule both "too high" verdicts
(best step in the first 10%, ``best_step.py``; validation worse after an early best,
``after_best.py``) use, so their numbers agree."""

from __future__ import annotations

import math
from dataclasses import dataclass

from tuner.playbook.phases import round_number
from tuner.report.findings import Suggestion
from tuner.report.study_data import PhaseData

EARLY_GROWTH = 2.0  # suggested length: 2 x the latest early best step among the top trials


def round_up(steps: float, multiple: int) -> int:
    return max(multiple, math.ceil(steps / multiple - 1e-9) * multiple)


def production_of(phase: PhaseData) -> int | None:
    return phase.plan.max_train_steps if phase.plan is not None else None


@dataclass(frozen=True)
class Cut:
    """The suggested trial length, the production length scaled with it, and the advice."""

    trial_steps: int
    max_train_steps: int | None
    advice: str


def shorten(
    phase: PhaseData, suggestions: list[Suggestion], latest: int, top: int, reason: str, trial_steps: int
) -> Cut:
    """Train ``EARLY_GROWTH`` x ``latest`` (the latest best step that argues for it) instead, rounded
    up to ``eval_every`` and never below the schedule's own segments; adds to ``suggestions``."""
    production = production_of(phase)
    eval_every = phase.eval_every or 1
    floor = _schedule_floor(phase)  # the schedule's segments in steps must still fit
    suggested = round_up(max(EARLY_GROWTH * latest, floor), eval_every)
    scaled = _scale(production, suggested, trial_steps, eval_every)
    if scaled is not None:
        scaled = max(scaled, round_up(floor, eval_every))
    advice = f"train {suggested} steps instead of {trial_steps} ({EARLY_GROWTH:g} x the latest early best "
    advice += f"step among the top {top}, {latest}, rounded up to eval_every"
    advice += (
        f"; at least the {floor} steps the schedule needs)" if suggested > EARLY_GROWTH * latest else ")"
    )
    if scaled is not None and production is not None and production != trial_steps:
        advice += f": max_train_steps {production} -> {scaled} (the same ratio)"
    if suggested >= trial_steps:  # the schedule's own segments keep the run this long
        advice = (
            f"shorten the schedule's segments given in steps ({floor} steps in all), then "
            "max_train_steps with them"
        )
        scaled = None
    if scaled is not None:
        suggestions.append(Suggestion(("training", "max_train_steps"), production, scaled, reason))
    round_steps = _round_steps_key(phase)
    if round_steps is not None and suggested < trial_steps:
        suggestions.append(Suggestion(round_steps, trial_steps, suggested, reason))
    return Cut(suggested, scaled, advice)


def _round_steps_key(phase: PhaseData) -> tuple[str, ...] | None:
    """``("rounds", "round1", "steps")`` when the phase's length is set in steps (not a fraction)."""
    number = round_number(phase.phase)
    if number is None or phase.plan is None:
        return None
    key = f"round{number}"
    spec = phase.plan.config.get("rounds", {}).get(key) or {}
    return ("rounds", key, "steps") if spec.get("steps") is not None else None


def _schedule_floor(phase: PhaseData) -> int:
    """The fewest steps the study's schedule fits in: its segments given in steps, plus one step
    for each segment that takes a fraction or the rest (a shorter run would be refused)."""
    if phase.plan is None:
        return 1
    segments = phase.plan.config.get("training", {}).get("schedule") or []
    return max(1, sum(int(s.get("steps") or 1) for s in segments if isinstance(s, dict)))


def _scale(production: int | None, suggested: int, trial_steps: int, eval_every: int) -> int | None:
    """The production length with the same cut as the phase's trials (round 1 runs a fraction)."""
    if production is None or not trial_steps:
        return None
    if production == trial_steps:
        return suggested
    return round_up(production * suggested / trial_steps, eval_every)
