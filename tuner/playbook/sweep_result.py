"""sweep-lr's verdicts and the result they make up with the table (the rules behind them are in
``sweep_lr.py``'s docstring, ``SweepResult.to_json``'s schema in its own)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

from tuner.playbook.sweep_grid import format_lr
from tuner.playbook.sweep_rows import SweepRow
from tuner.playbook.verdicts import Verdict
from tuner.playbook.verdicts import jsonable as _jsonable

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
class BestLongBeforeFit(Verdict):
    """The objective was best long before the training set was fit (memorised noise?)."""

    kind: ClassVar[str] = "best_long_before_fit"
    lr: float
    best_step: float  # median over the fastest LR's seeds
    fit_step: int
    noisy_labels_steps: int  # the length that follows if fitting the rest is memorising noise


@dataclass(frozen=True)
class NothingFits(Verdict):
    kind: ClassVar[str] = "nothing_fits"
    max_steps: int
    best_lr: float | None
    best_value: float | None
    partly_fit_lrs: list[float] = field(default_factory=list)  # fit on some seeds only
    # the objective's best step with best_lr (median over its seeds), and, when that is at or
    # before BEST_BEFORE_FIT of max_steps, the length that follows (2 x it): more steps only
    # memorised, so the cap is no answer either (tuner tune trains this length then)
    best_step: float | None = None
    noisy_labels_steps: int | None = None


@dataclass(frozen=True)
class AllDiverged(Verdict):
    """Every LR that finished diverged: the grid sits above what the model trains at, so the
    answer is lower LRs, not longer trials (more steps at a diverging LR diverge too)."""

    kind: ClassVar[str] = "all_diverged"
    lowest_lr: float
    new_points: list[float]  # what ``--extend`` adds below the grid
    extended_grid: list[float]


@dataclass(frozen=True)
class GridTooHigh(Verdict):
    """Nothing fit, nothing diverged, and the lower the LR the better it trained (the lowest LR
    the best, the training loss at the end rising with the LR): the grid sits above what the
    model trains at, as when every LR diverges; an early best step there is no sign of noisy
    labels (a run that never learned is best at its first eval)."""

    kind: ClassVar[str] = "grid_too_high"
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
class StoppedCannotWin(Verdict):
    """LRs stopped without having fit once another LR had fit in fewer steps: they could no
    longer be the fastest, so training them on was spent on nothing."""

    kind: ClassVar[str] = "stopped_cannot_win"
    lrs: list[float]  # ascending
    stopped_at_steps: list[int]  # per LR: the last step its stopped seeds trained (max over them)
    fit_step: int | None  # the fastest LR's fit step (each stop was at or past it)
    steps_saved: int  # at most this many steps were not trained: max_steps - steps trained, summed


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


def lrs_text(lrs: Iterable[float]) -> str:
    return ", ".join(format_lr(lr) for lr in lrs)


def stopped_verdict(
    rows: list[SweepRow], fastest: SweepRow | None, max_steps: int
) -> StoppedCannotWin | None:
    """The LRs stopped because they could not win, if any, and the steps that saved."""
    stopped = [row for row in rows if row.stopped_at_step is not None]
    if not stopped:
        return None
    saved = sum(max(0, max_steps - n) for row in stopped for n in row.stopped_steps)
    fit_step = fastest.slowest_fit_step if fastest is not None else None
    steps = [row.stopped_at_step or 0 for row in stopped]
    at = f"step {steps[0]}" if len(set(steps)) == 1 else f"steps {', '.join(str(n) for n in steps)}"
    were = "was" if len(stopped) == 1 else "were"
    by = f": lr {format_lr(fastest.lr)} fit in {fit_step} steps, so" if fastest is not None else ", so"
    return StoppedCannotWin(
        lrs=[row.lr for row in stopped],
        stopped_at_steps=steps,
        fit_step=fit_step,
        steps_saved=saved,
        text=f"lr {lrs_text(row.lr for row in stopped)} {were} stopped at {at} without having fit"
        f"{by} {'it' if len(stopped) == 1 else 'they'} could no longer be the fastest; steps to fit: "
        f"more than that. Stopping saved up to {saved} steps (of {max_steps}-step caps). Not a "
        f"failure, nor 'not fit within {max_steps} steps'",
    )


def steps_text(n: float) -> str:
    return f"{n:g}"


@dataclass(frozen=True)
class SweepResult:
    rows: list[SweepRow]  # ascending LR
    recommended_max_train_steps: int | None
    fastest_lr: float | None
    verdicts: list[Verdict]

    @property
    def provisional(self) -> bool:
        return any(isinstance(v, Provisional) for v in self.verdicts)

    @property
    def validation_best_early(self) -> BestLongBeforeFit | NothingFits | None:
        """The verdict that saw validation best long before the training set was fit (or, when
        nothing fit, in the first half of the cap: ``noisy_labels_steps``): the sweep's "labels
        are noisy" evidence, where the steps past that best memorised. None without it."""
        return next(
            (
                v
                for v in self.verdicts
                if isinstance(v, BestLongBeforeFit)
                or (isinstance(v, NothingFits) and v.noisy_labels_steps is not None)
            ),
            None,
        )

    def verdict(self, kind: type[Verdict]) -> list[Verdict]:
        return [v for v in self.verdicts if isinstance(v, kind)]

    def to_json(self) -> dict[str, Any]:
        """Stable keys; floats that are NaN/inf become ``null``::

        {
          "rows": [                       # one per LR, ascending LR
            {"lr": float, "seeds": int,   # seeds expected (or seen, if more)
             "seed_outcomes": [str],      # SweepOutcome per seed index: fit, not_fit, diverged,
                                          #   failed, running, pending, cannot_win
             "fit_steps": [int],          # fit steps of the seeds that fit, ascending
             "median_fit_step": float|null, "spread": [min, max]|null,  # spread: 2+ seeds fit
             "slowest_fit_step": int|null,# the max fit step, only when every seed fit
             "stopped_at_step": int|null, # stopped (cannot win) seeds: the last step they trained
             "outcome": str,              # RowOutcome: fit, partly_fit, not_fit, diverged, failed,
                                          #   cannot_win, running, pending
             "outcome_text": str,         # e.g. "fit", "fit 1 of 2 seeds, 1 diverged"
             "final_train_loss": float|null,  # median over seeds that report one
             "best_fit_value": float|null,    # best over seeds (in the fit metric's direction)
             "median_best_step": float|null}  # where the objective was best, median over seeds
          ],
          "recommended_max_train_steps": int|null,
          "fastest_lr": float|null,
          "provisional": bool,            # some trials are running or not started
          "verdicts": [                   # kind + the verdict's own fields + "text" + "advice"
            {"kind": "recommendation", "steps", "lr", "fit_step", "eval_every", "text", "advice"},
            {"kind": "fastest_at_edge", "edge": "low"|"high", "lr", "new_points",
             "extended_grid", "text", "advice"},
            {"kind": "fit_at_first_eval", "lr", "fit_step", "eval_every", "text", "advice"},
            {"kind": "best_long_before_fit", "lr", "best_step", "fit_step", "noisy_labels_steps",
             "text", "advice"},
            {"kind": "nothing_fits", "max_steps", "best_lr", "best_value", "partly_fit_lrs",
             "best_step", "noisy_labels_steps", "text", "advice"},  # the last two: null unless the
                                          #   objective was best at or before half of max_steps
                                          #   (and the grid is not too high: grid_too_high)
            {"kind": "all_diverged", "lowest_lr", "new_points", "extended_grid", "text", "advice"},
            {"kind": "grid_too_high", "lowest_lr", "new_points", "extended_grid", "text", "advice"},
            {"kind": "diverged", "lrs", "threshold_lr", "partial_lrs", "text", "advice"},
            {"kind": "stopped_cannot_win", "lrs", "stopped_at_steps", "fit_step", "steps_saved",
             "text", "advice"},
            {"kind": "infra_failed", "lrs", "reasons", "text", "advice"},
            {"kind": "provisional", "running", "pending", "text", "advice"}
          ]
        }
        """
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
                    "median_best_step": row.median_best_step,
                    "stopped_at_step": row.stopped_at_step,
                }
            )
        return {
            "rows": rows,
            "recommended_max_train_steps": self.recommended_max_train_steps,
            "fastest_lr": self.fastest_lr,
            "provisional": self.provisional,
            "verdicts": [v.to_json() for v in self.verdicts],
        }
