"""The analysis half of ``tuner sweep-lr``: the grid, the per-LR table, the verdicts.

The playbook picks a first ``max_train_steps`` from a constant-LR sweep without augmentation or
regularization: the fewest steps any LR needs to fit the training set. This module turns the
sweep's trials into that answer and says, in plain words with the numbers behind them, how far
to trust it (an LR at the grid's edge, nothing fitting, divergence, unfinished trials). It is
pure: no storage, no torch; the phase (trials, storage, CLI) builds :class:`SweepTrial` values
and calls :func:`analyze_sweep` and :func:`render_lines`.

Rules, and why:

- **Steps to fit of an LR** are the median of its seeds' fit steps, shown with the spread
  (min..max) when several seeds fit.
- **Only an LR every seed of which fit can be the fastest**, and it is ranked by its *slowest*
  seed's fit step: the playbook wants a length at which the training set is fit reliably, so the
  recommended length must fit every seed. An LR fit on 1 of 2 seeds is shown ("fit 1 of 2 seeds")
  but never recommended. Ties (fit steps are multiples of ``eval_every``, so ties are common) go
  to the smaller median, then to the smaller LR (further from divergence); an edge warning is
  given when a grid edge is among the tied LRs, since a point beyond it might fit faster.
- **The recommendation** is that slowest-seed fit step rounded up to a multiple of
  ``eval_every`` (a trial's length should end on an evaluation).
- **Infrastructure failures** (crash, OOM, timeout, kill) are not "did not fit": such a seed counts
  as not run, listed in their own verdict; an LR with one is not eligible to be fastest.
- **A trial per (LR, seed)**: when storage holds several (a retry), the final one counts
  (finished > running > not started > failed; then the higher trial number).
- **Unfinished trials** (running, not started) make the result provisional (a verdict says so);
  "nothing fits" is only said once every trial has finished.
- **Every LR diverged** (none fit, none merely ran out of steps): the advice is to go lower
  (``--extend`` adds two points below the grid), never to train longer.

``SweepResult.to_json()`` schema (keys are stable; floats that are NaN/inf become ``null``)::

    {
      "rows": [                       # one per LR, ascending LR
        {"lr": float, "seeds": int,   # seeds expected (or seen, if more)
         "seed_outcomes": [str],      # SweepOutcome per seed index: fit, not_fit, diverged,
                                      #   failed, running, pending
         "fit_steps": [int],          # fit steps of the seeds that fit, ascending
         "median_fit_step": float|null, "spread": [min, max]|null,  # spread: 2+ seeds fit
         "slowest_fit_step": int|null,# the max fit step, only when every seed fit
         "outcome": str,              # RowOutcome: fit, partly_fit, not_fit, diverged, failed,
                                      #   running, pending
         "outcome_text": str,         # e.g. "fit", "fit 1 of 2 seeds, 1 diverged"
         "final_train_loss": float|null,  # median over seeds that report one
         "best_fit_value": float|null}    # best over seeds (in the fit metric's direction)
      ],
      "recommended_max_train_steps": int|null,
      "fastest_lr": float|null,
      "provisional": bool,            # some trials are running or not started
      "verdicts": [                   # kind + the verdict's own fields + "text" + "advice"
        {"kind": "recommendation", "steps", "lr", "fit_step", "eval_every", "text", "advice"},
        {"kind": "fastest_at_edge", "edge": "low"|"high", "lr", "new_points",
         "extended_grid", "text", "advice"},
        {"kind": "fit_at_first_eval", "lr", "fit_step", "eval_every", "text", "advice"},
        {"kind": "nothing_fits", "max_steps", "best_lr", "best_value", "partly_fit_lrs",
         "text", "advice"},
        {"kind": "all_diverged", "lowest_lr", "new_points", "extended_grid", "text", "advice"},
        {"kind": "diverged", "lrs", "threshold_lr", "partial_lrs", "text", "advice"},
        {"kind": "infra_failed", "lrs", "reasons", "text", "advice"},
        {"kind": "provisional", "running", "pending", "text", "advice"}
      ]
    }
"""

from __future__ import annotations

import math
import statistics
import textwrap
from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, ClassVar, Literal

from tuner.errors import UsageError
from tuner.playbook.verdicts import Verdict
from tuner.playbook.verdicts import jsonable as _jsonable

