"""Best-step position: where in training each trial's best checkpoint was.

The playbook's rule (section "Deciding how long to train"): best checkpoints consistently in the
first 10% of training mean ``max_train_steps`` is too high (the rest of each run is wasted);
consistently in the last 25% mean the runs were still improving: train longer and retune the
decay. "Consistently" is ``CONSISTENT``: at least 3 of the 5 best trials and at least half of all
completed trials. The position alone misleads where curves are noisy or a schedule settles at the
end: "train longer" also needs the curves still falling through the middle of training, and
"worse after an early best" a rise beyond the curves' noise (``curve_trend``; the rates are on
the verdicts page of the docs).

A trial's best step is only known to the resolution of ``eval_every``: when the first eval
comes after 10% of training, "the first 10%" cannot be seen, and the report says so. Fewer than
``MIN_EVALS`` (4) evals in a run give no position verdict at all, and "still improving" needs at
least ``MIN_LATE_EVALS`` (2) evals in the last 25%: with evals only at steps 100 and 120 of 120,
every best step lands there by construction. Then the verdict is "cannot tell", with the largest
readable ``eval_every`` that gives those evals in the study's shortest round (round 1): those
verdicts are ``best_step_resolution``.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from tuner.playbook.curve_trend import CurveTrend, late_trend, rise_after_best
from tuner.playbook.eval_grid import EARLY, LATE, MIN_EVALS, MIN_LATE_EVALS, eval_counts
from tuner.report.after_best import (
    RISE,
    AfterBest,
    BestStepWorsens,
    error_of,
    worsening_top,
    worsens_verdict,
)
from tuner.report.best_step_resolution import coarse_finding, unresolved
from tuner.report.findings import Finding, Level, Suggestion, pct
from tuner.report.learning import NOT_JUDGED
from tuner.report.length_cut import production_of, round_up, shorten
from tuner.report.study_data import PhaseData, TrialSlot

TOP = 5
LATE_CURVES = 30  # beyond the top: the best-ranked late trials whose curves test "still falling"
TOP_NEEDED = 3
MIN_TRIALS = 3
LATE_GROWTH = 1.5  # suggested length: 1.5 x max_train_steps
CONSISTENT = f"at least {TOP_NEEDED} of the {TOP} best trials and at least half of all completed trials"
HISTOGRAM_BINS = 10


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
class BestStepLate(Finding):
    kind: ClassVar[str] = "best_step_late"
    late_top: int
    top: int
    late_all: int
    completed: int
    short_round: bool  # the phase trains shorter trials than production on purpose (round 1)
    suggested_max_train_steps: int | None
    trend_tested: bool = False  # the middle of training showed the fall (``late_trend``); else unknown


@dataclass(frozen=True)
class BestStepFine(Finding):
    kind: ClassVar[str] = "best_step_ok"
    median_position: float
    early_all: int
    late_all: int
    completed: int
    late_but_flat: bool = False  # best steps late, but no fall between 50% and 75% (``late_trend``)


@dataclass(frozen=True)
class BestStepUnknown(Finding):
    kind: ClassVar[str] = "best_step_too_few"
    completed: int
    needed: int


@dataclass
class BestStepResult:
    positions: list[tuple[int, float]]  # (slot, best_step / max_train_steps), best trial first
    histogram: list[int]  # HISTOGRAM_BINS counts over [0, 1]
    findings: list[Finding] = field(default_factory=list)
    suggestions: list[Suggestion] = field(default_factory=list)
    #: the error's trend between 50% and 75% of training over every curve read (``curves_read``),
    #: wherever best steps fall; None: no verdict on the position to go with it
    late_trend: CurveTrend | None = None

    @property
    def falling_late(self) -> CurveTrend | None:
        """The runs were still getting better late: the error falling between 50% and 75% of
        training beyond the curves' noise (``curve_trend.late_trend``), without asking where the
        best steps fell (a decaying schedule pulls them to the end of a run that was long enough,
        and can keep those of one cut short out of the last quarter), and no verdict that the
        length is too long. What ``tune``'s extra round asks of a length sweep-lr measured with the
        regularisation off before training the chosen point longer; its false alarms are on the
        verdicts page."""
        too_long = any(f.kind in (BestStepEarly.kind, BestStepWorsens.kind) for f in self.findings)
        trend = self.late_trend
        return trend if trend is not None and trend.falling and not too_long else None

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


def still_improving(result: BestStepResult | None) -> BestStepLate | None:
    """The phase's best-step verdict when it says the runs were still improving at their end, else
    None. This is the one rule for that question (calibrated to at most 5% false alarms,
    docs/verdicts.md); the other sections that speak of it (round 2's transfer, ``tune``'s extra
    round) quote this verdict rather than count late best steps by a threshold of their own: a
    count alone says "still improving" of plateaus, of schedules settling at the end, and of
    rounds whose best trials peaked earlier, where this verdict says the length looks right."""
    if result is None:
        return None
    return next((f for f in result.findings if isinstance(f, BestStepLate)), None)


def curves_read(ranked: list[TrialSlot]) -> list[TrialSlot]:
    """The trials whose learning curves the verdict reads (``ranked``: completed, best first): the
    top ``TOP`` (worse after an early best?) and the best-ranked ``LATE_CURVES`` others whose best
    step is late (still falling?)."""
    late = [s for s in ranked[TOP:] if (s.position or 0.0) > LATE][:LATE_CURVES]
    return ranked[:TOP] + late


def diagnose_best_step(
    phase: PhaseData,
    judge: bool = True,
    shortest: int | None = None,
    curves: Mapping[int, Mapping[int, float]] | None = None,
) -> BestStepResult:
    """Best-step positions of the phase's completed trials, and the playbook's verdict on them
    (none when not ``judge``: the trials learned nothing, ``learning``). ``shortest``: the
    shortest trial length of the study's rounds, which a suggested ``eval_every`` must serve too.
    ``curves``: slot -> its learning curve, for the trials of ``curves_read`` (others are not
    read): the top ``TOP`` (``after_best``) and the best-ranked ``LATE_CURVES`` others whose best
    step is late (``curve_trend.late_trend``); the trend between 50% and 75% of training over all
    of them is ``late_trend``, whatever the verdict."""
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
        what = "where in training the best checkpoints fall"
        unresolved(phase, result.findings, result.suggestions, what, shortest)
        return result
    coarse = coarse_finding(eval_every or 0, trial_steps or 0)
    if coarse is not None:
        result.findings.append(coarse)
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
    if curves:
        read = [curves[s.slot] for s in curves_read(ranked) if s.slot in curves]
        trial_steps = phase.trial_steps or ranked[0].max_train_steps or 0
        result.late_trend = late_trend(read, trial_steps, phase.direction)
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
    production = production_of(phase)
    eval_every = phase.eval_every or 1
    numbers = f"{early_top} of the top {len(top)}, {early_all} of {len(values)} completed"
    if early_top >= needed_top and early_all >= half:
        # the latest of the early best steps: a top trial that peaked late is not what the cut is for
        latest = max(s.best_step or 0 for s in ranked[:TOP] if (s.position or 0.0) <= EARLY)
        reason = f"best steps in the first 10% of training in {numbers} trials ({phase.phase})"
        cut = shorten(phase, result.suggestions, latest, len(top), reason, trial_steps)
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
    worsening = worsening_top(phase, ranked[:TOP], curves)
    rise = rise_after_best(((w.best_step, curves[w.slot]) for w in worsening), trial_steps, phase.direction)
    if len(worsening) >= needed_top and (
        _rises_beyond_noise(worsening, rise, phase.direction) or not rise.testable
    ):
        rule_top = (needed_top, TOP)
        result.findings.append(
            worsens_verdict(phase, worsening, len(top), trial_steps, rule_top, result.suggestions)
        )
        return
    if (
        late_top >= needed_top
        and late_all >= half
        and eval_counts(eval_every, trial_steps)[1] < MIN_LATE_EVALS
    ):
        what = "whether the runs were still improving"
        unresolved(phase, result.findings, result.suggestions, what, shortest)
        return
    if late_top >= needed_top and late_all >= half:
        late_curves = [curves[s.slot] for s in ranked if (s.position or 0.0) > LATE and s.slot in curves]
        trend = late_trend(late_curves, trial_steps, phase.direction)
        if trend.testable and not trend.falling:
            _fine(
                result,
                values,
                early_all,
                late_all,
                late_but_flat=True,
                rule=f"late (> {LATE:.0%}) in {CONSISTENT}, but the error not falling beyond its noise "
                "between 50% and 75% of training",
                text=f"max_train_steps looks right: best checkpoints come in the last 25% of training "
                f"({late_top} of the top {len(top)}, {late_all} of {len(values)} completed), but "
                f"{trend.describe()}: a plateau or a settling schedule, not runs cut short",
            )
            return
        numbers = f"{late_top} of the top {len(top)}, {late_all} of {len(values)} completed"
        evidence = trend.describe()
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
            suggested = round_up(LATE_GROWTH * trial_steps, eval_every)
            level = Level.WARNING
            text = (
                f"training may be too short: best checkpoints come in the last 25% of training ({numbers}); "
                f"the runs were still improving ({evidence})"
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
                trend_tested=trend.falling,
                level=level,
                rule=f"best step > {LATE:.0%} of max_train_steps in {CONSISTENT}, and the error still "
                "falling between 50% and 75% of training beyond the curves' noise (where they allow a fit)",
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
    _fine(
        result,
        values,
        early_all,
        late_all,
        rule=f"neither early (<= {EARLY:.0%}) nor late (> {LATE:.0%}) in {CONSISTENT}",
        text=f"max_train_steps looks right: best steps spread over training (median at "
        f"{pct(median)}; {early_all} in the first 10%, {late_all} in the last 25%, of "
        f"{len(values)} completed)",
    )


def _fine(
    result: BestStepResult,
    values: list[float],
    early_all: int,
    late_all: int,
    *,
    rule: str,
    text: str,
    late_but_flat: bool = False,
) -> None:
    """The verdict that the length looks right, with its numbers."""
    result.findings.append(
        BestStepFine(
            median_position=statistics.median(values),
            early_all=early_all,
            late_all=late_all,
            completed=len(values),
            late_but_flat=late_but_flat,
            level=Level.OK,
            rule=rule,
            text=text,
        )
    )


def _rises_beyond_noise(worsening: list[AfterBest], rise: CurveTrend, direction: str) -> bool:
    """The error rises after the best steps beyond the curves' noise, and by the fitted line as much
    as ``RISE``: the last eval alone is compared with a best that sits below the curve (the
    minimum of many noisy evals), so noise makes it look ``RISE`` worse on a small split."""
    if not rise.rising:
        return False
    fitted = rise.change * statistics.mean(1.0 - w.position for w in worsening)
    best_error = statistics.median(error_of(w.best, direction) for w in worsening)
    return fitted >= RISE * best_error - 1e-9  # inclusive, as the last eval's bound
