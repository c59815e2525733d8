"""The sweep's verdicts when no LR fit the training set: every LR diverged, or nothing fit within
``sweep_lr.max_steps`` (and then, perhaps, the whole grid sits above the LRs this model trains at).

Apart from ``sweep_lr.py`` (which holds the rules, in its docstring) because these cases read
differently: there is no recommended length, so the advice is where to look next (a lower grid,
a longer cap, or the longest run the user can afford).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from itertools import pairwise
from typing import Literal

from tuner.playbook.sweep_grid import extend_grid, format_lr, round_lr
from tuner.playbook.sweep_result import AllDiverged, GridTooHigh, NothingFits, lrs_text, steps_text
from tuner.playbook.sweep_rows import FitDirection, RowOutcome, SweepOutcome, SweepRow, SweepTrial
from tuner.playbook.verdicts import Verdict

BEST_BEFORE_FIT = 0.5  # the objective's best step at or before half the fit step: said


def _grid_too_high(rows: list[SweepRow], best_row: SweepRow | None) -> bool:
    """``GridTooHigh``: no row diverged, the grid's lowest LR reached the best fit value, and
    every row's final training loss is known and rises (weakly) with the LR, from at least three
    LRs. On a grid that brackets the right LR the loss falls then rises, and the best is inside."""
    if len(rows) < 3 or best_row is None or best_row is not rows[0]:
        return False
    if any(row.count(SweepOutcome.DIVERGED) for row in rows):
        return False
    losses = [row.final_train_loss for row in rows]
    known = [loss for loss in losses if loss is not None and math.isfinite(loss)]
    if len(known) < len(losses):
        return False
    return all(a <= b for a, b in pairwise(known)) and known[-1] > known[0]


def rose_after_best(trials: Iterable[SweepTrial], direction: str) -> bool:
    """The objective got worse after its best step beyond its noise, pooled over the LR's seeds
    (``curve_trend.rise_after_best``); True when the curves were not read or are too short to
    tell, so the best step's position decides alone. On a plateau the best of many equal evals
    lands anywhere on it, before half the fit in about a sixth of runs: the position alone said
    "memorised" there (``benchmarks/calibrate_sweep.py``)."""
    from tuner.playbook.curve_trend import rise_after_best

    curves = [
        (t.best_step, dict(t.curve))
        for t in trials
        if t.best_step is not None and t.curve and t.steps_trained > 0
    ]
    if not curves:
        return True
    length = max(t.steps_trained for t in trials)
    rise = rise_after_best(curves, length, direction)
    return rise.rising or not rise.testable


def _all_diverged(rows: list[SweepRow]) -> bool:
    """At least one seed diverged and none fit or trained to the cap (infrastructure failures
    count as not run)."""
    return any(row.count(SweepOutcome.DIVERGED) for row in rows) and not any(
        row.count(SweepOutcome.FIT) or row.count(SweepOutcome.NOT_FIT) for row in rows
    )


def no_fit_verdicts(
    rows: list[SweepRow],
    groups: Mapping[float, Mapping[int, SweepTrial]],
    better: FitDirection,
    max_steps: int,
    eval_every: int,
    *,
    fit_metric: str,
    criterion: str,
    objective: str,
    objective_direction: Literal["maximize", "minimize"],
    study_ref: str,
) -> list[Verdict]:
    """The verdicts of a finished sweep in which no LR fit on every seed (none when an LR merely
    has a seed left to run: then nothing was refused)."""
    verdicts: list[Verdict] = []
    if _all_diverged(rows):
        full_grid = [row.lr for row in rows]
        new_points = extend_grid(full_grid, "low", 2) if len(rows) >= 2 else [round_lr(rows[0].lr / 10)]
        verdicts.append(
            AllDiverged(
                lowest_lr=rows[0].lr,
                new_points=new_points,
                extended_grid=sorted(full_grid + new_points),
                text=f"every LR diverged, down to lr {format_lr(rows[0].lr)} (the smallest in the grid): "
                "the grid is above the learning rates this model trains at, so the sweep cannot tell "
                "how many steps it needs",
                advice=f"go lower: run lr {lrs_text(new_points)} too: tuner sweep-lr {study_ref} --extend "
                "(or move sweep_lr.grid down)",
            )
        )
        return verdicts
    if not any(row.count(SweepOutcome.NOT_FIT) or row.count(SweepOutcome.DIVERGED) for row in rows):
        return verdicts
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
        f"; lr {lrs_text(partly)} fit on some seeds only, not reliably enough to set the length"
        if partly
        else ""
    )
    best_step = best_row.median_best_step if best_row is not None else None
    too_high = _grid_too_high(rows, best_row)
    noisy = (
        max(eval_every, math.ceil(2 * best_step / eval_every) * eval_every)
        if best_step is not None
        and best_step <= BEST_BEFORE_FIT * max_steps
        and not too_high
        and best_row is not None
        and rose_after_best(groups[best_row.lr].values(), objective_direction)
        else None
    )
    early = (
        f" With lr {format_lr(best_row.lr)}, {objective} was best at step {steps_text(best_step)}, long "
        f"before the cap: more steps memorised rather than generalised (as with noisy labels), so "
        f"{noisy} steps (2 x that best step) is the length that follows"
        if noisy is not None and best_row is not None and best_step is not None
        else ""
    )
    verdicts.append(
        NothingFits(
            max_steps=max_steps,
            best_lr=best_row.lr if best_row is not None else None,
            best_value=best_value,
            partly_fit_lrs=partly,
            best_step=best_step,
            noisy_labels_steps=noisy,
            text=f"no LR fit the training set ({criterion}) within {max_steps} steps{reached}{partial}. "
            + (
                "The grid's LRs are too high to tell (see below)."
                if too_high
                else "Either sweep_lr.max_steps is too short or training is compute-bound (the "
                "playbook: then train as long as you can afford, and tune on runs of ~10-25% of "
                f"that length).{early}"
            ),
            advice="go lower first (see below)"
            if too_high
            else (
                f"if your labels are noisy: --set max_train_steps={noisy}; otherwise set "
                if noisy is not None
                else "set "
            )
            + "training.max_train_steps to the longest run you can afford and "
            "rounds.round1.steps to about a tenth to a quarter of it "
            "(or raise sweep_lr.max_steps and re-run the sweep)",
        )
    )
    if too_high:
        full_grid = [row.lr for row in rows]
        new_points = extend_grid(full_grid, "low", 2)
        losses = [row.final_train_loss for row in rows]
        verdicts.append(
            GridTooHigh(
                lowest_lr=rows[0].lr,
                new_points=new_points,
                extended_grid=sorted(full_grid + new_points),
                text=f"the lower the LR, the better it trained: lr {format_lr(rows[0].lr)} (the "
                f"smallest in the grid) did best, and the training loss at the end rises with the "
                f"LR ({losses[0]:.3g} at lr {format_lr(rows[0].lr)} to {losses[-1]:.3g} at lr "
                f"{format_lr(rows[-1].lr)}): the grid is above the learning rates this model trains at",
                advice=f"go lower: run lr {lrs_text(new_points)} too: tuner sweep-lr {study_ref} "
                "--extend (or move sweep_lr.grid down)",
            )
        )
    return verdicts