LR_PARAM = "optimizer.lr"
#: Half a decade: the default grid's step, as the playbook's LR sweeps use.
HALF_DECADE = math.sqrt(10.0)
_SIGNIFICANT = 3  # grid points are rounded to 3 significant digits: readable, and stable in YAML
_LR_MATCH = 1e-6  # relative tolerance when matching a trial's LR to a grid point
TABLE_WIDTH = 100
_GAP_WIDTH = 2


# -- the grid ---------------------------------------------------------------------------------


def _round_lr(lr: float) -> float:
    """At most 3 significant digits, fewer when within 0.5%: 0.0099928 is 0.01, not 0.00999."""
    for digits in range(1, _SIGNIFICANT):
        short = float(f"{lr:.{digits}g}")
        if abs(short - lr) <= 0.005 * lr:
            return short
    return float(f"{lr:.{_SIGNIFICANT}g}")


def _snap_ratio(ratio: float) -> float:
    """A ratio within 1% of a sixth-of-a-decade power (x10, x sqrt(10), ...) is taken as exactly that.

    Grid points are rounded, so ``0.000316 / 0.0001`` is 3.16, not sqrt(10); extending by the
    rounded ratio would drift (3.17e-06 three points out). A user's x3 or x2 grid is kept as is.
    """
    sixths = math.log10(ratio) * 6
    if abs(sixths - round(sixths)) * math.log(10) / 6 < 0.01:
        return 10 ** (round(sixths) / 6)
    return ratio


def format_lr(lr: float) -> str:
    """An LR as users read it: ``0.003``, ``0.000316``, ``1e-05``."""
    return f"{lr:.{_SIGNIFICANT}g}"


def default_grid(lr: float) -> list[float]:
    """Five log-spaced points half a decade apart, centred on ``optimizer.lr``.

    ``default_grid(1e-3) == [0.0001, 0.000316, 0.001, 0.00316, 0.01]``: two below and two above, so
    the base LR is tested against a full decade either side.
    """
    if not (lr > 0 and math.isfinite(lr)):
        raise UsageError(f"the default LR grid needs a positive optimizer.lr, got {lr}")
    return [_round_lr(lr * HALF_DECADE**k) for k in (-2, -1, 0, 1, 2)]


def extend_grid(grid: list[float], edge: Literal["low", "high"], count: int = 2) -> list[float]:
    """The next ``count`` points beyond ``edge``, ascending, spaced like the grid at that edge.

    The ratio between the two outermost points at that edge is kept (a user's grid may be
    non-uniform: ``[1e-4, 1e-3, 3e-3]`` extends high by x3 and low by x10).
    """
    points = sorted(grid)
    if len(points) < 2 or points[0] <= 0:
        raise UsageError("extending an LR grid needs at least 2 positive points")
    if count < 1:
        raise UsageError(f"extend the grid by at least 1 point, not {count}")
    if edge == "high":
        ratio = _snap_ratio(points[-1] / points[-2])
        return [_round_lr(points[-1] * ratio**k) for k in range(1, count + 1)]
    if edge == "low":
        ratio = _snap_ratio(points[1] / points[0])
        return [_round_lr(points[0] / ratio**k) for k in range(count, 0, -1)]
    raise UsageError(f"the grid's edge is 'low' or 'high', not {edge!r}")


# -- trials -----------------------------------------------------------------------------------


class SweepOutcome(StrEnum):
    """What one grid trial (one LR, one seed) came to."""

    FIT = "fit"
    NOT_FIT = "not_fit"  # trained to max_steps without meeting the fit criterion
    DIVERGED = "diverged"
    FAILED = "failed"  # infrastructure: crashed, oom, timeout, killed, ...; not "did not fit"
    RUNNING = "running"
    PENDING = "pending"  # not started yet

    @property
    def finished(self) -> bool:
        return self in (SweepOutcome.FIT, SweepOutcome.NOT_FIT, SweepOutcome.DIVERGED)


@dataclass(frozen=True)
class SweepTrial:
    """One grid trial, built by the phase from an Optuna trial (:func:`sweep_trial_from_optuna`)."""

    lr: float
    seed_index: int
    outcome: SweepOutcome
    fit_step: int | None
    steps_trained: int
    final_train_loss: float | None
    best_fit_value: float | None
    number: int | None = None  # the trial's slot, for messages
    failure_reason: str | None = None  # on FAILED / DIVERGED: the worker's failure_reason


