"""The whole report of a study: every diagnostic of every phase, and the suggested next study.

``build_report`` only reads (the storage through ``study_data``, run folders through
``run_folders``); the renderers (terminal, JSON, CSV, HTML) and ``--write-next`` take its result
(they import this module, never the other way round).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from tuner.playbook.decision_log import TuneState
from tuner.report.best_step import BestStepResult, curves_read, diagnose_best_step, still_improving
from tuner.report.best_trial import BestTrial, best_trial
from tuner.report.boundaries import BoundaryResult, diagnose_boundaries
from tuner.report.delivered import DeliveredModel, delivered_model
from tuner.report.field_values import field_checker
from tuner.report.findings import Finding, Level, Suggestion
from tuner.report.health import HealthResult, diagnose_health
from tuner.report.imbalance import ImbalanceResult, diagnose_imbalance
from tuner.report.learning import LearningResult, diagnose_learning
from tuner.report.run_folders import Unreadable
from tuner.report.study_data import PhaseData, SlotState, StudyData
from tuner.report.transfer import TransferResult, diagnose_transfer
from tuner.report.tuned_into import TunedInto

MAX_TRAIN_STEPS = ("training", "max_train_steps")
# completed trials a phase needs before "all fine" means anything: most verdicts need 3
MIN_TO_JUDGE = 3


@dataclass
class PhaseReport:
    data: PhaseData
    health: HealthResult
    best_step: BestStepResult | None = None
    boundaries: BoundaryResult | None = None
    transfer: TransferResult | None = None
    sweep: Any = None  # tuner.playbook.sweep_lr.SweepResult
    imbalance: ImbalanceResult | None = None
    best: BestTrial | None = None
    next_steps: list[str] = field(default_factory=list)
    learning: LearningResult | None = None  # None: chance level unknown

    @property
    def phase(self) -> str:
        return self.data.phase

    @property
    def tally(self) -> str:
        """The phase's trials by state, with the retries merged into them and the duplicates a
        lock-free claim yielded (the terminal's and the HTML page's "trials" line)."""
        data, counts = self.data, self.health.counts
        tally = " · ".join(f"{counts[s]} {s}" for s in SlotState if counts.get(s)) or "none started"
        retries = data.attempts - len(data.slots)
        if retries:
            tally += f" ({retries} retries merged into their trials)"
        if data.duplicates:
            noun = "duplicate" if data.duplicates == 1 else "duplicates"
            tally += f" ({data.duplicates} {noun} of a slot claimed twice at once, left out)"
        if self.health.reasons:
            tally += "; failed: " + ", ".join(f"{n} {r}" for r, n in self.health.reasons.items())
        return tally

    @property
    def findings(self) -> list[Finding]:
        """Every finding of the phase, in the order the report prints them."""
        found: list[Finding] = list(self.learning.findings) if self.learning is not None else []
        for part in (self.best_step, self.boundaries, self.health, self.transfer, self.imbalance):
            if part is not None:
                found += part.findings
        return found

    @property
    def unreadable(self) -> list[Unreadable]:
        missing: list[Unreadable] = []
        for part in (self.best, self.imbalance):
            if part is not None:
                missing += [u for u in part.unreadable if u not in missing]
        return missing

    @property
    def suggestions(self) -> list[Suggestion]:
        return [
            *(self.best_step.suggestions if self.best_step else []),
            *(self.boundaries.suggestions if self.boundaries else []),
        ]


@dataclass
class StudyReport:
    study: str
    storage: str
    phases: list[PhaseReport]  # latest first
    delivered: DeliveredModel | None = None  # over every phase of the study, whichever are shown
    tune: TuneState | None = None  # ``tuner tune``'s decision log, when it tuned this study
    tuned_into: TunedInto | None = None  # the next study tune delivered from (``tuned_into``)

    @property
    def suggestions(self) -> list[Suggestion]:
        """What ``--write-next`` applies: ``max_train_steps`` from the latest phase that judged the
        best step, ranges from the latest phase that searched (a later, longer round overrules an
        earlier one; a round of fixed points says nothing about ranges)."""
        chosen: list[Suggestion] = []
        judged_length = judged_ranges = False
        for report in self.phases:
            if report.best_step is not None and not judged_length and _judged(report.best_step.findings):
                judged_length = True
                chosen += report.best_step.suggestions
            if report.boundaries is not None and not judged_ranges and _judged(report.boundaries.findings):
                judged_ranges = True
                chosen += report.boundaries.suggestions
        return chosen + _round_lengths(chosen, self.phases)


def _round_lengths(chosen: list[Suggestion], phases: list[PhaseReport]) -> list[Suggestion]:
    """A round whose length is given in ``steps`` keeps its share of ``max_train_steps`` when that
    changes, up or down (round 1 at 20% stays at 20%), rounded up to ``eval_every``; a round the
    best-step verdict already set is left to it."""
    length = next((s for s in chosen if s.path == MAX_TRAIN_STEPS), None)
    plan = next((p.data.plan for p in phases if p.data.plan is not None), None)
    if length is None or plan is None or not length.old or not length.new:
        return []
    config = plan.config
    eval_every = int(config.get("training", {}).get("eval_every") or 1)
    taken = {s.path for s in chosen}
    scaled = []
    for key, spec in (config.get("rounds") or {}).items():
        steps = spec.get("steps") if isinstance(spec, dict) else None
        path = ("rounds", key, "steps")
        if not isinstance(steps, int) or path in taken:
            continue
        new = min(int(length.new), eval_every * math.ceil(steps * length.new / length.old / eval_every))
        if new != steps:
            reason = (
                f"{key.replace('round', 'round ')} keeps its share of max_train_steps ({steps} of "
                f"{length.old} steps before, max_train_steps {length.old} -> {length.new})"
            )
            scaled.append(Suggestion(path, steps, new, reason))
    return scaled


def _shortest_round(data: StudyData, phase: PhaseData) -> int | None:
    """The shortest trial length among the study's rounds read here (round 1, or the phase's own
    source round when only later phases were asked for)."""
    rounds = [p for p in data.phases if p.kind == "round"]
    if phase.plan is not None and phase.plan.source_phase is not None:
        rounds.append(data.phase(phase.plan.source_phase))
    return min((p.trial_steps for p in rounds if p is not None and p.trial_steps), default=None)


def _judged(findings: list[Finding]) -> bool:
    """A diagnostic reached a verdict (not only "too few trials" or a note)."""
    return any(f.level in (Level.OK, Level.WARNING) for f in findings)


def build_report(data: StudyData) -> StudyReport:
    """Every diagnostic of every phase of ``data`` (already read: ``read_study``)."""
    from tuner.playbook.decision_log import state_for

    built: dict[str, PhaseReport] = {}
    for phase in reversed(data.phases):  # earliest first: a round's source is built before it
        built[phase.phase] = _phase_report(data, phase, built)
    reports = [built[phase.phase] for phase in data.phases]
    reader = data.reader
    tuned = state_for(data.study, reader.optuna_study_names(), reader.study_attrs) if reader else None
    return StudyReport(data.study, data.storage, reports, delivered_model(data.every_phase()), tuned)


def _phase_report(data: StudyData, phase: PhaseData, built: dict[str, PhaseReport]) -> PhaseReport:
    """The phase's diagnostics; ``built``: the reports of the phases before it already built."""
    report = PhaseReport(phase, diagnose_health(phase, trend=phase.searched))
    report.learning = diagnose_learning(phase)
    learned = report.learning is None or report.learning.learned  # else ranges and lengths are noise
    if phase.kind == "sweep-lr":
        report.sweep = _sweep(data, phase)
    else:
        report.best_step = _best_step(data, phase, learned)
    if phase.searched and phase.plan is not None:
        report.boundaries = diagnose_boundaries(phase, field_checker(phase.plan.config), judge=learned)
    if phase.plan is not None and phase.plan.source_phase is not None:
        source = data.phase(phase.plan.source_phase)
        late = None if source is None else still_improving(_source_best_step(data, source, built))
        report.transfer = diagnose_transfer(phase, source, source_late=late)
    report.imbalance = diagnose_imbalance(phase)
    report.best = best_trial(phase)
    report.next_steps = _next_steps(report)
    return report


