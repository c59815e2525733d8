"""What ``tuner tune`` runs next, and its plan with step totals (``--dry-run``, ``tuner estimate``).

The decisions are taken here, one phase at a time, with the budget rule of ``budget.py``: the
driver (``tuner/playbook/tune``) takes them as each phase comes, and ``--dry-run`` / ``estimate``
take the same ones ahead, with what ran read from the storage, so the three agree on the totals.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tuner.playbook.budget import (
    MIN_SEARCH_TRIALS,
    LaterRound,
    SweepShape,
    fit_later_rounds,
    shape_rounds,
    sweep_shape,
    with_measured_spread,
)
from tuner.playbook.decision_log import Decision, Stage
from tuner.playbook.phase_names import SWEEP_PHASE, round_phase
from tuner.spec import LoadedStudy


@dataclass(frozen=True)
class Switches:
    """What the user turned off (``tune``'s flags): each automatic step can be."""

    sweep: bool = True  # --no-sweep
    apply_suggestions: bool = True  # --no-apply-suggestions: neither kind below
    extra_seeds: bool = True  # --no-extra-seeds
    extra_round: bool = True  # --no-extra-round: no round decided on the last round's report
    max_searches: int = 2  # --max-searches: round 1 of the study, then of each next study
    apply_ranges: bool = True  # --no-apply-ranges: the search space's (ranges, categorical values)
    apply_length: bool = True  # --no-apply-length: max_train_steps, eval_every, rounds' steps
    #: round 1 at full length, its suggestions reported only (``--short-round1`` turns it off:
    #: round 1 at the file's fraction, searched again on its suggestions); ``FULL_LENGTH_ROUND1``
    full_length_round1: bool = True
    #: the rounds' length when no LR fit within sweep-lr's cap, as a multiple of that cap (the
    #: hidden ``--nothing-fits-scale``: an ablation of the outcome benchmark, docs/benchmarks.md)
    nothing_fits_scale: float = 1.0

    @property
    def may_apply(self) -> bool:
        """Whether any of the report's suggestions may be applied (a next search planned for)."""
        return (
            self.apply_suggestions
            and (self.apply_ranges or self.apply_length)
            and not self.full_length_round1
        )

    def applies(self, path: tuple[str | int, ...]) -> str | None:
        """None if a suggestion at ``path`` (``Suggestion.path``) may be applied, else the flag
        that keeps it from being: the search space's, or the length's (everything else)."""
        if self.full_length_round1:
            return "round 1 trained at full length: --short-round1 searches again on them"
        if not self.apply_suggestions:
            return "--no-apply-suggestions"
        if path[:1] == ("search_space",):
            return None if self.apply_ranges else "--no-apply-ranges"
        return None if self.apply_length else "--no-apply-length"


#: ``tune``'s round 1 by default: the production length, whatever the study file's round 1 says
#: (short trials ranked the points wrongly on the outcome benchmark: docs/benchmarks.md)
FULL_LENGTH_ROUND1 = ("rounds.round1.steps=null", "rounds.round1.length_fraction=1")


def sweep_decision(loaded: LoadedStudy, budget_steps: int, sets: list[str]) -> tuple[Stage, Decision]:
    """sweep-lr within ``SWEEP_SHARE`` of the budget (``sweep_lr.max_steps`` lowered if needed)."""
    from tuner.playbook.sweep_grid import default_grid

    spec = loaded.spec
    sweep = spec.sweep_lr
    trials = len(sweep.grid or default_grid(spec.training.optimizer.lr)) * sweep.seeds
    file_cap = sweep.max_steps or spec.training.max_train_steps
    if file_cap is None:
        from tuner.errors import UsageError

        raise UsageError(
            "sweep_lr.max_steps is not set (the cap on each grid trial): set it, e.g. to a few "
            "times the steps you expect the model to need"
        )
    shape: SweepShape = sweep_shape(budget_steps, trials, file_cap, spec.training.eval_every)
    stage = Stage(
        spec.name, SWEEP_PHASE, str(loaded.path.resolve()), list(sets), trials, shape.upper_bound, True
    )
    stage.steps_per_trial = shape.cap
    numbers = {"trials": trials, "cap": shape.cap, "file_cap": shape.file_cap, "steps": shape.upper_bound}
    if shape.lowered:
        stage.sets.append(f"sweep_lr.max_steps={shape.cap}")
        text = (
            f"sweep-lr: {trials} trials x {shape.file_cap} steps would exceed its share of the budget "
            f"(20%, {int(budget_steps * 0.2):,} steps): each LR capped at {shape.cap} steps "
            f"(<= {shape.upper_bound:,} steps; a trial that fits stops sooner)"
        )
        short = f"sweep-lr: {trials} trials, each capped at {shape.cap} steps (<= {shape.upper_bound:,}: 20%)"
        return stage, Decision("sweep_cap", stage.key, text, numbers, short)
    text = (
        f"sweep-lr: {trials} trials of at most {shape.cap} steps (<= {shape.upper_bound:,} steps, within 20%)"
    )
    return stage, Decision("sweep_planned", stage.key, text, numbers)


def later_rounds_of(loaded: LoadedStudy, production: int, round1_steps: int) -> list[LaterRound]:
    """The study file's rounds 2, 3... with their lengths."""
    from tuner.playbook.later_rounds import round_length
    from tuner.playbook.trial_lengths import ProductionLength

    spec = loaded.spec
    rounds, previous = [], round1_steps
    length = ProductionLength(production, "tune")
    for number in spec.rounds.numbers:
        if number < 2:
            continue
        round_spec = spec.rounds.get(number)
        assert round_spec is not None
        previous = round_length(spec, number, previous, length)
        rounds.append(
            LaterRound(number, round_spec.top_k, round_spec.seeds, len(round_spec.lr_multipliers), previous)
        )
    return rounds


def round1_length(loaded: LoadedStudy, production: int) -> int:
    from tuner.playbook.trial_lengths import round_steps

    spec = loaded.spec
    return round_steps(spec, spec.rounds.round1, 1, production)


def round1_decision(
    loaded: LoadedStudy,
    production: int,
    left: int,
    sets: list[str],
    *,
    keep_reserve: bool,
    search: int,
    budget: int,
    extra_round: bool = False,
) -> tuple[Stage, Decision]:
    """Round 1's trials: what the later rounds (at the file's seeds) and the extra round's share
    (``extra_round``) leave, halved when another search may follow (``keep_reserve``)."""
    spec = loaded.spec
    length = round1_length(loaded, production)
    later = later_rounds_of(loaded, production, length)
    shape = shape_rounds(
        left,
        length,
        later,
        keep_reserve=keep_reserve,
        min_trials=1 if search == 1 else MIN_SEARCH_TRIALS,
        budget=budget,
        extra_round=extra_round_share(budget) if extra_round else 0,
    )
    stage = Stage(
        spec.name,
        round_phase(1),
        str(loaded.path.resolve()),
        list(sets),
        shape.round1_trials,
        shape.round1_cost,
    )
    stage.steps_per_trial = length
    later_cost = sum(r.cost for r in shape.later)
    text = (
        f"round 1: {_count(shape.round1_trials, 'trial')} of {length} steps ({shape.round1_cost:,} steps) "
        f"from the {left:,} left; the later rounds need {later_cost:,} ({_seeds(shape.later)})"
    )
    if shape.reserve:
        unused = "the extra round's" if extra_round else "more seeds"
        text += f"; {shape.reserve:,} kept for a search on the report's suggestions (else {unused})"
    if shape.extra_round:
        text += (
            f"; {shape.extra_round:,} kept for a round decided on the last round's report (longer runs "
            "if it says they were still improving, else more seeds)"
        )
    elif extra_round:
        text += "; no room for a round decided on the last round's report (round 1's minimum first)"
    numbers = {
        "trials": shape.round1_trials,
        "steps_per_trial": length,
        "steps": shape.round1_cost,
        "left": left,
        "later_steps": later_cost,
        "reserve": shape.reserve,
        "extra_round": shape.extra_round,
    }
    return stage, Decision("round1_trials", stage.key, text, numbers)


def later_decisions(
    loaded: LoadedStudy,
    production: int,
    left: int,
    sets: list[str],
    *,
    fill_seeds: bool,
    round1_trials: int | None,
    spread_within: int | None = None,
) -> list[tuple[Stage, Decision]]:
    """Rounds 2, 3... within ``left`` steps: the last one's seeds fill them (``fill_seeds``) or
    shrink to fit; with ``spread_within`` (the budget, when an extra round follows and takes what
    is left) at 2 seeds when half of it holds them, as round 1's share counted them. Each round
    carries the ``--set`` values of the rounds before it (round N checks the file against round
    N-1's plan)."""
    spec = loaded.spec
    later = later_rounds_of(loaded, production, round1_length(loaded, production))
    planned_from = with_measured_spread(spread_within, later) if spread_within is not None else later
    fitted = fit_later_rounds(left, planned_from, fill_seeds=fill_seeds, round1_trials=round1_trials)
    decided, carried = [], list(sets)
    for planned, file_round in zip(fitted, later, strict=True):
        round_spec = spec.rounds.get(planned.number)
        assert round_spec is not None
        key = f"rounds.round{planned.number}"
        if planned.seeds != file_round.seeds:
            carried.append(f"{key}.seeds={planned.seeds}")
        if planned.top_k != file_round.top_k:
            carried.append(f"{key}.top_k={planned.top_k}")
        if round_spec.trials is not None and planned.trials != round_spec.trials:
            carried.append(f"{key}.trials={planned.trials}")
        stage = Stage(
            spec.name,
            round_phase(planned.number),
            str(loaded.path.resolve()),
            list(carried),
            None,
            planned.cost,
        )
        stage.steps_per_trial = planned.steps
        text = (
            f"round {planned.number}: {_count(planned.top_k, 'point')} x {_count(planned.seeds, 'seed')}"
            + (f" x {planned.multipliers} LR multipliers" if planned.multipliers > 1 else "")
            + f" of {planned.steps} steps ({planned.cost:,} steps) from the {left:,} left"
        )
        grown = []
        if planned.seeds > file_round.seeds:
            grown.append(f"seeds {file_round.seeds} -> {planned.seeds}: the spread over seeds is measured")
        if planned.top_k > file_round.top_k:
            grown.append(
                f"top_k {file_round.top_k} -> {planned.top_k}: the steps left hold no whole seed more"
            )
        if grown:
            text += f" ({'; '.join(grown)})"
        elif planned.seeds < file_round.seeds or planned.top_k < file_round.top_k:
            text += f" (shrunk to fit: the file has top_k {file_round.top_k} x seeds {file_round.seeds})"
        short = (
            f"round {planned.number}: {_count(planned.top_k, 'point')} x {_count(planned.seeds, 'seed')}"
            + (f" x {planned.multipliers} LR multipliers" if planned.multipliers > 1 else "")
            + f" of {planned.steps} steps ({planned.cost:,} steps)"
        )
        decided.append(
            (stage, Decision(f"round{planned.number}_shape", stage.key, text, planned.to_json(), short))
        )
        left -= planned.cost
    return decided


def extra_round_share(budget: int) -> int:
    """The steps round 1 leaves for the round decided on the last round's report."""
    from tuner.playbook.budget import EXTRA_ROUND_SHARE

    return int(budget * EXTRA_ROUND_SHARE)


def _seeds(later: list[LaterRound]) -> str:
    return ", ".join(f"round {r.number}: {r.top_k} x {_count(r.seeds, 'seed')}" for r in later)


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'s' if n != 1 else ''}"