def _attr_int(value: Any) -> int | None:
    return None if value is None else int(value)


def _attr_float(value: Any) -> float | None:
    return None if value is None else float(value)


def sweep_trial_from_optuna(trial: Any) -> SweepTrial | None:
    """A :class:`SweepTrial` from an Optuna ``FrozenTrial`` (anything with ``params``, ``state``,
    ``user_attrs``, ``number``); ``None`` for a trial that does not count:

    - a FAIL marked ``retried`` (its retry is another trial, which counts instead);
    - a trial without ``optimizer.lr`` yet (enqueued, not started: the grid shows it as not started).

    COMPLETE is FIT when ``fit_step`` is recorded, else NOT_FIT; FAIL is DIVERGED when
    ``failure_reason == "diverged"``, else FAILED (as is PRUNED, which a sweep never asks for).
    """
    attrs = dict(trial.user_attrs)
    params = dict(trial.params)
    if LR_PARAM not in params:
        return None
    state = getattr(trial.state, "name", str(trial.state)).upper()
    fit_step = _attr_int(attrs.get("fit_step"))
    reason = attrs.get("failure_reason")
    if state == "COMPLETE":
        outcome = SweepOutcome.FIT if fit_step is not None else SweepOutcome.NOT_FIT
    elif state == "FAIL":
        if attrs.get("retried"):
            return None
        outcome = SweepOutcome.DIVERGED if reason == "diverged" else SweepOutcome.FAILED
    elif state == "RUNNING":
        outcome = SweepOutcome.RUNNING
    elif state == "WAITING":
        outcome = SweepOutcome.PENDING
    else:  # PRUNED: nothing in a sweep prunes; count it as not run rather than as "not fit"
        outcome, reason = SweepOutcome.FAILED, reason or state.lower()
    steps = attrs.get("final_step")
    if steps is None and outcome is SweepOutcome.FIT:
        steps = fit_step
    if steps is None and outcome is SweepOutcome.NOT_FIT:
        steps = attrs.get("max_train_steps")
    slot = attrs.get("slot")
    return SweepTrial(
        lr=float(params[LR_PARAM]),
        seed_index=int(attrs.get("seed_index", 0)),
        outcome=outcome,
        fit_step=fit_step if outcome is SweepOutcome.FIT else None,
        steps_trained=int(steps or 0),
        final_train_loss=_attr_float(attrs.get("final_train_loss")),
        best_fit_value=_attr_float(attrs.get("best_fit_value")),
        number=int(slot) if slot is not None else trial.number,
        failure_reason=str(reason) if reason is not None and outcome is not SweepOutcome.FIT else None,
    )


# -- rows -------------------------------------------------------------------------------------


class RowOutcome(StrEnum):
    """One LR's outcome over its seeds."""

    FIT = "fit"  # every seed fit
    PARTLY_FIT = "partly_fit"  # some seeds fit, the others finished (or failed) without fitting
    NOT_FIT = "not_fit"
    DIVERGED = "diverged"  # no seed fit and at least one diverged, none merely "not fit"
    FAILED = "failed"  # every seed failed for infrastructure reasons
    RUNNING = "running"  # some seeds are still running or not started
    PENDING = "pending"  # no seed started


@dataclass(frozen=True)
class SweepRow:
    """One LR of the table (see the module docstring for the rules)."""

    lr: float
    seeds: int
    seed_outcomes: tuple[SweepOutcome, ...]
    fit_steps: list[int]
    median_fit_step: float | None
    spread: tuple[int, int] | None
    slowest_fit_step: int | None  # only when every seed fit: what the recommendation uses
    outcome: RowOutcome
    outcome_text: str
    final_train_loss: float | None
    best_fit_value: float | None
    failure_reasons: tuple[str, ...] = ()

    def count(self, outcome: SweepOutcome) -> int:
        return sum(1 for seed in self.seed_outcomes if seed is outcome)


_PREFERENCE = {
    SweepOutcome.FIT: 3,
    SweepOutcome.NOT_FIT: 3,
    SweepOutcome.DIVERGED: 3,
    SweepOutcome.RUNNING: 2,
    SweepOutcome.PENDING: 1,
    SweepOutcome.FAILED: 0,
}