def _best_step(data: StudyData, phase: PhaseData, learned: bool) -> BestStepResult:
    """The phase's best-step verdict, reading the curves it needs: the top trials (worse after an
    early best?) and the best-ranked late ones (still falling?). Not judged when nothing was
    learned (``learned`` False): the positions are noise then."""
    read = curves_read([s for s in phase.completed if s.position is not None])
    curves = data.curves(phase, read) if learned and read else {}
    return diagnose_best_step(phase, judge=learned, shortest=_shortest_round(data, phase), curves=curves)


def _source_best_step(
    data: StudyData, source: PhaseData, built: dict[str, PhaseReport]
) -> BestStepResult | None:
    """The source round's best-step verdict, which the transfer quotes rather than judging the
    source's length by a rule of its own: the one in its section when the report shows it, else
    built the same way (a report of round 2 alone still reads round 1)."""
    shown = built.get(source.phase)
    if shown is not None:
        return shown.best_step
    if source.kind == "sweep-lr":
        return None
    learning = diagnose_learning(source)
    return _best_step(data, source, learning is None or learning.learned)


def _sweep(data: StudyData, phase: PhaseData) -> Any:
    from tuner.playbook.sweep_phase import sweep_result_of

    if phase.plan is None or phase.plan.fit is None:
        return None
    trials = [trial for slot in phase.slots for trial in slot.attempts]
    # the objective's curves: "validation best long before the fit" asks whether it rose after
    numbers = [t.number for t in trials]
    curves = data.reader.intermediate_values(phase.study, phase.phase, numbers) if data.reader else None
    return sweep_result_of(trials, phase.plan, study_ref=phase.study_file or "STUDY", curves=curves)


def _next_steps(report: PhaseReport) -> list[str]:
    """What to do next, in plain words: the advice of every warning, most urgent first (failures,
    then the search space, the length, the transfer); else where the search stands."""
    urgent_first = (report.health, report.boundaries, report.best_step, report.transfer, report.imbalance)
    findings = list(report.learning.findings) if report.learning is not None else []  # said first
    findings += [f for part in urgent_first if part is not None for f in part.findings]
    steps = [f.advice for f in findings if f.level is Level.WARNING and f.advice]
    if not steps and report.health.trend in ("improving", "plateaued", "slowing"):
        progress = [f.advice for f in report.health.findings if f.kind == "progress" and f.advice]
        steps += progress
    completed = len(report.data.completed)
    if report.sweep is not None:  # a sweep LR stopped because it could not win is a result too
        completed += sum(len(row.stopped_steps) for row in report.sweep.rows)
    if not steps and completed >= MIN_TO_JUDGE:
        steps.append("nothing to change: this phase's verdicts are all fine")
    elif not steps and completed:
        steps.append(
            f"only {completed} completed trial{'s' if completed > 1 else ''}: too few to judge this phase "
            f"(its verdicts need at least {MIN_TO_JUDGE}); nothing here says the phase is fine"
        )
    return list(dict.fromkeys(steps))
