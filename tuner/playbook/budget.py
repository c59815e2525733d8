"""``tuner tune --budget N``: the budget, and the rule that splits it between the phases.

One budget, in training steps (``5000``) or as a duration (``2h``, ``30m``, ``90s``), converted to
steps once with the seconds per step measured so far (``tune/opening.py``). The split, every number a
step count of trials that train to their length (a retry resumes from its checkpoint: no step is
trained twice), so the phases together never train more than the budget:

1. **sweep-lr** (only when ``max_train_steps`` is unknown): at most ``SWEEP_SHARE`` (20%) of the
   budget. Its grid x seeds trials each stop when they fit, else at the cap; when grid x seeds x
   ``sweep_lr.max_steps`` exceeds the share, the cap is lowered to fit it (on the eval grid).
2. **the later rounds** (round 2, 3...) from the study file, sized first: round N trains ``top_k``
   x ``seeds`` x ``len(lr_multipliers)`` trials at its length; the last one at 2 seeds at least
   (``SPREAD_SEEDS``: one seed measures no spread) when that costs at most half of the budget.
   If the last one does not fit, its seeds are lowered, then its ``top_k``.
3. **round 1** gets what is left, ``trials = (left - later rounds - extra round) // round-1
   length``, where the extra round (below) is kept ``EXTRA_ROUND_SHARE`` (20%) of the budget;
   when another search may follow (the report's suggestions applied to a next study file:
   ``tune``'s ``--max-searches``), round 1 gets half of that and the other half is kept for it.
4. **the extra round** (round N+1 after the file's last round N; ``extra_round.py``) is decided
   on round N's report once it has run, and takes every step left: when its runs were still
   improving (best checkpoints in the last 25%: the playbook's "train longer"), the chosen point
   at a longer length on 2 seeds; otherwise round N's points again on new seeds, pooled with
   theirs by the delivered-model rule (``tuner.report.delivered``). The share is kept before the
   report can say which, because the playbook's remedy for too short a length costs a longer run.
   With ``--no-extra-round`` no share is kept and, as before it existed, the last round's seeds
   grow to use every step left when it starts (``--no-extra-seeds`` keeps the file's): the
   spread over seeds is the delivered model's test-free uncertainty.

A phase that does not fit is shrunk, or refused with one line saying what would fit.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, replace
from typing import Any

from tuner.errors import UsageError

SWEEP_SHARE = 0.2
#: the budget kept for the round decided on the last round's report (longer, or more seeds)
EXTRA_ROUND_SHARE = 0.2
#: the last round's seeds when the budget allows: the spread over seeds needs two
SPREAD_SEEDS = 2
#: a search after the first (the report's suggestions applied) needs at least this many trials
MIN_SEARCH_TRIALS = 4
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(s|sec|m|min|h|hr|d)\s*$", re.IGNORECASE)
_SECONDS = {"s": 1, "sec": 1, "m": 60, "min": 60, "h": 3600, "hr": 3600, "d": 86400}


@dataclass(frozen=True)
class Budget:
    """What ``--budget`` said: training steps, or a duration to convert to steps."""

    text: str
    steps: int | None = None
    seconds: float | None = None

    def same_as(self, other: Budget) -> bool:
        """The same budget however written (``8000`` and ``8_000``, ``2h`` and ``120m``)."""
        return (self.steps, self.seconds) == (other.steps, other.seconds)

    def to_json(self) -> dict[str, Any]:
        return {"text": self.text, "steps": self.steps, "seconds": self.seconds}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Budget:
        return cls(str(data["text"]), data.get("steps"), data.get("seconds"))


def parse_budget(text: str) -> Budget:
    """``5000`` / ``5_000`` -> steps; ``2h``, ``30m``, ``90s``, ``1.5h`` -> seconds. One-line errors."""
    cleaned = text.strip().replace("_", "").replace(",", "")
    if cleaned.isdigit():
        steps = int(cleaned)
        if steps <= 0:
            raise UsageError(f"--budget {text}: must be more than 0 training steps")
        return Budget(text.strip(), steps=steps)
    match = _DURATION.match(cleaned)
    if match is None:
        raise UsageError(
            f"--budget {text}: expected training steps (e.g. 5000) or a duration (e.g. 2h, 30m, 90s)"
        )
    seconds = float(match.group(1)) * _SECONDS[match.group(2).lower()]
    if seconds <= 0:
        raise UsageError(f"--budget {text}: a duration must be more than 0")
    return Budget(text.strip(), seconds=seconds)


def steps_for_duration(seconds: float, seconds_per_step: float, workers: int) -> int:
    """A duration as training steps: ``workers`` trials train side by side, each at
    ``seconds_per_step`` (measured over whole trials: start-up and evals included)."""
    return max(0, math.floor(seconds * workers / seconds_per_step))


@dataclass(frozen=True)
class SweepShape:
    """sweep-lr within its share: ``trials`` grid trials of at most ``cap`` steps each."""

    trials: int
    cap: int
    file_cap: int  # sweep_lr.max_steps (or max_train_steps) as the study file gives it

    @property
    def lowered(self) -> bool:
        return self.cap < self.file_cap

    @property
    def upper_bound(self) -> int:
        return self.trials * self.cap


def sweep_shape(budget_steps: int, trials: int, file_cap: int, eval_every: int) -> SweepShape:
    """The sweep's cap within ``SWEEP_SHARE`` of the budget, on the eval grid (a fit is checked
    at evals only); refused when not even one ``eval_every`` per trial fits."""
    share = math.floor(budget_steps * SWEEP_SHARE)
    if trials * file_cap <= share:
        return SweepShape(trials, file_cap, file_cap)
    cap = share // trials // eval_every * eval_every
    if cap < eval_every:
        raise UsageError(
            f"--budget {budget_steps:,} steps is too small for sweep-lr: its {trials} trials need at "
            f"least {trials * eval_every:,} steps (one eval_every of {eval_every} each), {SWEEP_SHARE:.0%} "
            "of the budget at most; raise the budget, or set training.max_train_steps (no sweep)"
        )
    return SweepShape(trials, cap, file_cap)


@dataclass(frozen=True)
class LaterRound:
    """Round N >= 2: ``top_k`` points x ``seeds`` x ``multipliers`` trials of ``steps`` each."""

    number: int
    top_k: int
    seeds: int
    multipliers: int
    steps: int

    @property
    def trials(self) -> int:
        return self.top_k * self.seeds * self.multipliers

    @property
    def cost(self) -> int:
        return self.trials * self.steps

    def to_json(self) -> dict[str, Any]:
        return {
            "round": self.number,
            "top_k": self.top_k,
            "seeds": self.seeds,
            "lr_multipliers": self.multipliers,
            "steps_per_trial": self.steps,
            "trials": self.trials,
            "steps": self.cost,
        }


def fit_later_rounds(
    available: int, rounds: list[LaterRound], *, fill_seeds: bool, round1_trials: int | None = None
) -> list[LaterRound]:
    """The later rounds within ``available`` steps: all but the last as the file has them; the
    last's seeds grow to fill what is left (``fill_seeds``), then its ``top_k`` takes what a
    whole seed more cannot (at most the points the round before has: ``round1_trials``, or the
    previous later round's ``top_k``); if it does not fit, its seeds shrink, then its ``top_k``.
    Raises ``UsageError`` when not even one run of the last round fits."""
    if not rounds:
        return []
    rounds = _within_points(rounds, round1_trials)
    *fixed, last = rounds
    room = available - sum(r.cost for r in fixed)
    per_seed = last.top_k * last.multipliers * last.steps
    seeds = room // per_seed if per_seed else last.seeds
    if not fill_seeds:
        seeds = min(seeds, last.seeds)
    if seeds >= 1:
        top_k = last.top_k
        points = fixed[-1].top_k if fixed else round1_trials
        if fill_seeds and points is not None:
            top_k = max(top_k, min(points, room // (seeds * last.multipliers * last.steps)))
        return [*fixed, replace(last, seeds=seeds, top_k=top_k)]
    top_k = room // (last.multipliers * last.steps)
    if top_k >= 1:
        return [*fixed, replace(last, seeds=1, top_k=min(top_k, last.top_k))]
    need = sum(r.cost for r in fixed) + last.multipliers * last.steps
    raise UsageError(
        f"the budget leaves {max(available, 0):,} steps for the rounds after round 1, and round "
        f"{last.number} needs at least {need:,} (one run of {last.steps} steps); raise --budget"
    )


def _within_points(rounds: list[LaterRound], round1_trials: int | None) -> list[LaterRound]:
    """Each round's ``top_k`` at most the points the round before has: round 1's completed
    trials (``round1_trials``, when known), then the previous round's ``top_k``. Round 1 can
    complete fewer than the file's ``top_k`` when its pruner stopped most of its trials, or
    when some failed; round 2 then trains all it has rather than stop the procedure."""
    points, fitted = round1_trials, []
    for later in rounds:
        if points is not None and later.top_k > points:
            later = replace(later, top_k=max(1, points))
        fitted.append(later)
        points = later.top_k
    return fitted


@dataclass(frozen=True)
class RoundsShape:
    """Round 1's trials and the later rounds, within the steps ``left``."""

    left: int
    round1_trials: int
    round1_steps: int
    later: list[LaterRound]
    reserve: int  # kept for a further search (the report's suggestions applied), else the extra round
    extra_round: int = 0  # kept for the round decided on the last round's report

    @property
    def round1_cost(self) -> int:
        return self.round1_trials * self.round1_steps

    @property
    def total(self) -> int:
        return self.round1_cost + sum(r.cost for r in self.later)


def with_measured_spread(budget: int, later: list[LaterRound]) -> list[LaterRound]:
    """The later rounds with the last one at ``SPREAD_SEEDS`` seeds at least, when that costs no
    more than half of the whole ``budget`` (else as the file has them): one seed measures no
    spread. Of the whole budget, so that every search (the first and the next ones) leaves it."""
    if not later or later[-1].seeds >= SPREAD_SEEDS:
        return later
    seeded = [*later[:-1], replace(later[-1], seeds=SPREAD_SEEDS)]
    return seeded if sum(r.cost for r in seeded) <= budget // 2 else later


def shape_rounds(
    left: int,
    round1_steps: int,
    later: list[LaterRound],
    *,
    keep_reserve: bool,
    min_trials: int = 1,
    budget: int | None = None,
    extra_round: int = 0,
) -> RoundsShape:
    """Round 1's share of ``left`` steps after the later rounds at the file's seeds (2 if half the
    ``budget`` holds them: see the module's rule) and the ``extra_round`` steps kept for the round
    decided on the last one's report. ``keep_reserve``: round 1 takes half, the rest is kept for
    another search. When round 1 would not have its minimum beside the extra round's share, the
    share goes (a search comes before the round that refines it)."""
    spread = with_measured_spread(budget if budget is not None else left, later)
    fitted = fit_later_rounds(left, spread, fill_seeds=False)
    search = left - sum(r.cost for r in fitted) - extra_round
    share = search // 2 if keep_reserve else search
    trials = share // round1_steps
    needed = max(min_trials, fitted[0].top_k if fitted else 1)
    if trials < needed and keep_reserve:  # no room for a second search: round 1 takes it all
        return shape_rounds(
            left,
            round1_steps,
            later,
            keep_reserve=False,
            min_trials=min_trials,
            budget=budget,
            extra_round=extra_round,
        )
    if trials < needed and extra_round:  # no room for the extra round's share: round 1 first
        return shape_rounds(
            left, round1_steps, later, keep_reserve=False, min_trials=min_trials, budget=budget
        )
    if trials < needed:
        raise UsageError(
            f"the budget leaves {max(left, 0):,} steps for the rounds; round 1 needs at least "
            f"{needed} trials of {round1_steps} steps ({needed * round1_steps:,}) besides the later "
            f"rounds' {sum(r.cost for r in fitted):,}; raise --budget"
        )
    reserve = search - trials * round1_steps if keep_reserve else 0
    return RoundsShape(left, trials, round1_steps, fitted, reserve, extra_round)