def _outcome_text(
    counts: dict[SweepOutcome, int], seeds: int, reasons: tuple[str, ...]
) -> tuple[RowOutcome, str]:
    unfinished = counts[SweepOutcome.RUNNING] + counts[SweepOutcome.PENDING]
    failed_word = f"failed ({', '.join(sorted(set(reasons)))})" if reasons else "failed"
    if unfinished:
        if counts[SweepOutcome.PENDING] == seeds:
            return RowOutcome.PENDING, "not started"
        done = seeds - unfinished
        suffix = f" ({done} of {seeds} seeds done)" if seeds > 1 and done else ""
        return RowOutcome.RUNNING, "running" + suffix
    for single, row, word in (
        (SweepOutcome.FIT, RowOutcome.FIT, "fit"),
        (SweepOutcome.NOT_FIT, RowOutcome.NOT_FIT, "not fit"),
        (SweepOutcome.DIVERGED, RowOutcome.DIVERGED, "diverged"),
        (SweepOutcome.FAILED, RowOutcome.FAILED, failed_word),
    ):
        if counts[single] == seeds:
            return row, word
    others = [
        f"{counts[o]} {w}"
        for o, w in (
            (SweepOutcome.NOT_FIT, "not fit"),
            (SweepOutcome.DIVERGED, "diverged"),
            (SweepOutcome.FAILED, "failed"),
        )
        if counts[o]
    ]
    if counts[SweepOutcome.FIT]:
        return RowOutcome.PARTLY_FIT, f"fit {counts[SweepOutcome.FIT]} of {seeds} seeds, " + ", ".join(others)
    row = RowOutcome.NOT_FIT if counts[SweepOutcome.NOT_FIT] else RowOutcome.DIVERGED
    return row, f"{', '.join(others)} (of {seeds} seeds)"


class _Direction:
    """Which fit-metric values are better: given, or read off the trials.

    Without a direction, a fit trial's best value lies on the met side of the threshold, which
    gives it; with no fit trial, every value lies on the unmet side, so the closest to the
    threshold is the best whichever the direction.
    """

    def __init__(self, direction: str | None, threshold: float, trials: Iterable[SweepTrial]) -> None:
        self.threshold = threshold
        if direction is None:
            for trial in trials:
                value = trial.best_fit_value
                if trial.outcome is SweepOutcome.FIT and value is not None and value != threshold:
                    direction = "maximize" if value > threshold else "minimize"
                    break
        self.direction = direction

    def key(self, value: float) -> float:
        """Larger is better."""
        if self.direction == "maximize":
            return value
        if self.direction == "minimize":
            return -value
        return -abs(value - self.threshold)

    def best(self, values: Iterable[float | None]) -> float | None:
        finite = [v for v in values if v is not None and math.isfinite(v)]
        return max(finite, key=self.key) if finite else None

    @property
    def comparator(self) -> str:
        return "<=" if self.direction == "minimize" else ">="


def _build_row(lr: float, by_seed: dict[int, SweepTrial], seeds: int, better: _Direction) -> SweepRow:
    n = max([seeds, *(index + 1 for index in by_seed)])
    outcomes = tuple(by_seed[i].outcome if i in by_seed else SweepOutcome.PENDING for i in range(n))
    chosen = list(by_seed.values())
    fit_steps = sorted(t.fit_step for t in chosen if t.outcome is SweepOutcome.FIT and t.fit_step is not None)
    reasons = tuple(t.failure_reason or "failed" for t in chosen if t.outcome is SweepOutcome.FAILED)
    counts = {o: outcomes.count(o) for o in SweepOutcome}
    outcome, text = _outcome_text(counts, n, reasons)
    losses = [
        t.final_train_loss
        for t in chosen
        if t.final_train_loss is not None and math.isfinite(t.final_train_loss)
    ]
    all_fit = counts[SweepOutcome.FIT] == n and len(fit_steps) == n
    return SweepRow(
        lr=lr,
        seeds=n,
        seed_outcomes=outcomes,
        fit_steps=fit_steps,
        median_fit_step=float(statistics.median(fit_steps)) if fit_steps else None,
        spread=(fit_steps[0], fit_steps[-1]) if len(fit_steps) >= 2 else None,
        slowest_fit_step=fit_steps[-1] if all_fit else None,
        outcome=outcome,
        outcome_text=text,
        final_train_loss=float(statistics.median(losses)) if losses else None,
        best_fit_value=better.best(t.best_fit_value for t in chosen),
        failure_reasons=reasons,
    )


