"""Best-step position: where in training each trial's best checkpoint was.

The playbook's rule (section "Deciding how long to train"): best checkpoints consistently in the
first 10% of training mean ``max_train_steps`` is too high (the rest of each run is wasted);
consistently in the last 25% mean the runs were still improving: train longer and retune the
decay. "Consistently" is ``CONSISTENT``: at least 3 of the 5 best trials and at least half of all
completed trials.

A trial's best step is only known to the resolution of ``eval_every``: when the first eval
comes after 10% of training, "the first 10%" cannot be seen, and the report says so. Fewer than
``MIN_EVALS`` (4) evals in a run give no position verdict at all, and "still improving" needs at
least ``MIN_LATE_EVALS`` (2) evals in the last 25%: with evals only at steps 100 and 120 of 120,
every best step lands there by construction. Then the verdict is "cannot tell", with the largest
readable ``eval_every`` that gives those evals in the study's shortest round (round 1).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from tuner.playbook.phases import round_number
from tuner.report.after_best import HALF, RISE, AfterBest, after_best
from tuner.report.eval_grid import (
    LATE,
    MIN_EVALS,
    MIN_LATE_EVALS,
    eval_counts,
    readable_at_most,
    suggested_eval_every,
)
from tuner.report.findings import Finding, Level, Suggestion, pct
from tuner.report.learning import NOT_JUDGED
from tuner.report.noise import eval_examples
from tuner.report.study_data import PhaseData, TrialSlot

EARLY = 0.10  # best step <= 10% of max_train_steps
TOP = 5
TOP_NEEDED = 3
MIN_TRIALS = 3
EARLY_GROWTH = 2.0  # suggested length: 2 x the latest early best step among the top trials
LATE_GROWTH = 1.5  # suggested length: 1.5 x max_train_steps
CONSISTENT = f"at least {TOP_NEEDED} of the {TOP} best trials and at least half of all completed trials"
HISTOGRAM_BINS = 10
RESOLUTION_RULE = (
    f"a position verdict needs at least {MIN_EVALS} evals in a run, and 'late' at least "
    f"{MIN_LATE_EVALS} in its last {1 - LATE:.0%}"
)


@dataclass(frozen=True)
class BestStepEarly(Finding):
    kind: ClassVar[str] = "best_step_early"
    early_top: int
    top: int
    early_all: int
    completed: int
    suggested_trial_steps: int
    suggested_max_train_steps: int | None


@dataclass(frozen=True)
class BestStepWorsens(Finding):
    """Validation gets clearly worse after an early best step (``after_best``), in the top trials."""

    kind: ClassVar[str] = "best_step_worsens"
    worsening_top: int
    top: int
    first_position: float
    last_position: float
    median_rise: float
    suggested_trial_steps: int
    suggested_max_train_steps: int | None


@dataclass(frozen=True)
class BestStepLate(Finding):
    kind: ClassVar[str] = "best_step_late"
    late_top: int
    top: int
    late_all: int
    completed: int
    short_round: bool  # the phase trains shorter trials than production on purpose (round 1)
    suggested_max_train_steps: int | None


@dataclass(frozen=True)
class BestStepFine(Finding):
    kind: ClassVar[str] = "best_step_ok"
    median_position: float
    early_all: int
    late_all: int
    completed: int


@dataclass(frozen=True)
class BestStepUnknown(Finding):
    kind: ClassVar[str] = "best_step_too_few"
    completed: int
    needed: int


@dataclass(frozen=True)
class BestStepCoarse(Finding):
    """The first eval is after 10% of training: a best step in the first 10% cannot be observed."""

    kind: ClassVar[str] = "best_step_coarse"
    eval_every: int
    trial_steps: int
    first_eval_position: float


@dataclass(frozen=True)
class BestStepUnresolved(Finding):
    """Too few evals for the position to mean anything: where the best step lands is set by the
    eval grid, not by the training."""

    kind: ClassVar[str] = "best_step_unresolved"
    eval_every: int
    trial_steps: int
    evals: int  # in a run
    late_evals: int  # in its last 25%
    suggested_eval_every: int | None


@dataclass
class BestStepResult:
    positions: list[tuple[int, float]]  # (slot, best_step / max_train_steps), best trial first
    histogram: list[int]  # HISTOGRAM_BINS counts over [0, 1]
    findings: list[Finding] = field(default_factory=list)
    suggestions: list[Suggestion] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        values = [p for _, p in self.positions]
        return {
            "rule": f"early: best step <= {EARLY:.0%} of max_train_steps; late: > {LATE:.0%}; "
            f"consistently: {CONSISTENT}",
            "positions": [{"trial": slot, "position": position} for slot, position in self.positions],
            "median": statistics.median(values) if values else None,
            "histogram": self.histogram,
            "verdicts": [f.to_json() for f in self.findings],
        }


def _round_up(steps: float, multiple: int) -> int:
    return max(multiple, math.ceil(steps / multiple - 1e-9) * multiple)


def _production(phase: PhaseData) -> int | None:
    return phase.plan.max_train_steps if phase.plan is not None else None


def diagnose_best_step(
    phase: PhaseData,
    judge: bool = True,
    shortest: int | None = None,
    curves: Mapping[int, Mapping[int, float]] | None = None,
) -> BestStepResult:
    """Best-step positions of the phase's completed trials, and the playbook's verdict on them
    (none when not ``judge``: the trials learned nothing, ``learning``). ``shortest``: the
    shortest trial length of the study's rounds, which a suggested ``eval_every`` must serve too.
    ``curves``: slot -> its learning curve, for the top ``TOP`` trials at least (``after_best``)."""
    ranked = [s for s in phase.completed if s.position is not None]
    positions = [(s.slot, float(s.position)) for s in ranked if s.position is not None]
    histogram = [0] * HISTOGRAM_BINS
    for _, position in positions:
        histogram[min(HISTOGRAM_BINS - 1, int(position * HISTOGRAM_BINS))] += 1
    result = BestStepResult(positions, histogram)
    if not judge:
        result.findings.append(NOT_JUDGED)
        return result
    if not phase.completed:  # nothing trained to its end: advice on the eval grid would be a guess
        text = "no completed trial to judge"
        result.findings.append(BestStepUnknown(completed=0, needed=MIN_TRIALS, level=Level.INFO, text=text))
        return result
    eval_every, trial_steps = phase.eval_every, phase.trial_steps
    evals, _ = eval_counts(eval_every or 0, trial_steps or 0)
    if len(ranked) >= MIN_TRIALS and eval_every and trial_steps and evals < MIN_EVALS:
        _unresolved(phase, result, "where in training the best checkpoints fall", shortest)
        return result
    if eval_every and trial_steps and eval_every / trial_steps > EARLY:
        finer = readable_at_most(EARLY * trial_steps)  # the first eval within the first 10%
        result.findings.append(
            BestStepCoarse(
                eval_every=eval_every,
                trial_steps=trial_steps,
                first_eval_position=eval_every / trial_steps,
                level=Level.INFO,
                text=f"the first eval is at step {eval_every} of {trial_steps} "
                f"({pct(eval_every / trial_steps)} of training), so a best step in the first 10% "
                "cannot be seen",
                advice=f"lower training.eval_every (e.g. to {finer}) for a finer answer",
            )
        )
    if len(ranked) < MIN_TRIALS:
        result.findings.append(
            BestStepUnknown(
                completed=len(ranked),
                needed=MIN_TRIALS,
                level=Level.INFO,
                text=f"{len(ranked)} completed trials with a recorded best step: too few to judge where "
                f"best steps fall (needs {MIN_TRIALS})",
            )
        )
        return result
    _verdict(phase, ranked, result, shortest, curves or {})
    return result


def _verdict(
    phase: PhaseData,
    ranked: list[TrialSlot],
    result: BestStepResult,
    shortest: int | None,
    curves: Mapping[int, Mapping[int, float]],
) -> None:
    values = [float(s.position) for s in ranked if s.position is not None]
    top = values[:TOP]
    needed_top = min(TOP_NEEDED, len(top))
    early_top, early_all = sum(p <= EARLY for p in top), sum(p <= EARLY for p in values)
    late_top, late_all = sum(p > LATE for p in top), sum(p > LATE for p in values)
    half = len(values) / 2
    trial_steps = phase.trial_steps or ranked[0].max_train_steps or 0
    production = _production(phase)
    eval_every = phase.eval_every or 1
    numbers = f"{early_top} of the top {len(top)}, {early_all} of {len(values)} completed"
    if early_top >= needed_top and early_all >= half:
        # the latest of the early best steps: a top trial that peaked late is not what the cut is for
        latest = max(s.best_step or 0 for s in ranked[:TOP] if (s.position or 0.0) <= EARLY)
        reason = f"best steps in the first 10% of training in {numbers} trials ({phase.phase})"
        cut = _shorten(phase, result, latest, len(top), reason, trial_steps)
        result.findings.append(
            BestStepEarly(
                early_top=early_top,
                top=len(top),
                early_all=early_all,
                completed=len(values),
                suggested_trial_steps=cut.trial_steps,
                suggested_max_train_steps=cut.max_train_steps,
                level=Level.WARNING,
                rule=f"best step <= {EARLY:.0%} of max_train_steps in {CONSISTENT}",
                text=f"max_train_steps is too high: best checkpoints come in the first 10% of training "
                f"({numbers}); the rest of each run is wasted",
                advice=cut.advice,
            )
        )
        return
    worsening = _worsening(phase, ranked[:TOP], curves)
    if len(worsening) >= needed_top:
        _worsens(phase, result, worsening, len(top), trial_steps)
        return
    if (
        late_top >= needed_top
        and late_all >= half
        and eval_counts(eval_every, trial_steps)[1] < MIN_LATE_EVALS
    ):
        _unresolved(phase, result, "whether the runs were still improving", shortest)
        return
    if late_top >= needed_top and late_all >= half:
        numbers = f"{late_top} of the top {len(top)}, {late_all} of {len(values)} completed"
        short = production is not None and trial_steps < production
        suggested: int | None = None
        if short:  # short trials by design (round 1): not a verdict on the production length
            level = Level.INFO
            text = (
                f"{phase.phase}'s trials were still improving when they ended ({numbers} have their best "
                f"step in the last 25%): expected of short trials ({trial_steps} of {production} steps), "
                "but their ranking may not hold at full length"
            )
            advice = (
                "check the transfer to the next round (in its section, once it has run); if it is poor, "
                f"lengthen this round ({phase.round_key}.length_fraction)"
            )
        else:
            suggested = _round_up(LATE_GROWTH * trial_steps, eval_every)
            level = Level.WARNING
            text = (
                f"training may be too short: best checkpoints come in the last 25% of training ({numbers}); "
                "the runs were still improving"
            )
            advice = (
                f"train longer (max_train_steps {trial_steps} -> {suggested}, {LATE_GROWTH:g}x) and retune "
                "the decay; a schedule that decays to 0 at the end pulls the best step there too, so compare "
                "a longer run before committing to it"
            )
        result.findings.append(
            BestStepLate(
                late_top=late_top,
                top=len(top),
                late_all=late_all,
                completed=len(values),
                short_round=short,
                suggested_max_train_steps=suggested,
                level=level,
                rule=f"best step > {LATE:.0%} of max_train_steps in {CONSISTENT}",
                text=text,
                advice=advice,
            )
        )
        if suggested is None:
            return
        reason = f"best steps in the last 25% of training in {numbers} trials ({phase.phase})"
        result.suggestions.append(Suggestion(("training", "max_train_steps"), trial_steps, suggested, reason))
        return
    median = statistics.median(values)
    result.findings.append(
        BestStepFine(
            median_position=median,
            early_all=early_all,
            late_all=late_all,
            completed=len(values),
            level=Level.OK,
            rule=f"neither early (<= {EARLY:.0%}) nor late (> {LATE:.0%}) in {CONSISTENT}",
            text=f"max_train_steps looks right: best steps spread over training (median at "
            f"{pct(median)}; {early_all} in the first 10%, {late_all} in the last 25%, of "
            f"{len(values)} completed)",
        )
    )


@dataclass(frozen=True)
class _Cut:
    trial_steps: int
    max_train_steps: int | None
    advice: str


def _shorten(
    phase: PhaseData, result: BestStepResult, latest: int, top: int, reason: str, trial_steps: int
) -> _Cut:
    """Train ``EARLY_GROWTH`` x ``latest`` (the latest best step that argues for it) instead, rounded
    up to ``eval_every`` and never below the schedule's own segments; adds the suggestions."""
    production = _production(phase)
    eval_every = phase.eval_every or 1
    floor = _schedule_floor(phase)  # the schedule's segments in steps must still fit
    suggested = _round_up(max(EARLY_GROWTH * latest, floor), eval_every)
    scaled = _scale(production, suggested, trial_steps, eval_every)
    if scaled is not None:
        scaled = max(scaled, _round_up(floor, eval_every))
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
        result.suggestions.append(Suggestion(("training", "max_train_steps"), production, scaled, reason))
    round_steps = _round_steps_key(phase)
    if round_steps is not None and suggested < trial_steps:
        result.suggestions.append(Suggestion(round_steps, trial_steps, suggested, reason))
    return _Cut(suggested, scaled, advice)