@dataclass(frozen=True)
class PlannedPhase:
    """One phase of the plan: what ran (``steps_ran``) and what is still to run."""

    stage: str
    trials: int | None
    steps_per_trial: int | None
    steps_ran: int
    steps_to_run: int | None  # None: sized later (after the sweep)
    upper_bound: bool = False
    done: bool = False

    @property
    def steps(self) -> int | None:
        return None if self.steps_to_run is None else self.steps_ran + self.steps_to_run

    def to_json(self) -> dict[str, Any]:
        return {
            "phase": self.stage,
            "trials": self.trials,
            "steps_per_trial": self.steps_per_trial,
            "steps_ran": self.steps_ran,
            "steps_to_run": self.steps_to_run,
            "steps": self.steps,
            "upper_bound": self.upper_bound,
            "done": self.done,
        }


@dataclass
class TunePlan:
    """The phases ``tune`` ran and will run, with step totals within ``budget_steps``."""

    budget_steps: int
    phases: list[PlannedPhase] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def steps_ran(self) -> int:
        return sum(p.steps_ran for p in self.phases)

    @property
    def steps_to_run(self) -> int:
        return sum(p.steps_to_run or 0 for p in self.phases)

    @property
    def total(self) -> int:
        return self.steps_ran + self.steps_to_run

    @property
    def complete(self) -> bool:
        return all(p.steps_to_run is not None for p in self.phases)

    def lines(self) -> list[str]:
        rows = [("phase", "trials", "length", "ran", "to run", "steps")]
        for p in self.phases:
            bound = "<=" if p.upper_bound and not p.done else ""
            rows.append(
                (
                    p.stage,
                    "" if p.trials is None else str(p.trials),
                    "" if p.steps_per_trial is None else f"{bound}{p.steps_per_trial}",
                    f"{p.steps_ran:,}",
                    "later" if p.steps_to_run is None else f"{bound}{p.steps_to_run:,}",
                    "later" if p.steps is None else f"{bound}{p.steps:,}",
                )
            )
        widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
        lines = [
            "  ".join(
                c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths, strict=True))
            )
            for row in rows
        ]
        total = (
            f"steps: {self.steps_ran:,} trained + {self.steps_to_run:,} to run = {self.total:,} "
            f"of the budget's {self.budget_steps:,}"
        )
        if not self.complete:
            total += " (the rounds are sized once the sweep has run: together at most the budget)"
        return [*lines, total, *self.notes]

    def to_json(self) -> dict[str, Any]:
        return {
            "budget_steps": self.budget_steps,
            "phases": [p.to_json() for p in self.phases],
            "steps_ran": self.steps_ran,
            "steps_to_run": self.steps_to_run,
            "steps": self.total,
            "complete": self.complete,
            "notes": self.notes,
        }