# -- verdicts ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Recommendation(Verdict):
    kind: ClassVar[str] = "recommendation"
    steps: int
    lr: float
    fit_step: int  # the fastest LR's slowest seed's fit step
    eval_every: int


@dataclass(frozen=True)
class FastestAtEdge(Verdict):
    kind: ClassVar[str] = "fastest_at_edge"
    edge: Literal["low", "high"]
    lr: float
    new_points: list[float]  # what ``--extend`` adds
    extended_grid: list[float]  # the whole grid with them


@dataclass(frozen=True)
class FitAtFirstEval(Verdict):
    """The fastest LR fit at the first evaluation: the sweep cannot tell how much sooner."""

    kind: ClassVar[str] = "fit_at_first_eval"
    lr: float
    fit_step: int
    eval_every: int


@dataclass(frozen=True)
class NothingFits(Verdict):
    kind: ClassVar[str] = "nothing_fits"
    max_steps: int
    best_lr: float | None
    best_value: float | None
    partly_fit_lrs: list[float] = field(default_factory=list)  # fit on some seeds only


@dataclass(frozen=True)
class AllDiverged(Verdict):
    """Every LR that finished diverged: the grid sits above what the model trains at, so the
    answer is lower LRs, not longer trials (more steps at a diverging LR diverge too)."""

    kind: ClassVar[str] = "all_diverged"
    lowest_lr: float
    new_points: list[float]  # what ``--extend`` adds below the grid
    extended_grid: list[float]


@dataclass(frozen=True)
class Diverged(Verdict):
    kind: ClassVar[str] = "diverged"
    lrs: list[float]  # LRs on which at least one seed diverged, ascending
    threshold_lr: float | None  # set when exactly the grid points >= it diverged
    partial_lrs: list[float] = field(default_factory=list)  # diverged on some seeds only


@dataclass(frozen=True)
class InfraFailed(Verdict):
    kind: ClassVar[str] = "infra_failed"
    lrs: list[float]
    reasons: list[str]


@dataclass(frozen=True)
class Provisional(Verdict):
    kind: ClassVar[str] = "provisional"
    running: int
    pending: int


def _lrs(lrs: Iterable[float]) -> str:
    return ", ".join(format_lr(lr) for lr in lrs)


def _steps(n: float) -> str:
    return f"{n:g}"


# -- the analysis -----------------------------------------------------------------------------


@dataclass(frozen=True)
class SweepResult:
    rows: list[SweepRow]  # ascending LR
    recommended_max_train_steps: int | None
    fastest_lr: float | None
    verdicts: list[Verdict]

    @property
    def provisional(self) -> bool:
        return any(isinstance(v, Provisional) for v in self.verdicts)

    def verdict(self, kind: type[Verdict]) -> list[Verdict]:
        return [v for v in self.verdicts if isinstance(v, kind)]

    def to_json(self) -> dict[str, Any]:
        """The schema is in the module docstring."""
        rows = []
        for row in self.rows:
            rows.append(
                {
                    "lr": row.lr,
                    "seeds": row.seeds,
                    "seed_outcomes": [str(o) for o in row.seed_outcomes],
                    "fit_steps": list(row.fit_steps),
                    "median_fit_step": row.median_fit_step,
                    "spread": list(row.spread) if row.spread else None,
                    "slowest_fit_step": row.slowest_fit_step,
                    "outcome": str(row.outcome),
                    "outcome_text": row.outcome_text,
                    "final_train_loss": _jsonable(row.final_train_loss),
                    "best_fit_value": _jsonable(row.best_fit_value),
                }
            )
        return {
            "rows": rows,
            "recommended_max_train_steps": self.recommended_max_train_steps,
            "fastest_lr": self.fastest_lr,
            "provisional": self.provisional,
            "verdicts": [v.to_json() for v in self.verdicts],
        }