def _worsening(
    phase: PhaseData, top: list[TrialSlot], curves: Mapping[int, Mapping[int, float]]
) -> list[AfterBest]:
    """The top trials whose validation gets clearly worse after an early best step."""
    examples = eval_examples(phase) if any(s.slot in curves for s in top) else None
    found = []
    for slot in top:
        if slot.best_step is None or slot.max_train_steps is None or slot.slot not in curves:
            continue
        curve = dict(curves[slot.slot])
        if slot.value is not None:
            curve.setdefault(slot.best_step, slot.value)
        measured = after_best(
            slot.slot, slot.best_step, slot.max_train_steps, curve, phase.direction, examples
        )
        if measured is not None and measured.worsens:
            found.append(measured)
    return found


def _worsens(
    phase: PhaseData, result: BestStepResult, worsening: list[AfterBest], top: int, trial_steps: int
) -> None:
    positions = [w.position for w in worsening]
    rise = statistics.median(w.rise for w in worsening)
    shown_rise = "from a perfect best" if rise == math.inf else f"{rise:.0%} worse"
    reason = (
        f"validation {shown_rise} at the last eval than at an early best step in {len(worsening)} of the "
        f"top {top} trials ({phase.phase})"
    )
    cut = _shorten(phase, result, max(w.best_step for w in worsening), top, reason, trial_steps)
    curves = ", ".join(f"{w.best:.4g} at step {w.best_step} -> {w.last:.4g}" for w in worsening[:3])
    result.findings.append(
        BestStepWorsens(
            worsening_top=len(worsening),
            top=top,
            first_position=min(positions),
            last_position=max(positions),
            median_rise=rise,
            suggested_trial_steps=cut.trial_steps,
            suggested_max_train_steps=cut.max_train_steps,
            level=Level.WARNING,
            rule=f"best step <= {HALF:.0%} of max_train_steps and the last eval >= {RISE:.0%} worse (as "
            f"an error) and outside the best's noise, in at least {min(TOP_NEEDED, top)} of the {TOP} best "
            "trials",
            text=f"max_train_steps is too high: validation gets worse after an early best step in "
            f"{len(worsening)} of the top {top} trials (best at {pct(min(positions))}"
            + (f" to {pct(max(positions))}" if max(positions) > min(positions) else "")
            + f" of training; {curves}); the rest of each run is wasted, and may be memorising the "
            "training set (e.g. noisy labels)",
            advice=cut.advice,
        )
    )


def _unresolved(phase: PhaseData, result: BestStepResult, what: str, shortest: int | None) -> None:
    eval_every, trial_steps = phase.eval_every or 0, phase.trial_steps or 0
    evals, late_evals = eval_counts(eval_every, trial_steps)
    shortest = min(shortest or trial_steps, trial_steps)
    suggested = suggested_eval_every(shortest)
    better = suggested if suggested is not None and suggested < eval_every else None
    advice = "train longer runs, so that evals can fall in more places"
    if better is not None:
        short_evals, short_late = eval_counts(better, shortest)
        which = " (the shortest round)" if shortest < trial_steps else ""
        advice = (
            f"lower training.eval_every {eval_every} -> {better} ({short_evals} evals a run of {shortest} "
            f"steps{which}, {short_late} in its last 25%"
        )
        production = _production(phase)
        if production is not None and production > shortest:
            advice += f"; {eval_counts(better, production)[0]} at the full {production} steps"
        advice += "), then judge the length again"
    # the coarse note's advice is this one's: one verdict says it
    result.findings[:] = [f for f in result.findings if not isinstance(f, BestStepCoarse)]
    result.findings.append(
        BestStepUnresolved(
            eval_every=eval_every,
            trial_steps=trial_steps,
            evals=evals,
            late_evals=late_evals,
            suggested_eval_every=better,
            level=Level.WARNING,
            rule=RESOLUTION_RULE,
            text=f"cannot tell {what}: {evals} evals in a run of "
            f"{trial_steps} steps (eval_every {eval_every}), {late_evals} in its last 25%, so the "
            "best step's position is set by the eval grid",
            advice=advice,
        )
    )
    if better is not None:
        reason = (
            f"{evals} evals a run, {late_evals} in its last 25%: too few to place best steps ({phase.phase})"
        )
        result.suggestions.append(Suggestion(("training", "eval_every"), eval_every, better, reason))


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
    return _round_up(production * suggested / trial_steps, eval_every)