def _group(trials: Iterable[SweepTrial], grid: list[float]) -> dict[float, dict[int, SweepTrial]]:
    """Trials by grid point (an LR not in the grid gets its own row), one per seed."""
    groups: dict[float, dict[int, SweepTrial]] = {lr: {} for lr in grid}
    for trial in trials:
        lr = next((g for g in groups if math.isclose(g, trial.lr, rel_tol=_LR_MATCH)), trial.lr)
        by_seed = groups.setdefault(lr, {})
        held = by_seed.get(trial.seed_index)
        rank = (_PREFERENCE[trial.outcome], trial.number if trial.number is not None else -1)
        if held is None or rank > (_PREFERENCE[held.outcome], held.number if held.number is not None else -1):
            by_seed[trial.seed_index] = trial
    return groups


def _all_diverged(rows: list[SweepRow]) -> bool:
    """At least one seed diverged and none fit or trained to the cap (infrastructure failures
    count as not run)."""
    return any(row.count(SweepOutcome.DIVERGED) for row in rows) and not any(
        row.count(SweepOutcome.FIT) or row.count(SweepOutcome.NOT_FIT) for row in rows
    )


def analyze_sweep(
    trials: list[SweepTrial],
    *,
    grid: list[float],
    max_steps: int,
    eval_every: int,
    fit_metric: str,
    fit_threshold: float,
    seeds: int = 1,
    direction: Literal["maximize", "minimize"] | None = None,
    study_ref: str = "STUDY",
) -> SweepResult:
    """The table, the recommended ``max_train_steps`` and the verdicts (rules: module docstring).

    ``grid`` is every LR the phase was asked to run (the extension included); ``seeds`` is
    ``sweep_lr.seeds``, so a seed with no trial yet shows as not started. ``direction`` is the fit
    metric's (``tuner.train.metric_direction``); when left out it is read off the trials.
    ``study_ref`` is how the ``--extend`` hint names the study file.
    """
    if eval_every < 1 or max_steps < 1:
        raise UsageError(f"max_steps and eval_every must be positive, got {max_steps} and {eval_every}")
    better = _Direction(direction, fit_threshold, trials)
    groups = _group(trials, grid)
    rows = [_build_row(lr, groups[lr], seeds, better) for lr in sorted(groups)]
    criterion = f"{fit_metric} {better.comparator} {fit_threshold:g}"
    verdicts: list[Verdict] = []

    running = sum(row.count(SweepOutcome.RUNNING) for row in rows)
    pending = sum(row.count(SweepOutcome.PENDING) for row in rows)
    if running or pending:
        parts = [f"{n} {word}" for n, word in ((running, "running"), (pending, "not started")) if n]
        total = sum(row.seeds for row in rows)
        verdicts.append(
            Provisional(
                running=running,
                pending=pending,
                text=f"provisional: {' and '.join(parts)} of {total} grid trials; the verdicts below "
                "may change when they finish",
                advice="re-run the same command to continue the phase",
            )
        )

    eligible = [row for row in rows if row.slowest_fit_step is not None]
    fastest_lr = recommended = None
    if eligible:

        def rank(row: SweepRow) -> tuple[int, float]:
            return (row.slowest_fit_step or 0, row.median_fit_step or 0.0)

        best_rank = min(rank(row) for row in eligible)
        tied = [row for row in eligible if rank(row) == best_rank]
        fastest = tied[0]  # ascending LR: the smallest of the tied, furthest from divergence
        fastest_lr = fastest.lr
        fit_step = fastest.slowest_fit_step or 0
        recommended = math.ceil(fit_step / eval_every) * eval_every
        how = f"in {fit_step} steps"
        if fastest.seeds > 1:
            median = _steps(fastest.median_fit_step or 0)
            how += f" on each of its {fastest.seeds} seeds (the slowest; median {median})"
        rounding = (
            f", rounded up to a multiple of eval_every ({eval_every})"
            if recommended != fit_step
            else f", a multiple of eval_every ({eval_every})"
        )
        verdicts.append(
            Recommendation(
                steps=recommended,
                lr=fastest.lr,
                fit_step=fit_step,
                eval_every=eval_every,
                text=f"max_train_steps = {recommended}: lr {format_lr(fastest.lr)} fit the training set "
                f"({criterion}) {how}{rounding}",
            )
        )
        lows, highs = rows[0].lr, rows[-1].lr
        full_grid = [row.lr for row in rows]
        edges: tuple[tuple[Literal["low", "high"], float, str, str], ...] = (
            ("low", lows, "smallest", "smaller"),
            ("high", highs, "largest", "larger"),
        )
        for edge, edge_lr, word, beyond in edges:
            if any(row.lr == edge_lr for row in tied) and len(rows) >= 2:
                new_points = extend_grid(full_grid, edge, 2)
                among = (
                    "" if len(tied) == 1 else f" (tied with lr {_lrs(r.lr for r in tied if r.lr != edge_lr)})"
                )
                verdicts.append(
                    FastestAtEdge(
                        edge=edge,
                        lr=edge_lr,
                        new_points=new_points,
                        extended_grid=sorted(full_grid + new_points),
                        text=f"the fastest LR to fit, {format_lr(edge_lr)}{among}, is the {word} in the "
                        f"grid: a {beyond} one may fit faster (then fewer than {recommended} steps would do)",
                        advice=f"run lr {_lrs(new_points)} too: tuner sweep-lr {study_ref} --extend",
                    )
                )
        if fit_step <= eval_every:
            verdicts.append(
                FitAtFirstEval(
                    lr=fastest.lr,
                    fit_step=fit_step,
                    eval_every=eval_every,
                    text=f"lr {format_lr(fastest.lr)} fit at the first evaluation (step {fit_step}): "
                    "the sweep cannot tell whether fewer steps suffice",
                    advice="lower training.eval_every for a finer answer",
                )
            )
    elif not (running or pending) and _all_diverged(rows):
        full_grid = [row.lr for row in rows]
        new_points = extend_grid(full_grid, "low", 2) if len(rows) >= 2 else [_round_lr(rows[0].lr / 10)]
        verdicts.append(
            AllDiverged(
                lowest_lr=rows[0].lr,
                new_points=new_points,
                extended_grid=sorted(full_grid + new_points),
                text=f"every LR diverged, down to lr {format_lr(rows[0].lr)} (the smallest in the grid): "
                "the grid is above the learning rates this model trains at, so the sweep cannot tell "
                "how many steps it needs",
                advice=f"go lower: run lr {_lrs(new_points)} too: tuner sweep-lr {study_ref} --extend "
                "(or move sweep_lr.grid down)",
            )
        )
    elif not (running or pending) and any(
        row.count(SweepOutcome.NOT_FIT) or row.count(SweepOutcome.DIVERGED) for row in rows
    ):
        best_value = better.best(row.best_fit_value for row in rows)
        best_row = next(
            (row for row in rows if best_value is not None and row.best_fit_value == best_value), None
        )
        partly = [row.lr for row in rows if row.outcome is RowOutcome.PARTLY_FIT]
        reached = (
            f": the best {fit_metric} reached was {best_value:.4g} (lr {format_lr(best_row.lr)})"
            if best_row is not None and best_value is not None
            else ""
        )
        partial = (
            f"; lr {_lrs(partly)} fit on some seeds only, not reliably enough to set the length"
            if partly
            else ""
        )
        verdicts.append(
            NothingFits(
                max_steps=max_steps,
                best_lr=best_row.lr if best_row is not None else None,
                best_value=best_value,
                partly_fit_lrs=partly,
                text=f"no LR fit the training set ({criterion}) within {max_steps} steps{reached}{partial}. "
                "Either sweep_lr.max_steps is too short or training is compute-bound (the playbook: then "
                "train as long as you can afford, and tune on runs of ~10-25% of that length)",
                advice="set training.max_train_steps to the longest run you can afford and "
                "rounds.round1.steps to about a tenth to a quarter of it "
                "(or raise sweep_lr.max_steps and re-run the sweep)",
            )
        )

    diverged = [row for row in rows if row.count(SweepOutcome.DIVERGED)]
    if diverged:
        lrs = [row.lr for row in diverged]
        partial_lrs = [row.lr for row in diverged if row.outcome is not RowOutcome.DIVERGED]
        above = [row for row in rows if row.lr >= lrs[0]]
        frontier = all(row.outcome is RowOutcome.DIVERGED for row in above) and len(above) == len(diverged)
        threshold = lrs[0] if frontier else None
        share = f"({len(lrs)} of {len(rows)} grid points)"
        if threshold is not None:  # then every diverged LR diverged on all its seeds
            text = f"lr >= {format_lr(threshold)} diverged {share}"
        else:
            listed = ", ".join(
                format_lr(row.lr)
                + (
                    f" ({row.count(SweepOutcome.DIVERGED)} of {row.seeds} seeds)"
                    if row.lr in partial_lrs
                    else ""
                )
                for row in diverged
            )
            text = f"lr {listed} diverged {share}"
        verdicts.append(Diverged(lrs=lrs, threshold_lr=threshold, partial_lrs=partial_lrs, text=text))

    failed = [row for row in rows if row.count(SweepOutcome.FAILED)]
    if failed:
        reasons = sorted({reason for row in failed for reason in row.failure_reasons})
        n = sum(row.count(SweepOutcome.FAILED) for row in failed)
        verdicts.append(
            InfraFailed(
                lrs=[row.lr for row in failed],
                reasons=reasons,
                text=f"{n} grid trial(s) failed for reasons outside training ({', '.join(reasons)}) at lr "
                f"{_lrs(row.lr for row in failed)}: they count as not run, not as not fit, and such an LR "
                "cannot be the recommended one",
                advice="see the trials' logs; re-running the command retries what the retry budget allows",
            )
        )
    return SweepResult(
        rows=rows, recommended_max_train_steps=recommended, fastest_lr=fastest_lr, verdicts=verdicts
    )


# -- rendering --------------------------------------------------------------------------------


def _num(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:.4g}"


def render_lines(result: SweepResult, fit_metric: str, fit_threshold: float, max_steps: int) -> list[str]:
    """The table (at most 100 columns), then each verdict (wrapped), its advice after "->".

    With several seeds, "steps to fit" is the slowest seed's (what the recommendation uses) and
    a column shows the median [min..max]. A long fit-metric name shortens its header to "best
    value"; then "final train loss" to "train loss"; a long outcome wraps onto a continuation line.
    """
    multi = any(row.seeds > 1 for row in result.rows)
    table: list[list[str]] = []
    for row in result.rows:
        if row.slowest_fit_step is not None:
            steps = str(row.slowest_fit_step)
        elif row.outcome in (RowOutcome.NOT_FIT, RowOutcome.PARTLY_FIT):
            steps = f"not within {max_steps} steps"
        else:
            steps = "-"
        cells = [format_lr(row.lr), steps]
        if multi:
            median = "-" if row.median_fit_step is None else _steps(row.median_fit_step)
            if row.spread is not None:
                median += f" [{row.spread[0]}..{row.spread[1]}]"
            cells.append(median)
        cells += [_num(row.final_train_loss), _num(row.best_fit_value), row.outcome_text]
        table.append(cells)
    best = f"best {fit_metric}"
    for best_header, loss_header in (
        (best, "final train loss"),
        ("best value", "final train loss"),
        ("best value", "train loss"),
    ):
        headers = ["lr", "steps to fit (slowest)" if multi else "steps to fit"]
        headers += ["median [min..max]"] if multi else []
        headers += [loss_header, best_header, "outcome"]
        widths = [max([len(headers[i])] + [len(cells[i]) for cells in table]) for i in range(len(headers))]
        room = TABLE_WIDTH - sum(widths[:-1]) - _GAP_WIDTH * (len(widths) - 1)
        if room >= min(widths[-1], 20):
            break
    widths[-1] = max(10, min(widths[-1], room))

    def line(cells: list[str]) -> list[str]:
        *first, last = cells
        parts = textwrap.wrap(last, widths[-1]) or [""]
        head = "  ".join(cell.ljust(width) for cell, width in zip(first, widths, strict=False))
        indent = " " * (len(head) + _GAP_WIDTH)
        return [f"{head}  {parts[0]}".rstrip()] + [indent + part for part in parts[1:]]

    lines = line(headers) + line(["-" * w for w in widths])
    for cells in table:
        lines += line(cells)
    if result.verdicts:
        lines.append("")
    for verdict in result.verdicts:
        lines += textwrap.wrap(verdict.text, TABLE_WIDTH, initial_indent="- ", subsequent_indent="  ")
        if verdict.advice:
            lines += textwrap.wrap(
                verdict.advice, TABLE_WIDTH, initial_indent="  -> ", subsequent_indent="     "
            )
    return lines
