"""The analysis half of ``tuner sweep-lr``: the grid, the per-LR table, the verdicts.

The playbook picks a first ``max_train_steps`` from a constant-LR sweep without augmentation or
regularization: the fewest steps any LR needs to fit the training set. This module turns the
sweep's trials into that answer and says, in plain words with the numbers behind them, how far
to trust it (an LR at the grid's edge, nothing fitting, divergence, unfinished trials). It is
pure: no storage, no torch; the phase (trials, storage, CLI) builds :class:`SweepTrial` values
and calls :func:`analyze_sweep` and :func:`render_lines`. Its parts: ``sweep_grid.py`` (the LRs),
``sweep_rows.py`` (trials and rows), ``sweep_result.py`` (verdicts), ``sweep_table.py`` (text),
``sweep_no_fit.py`` (the verdicts when no LR fit).

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
- **Stopped because it cannot win**: once an LR has fit on every seed by step ``s``, any seed
  of another LR still training at an evaluation at or past ``s`` without having fit is stopped
  there (``sweep_phase.fit_step_to_beat``): it would fit later if ever, so its LR's slowest seed
  could neither beat nor tie ``s``. Such a seed is neither "not fit" (it did not reach the cap)
  nor a failure; the table shows "over N" steps to fit. Only the fastest LR and the LRs tied
  with it make the recommendation and the edge and best-step verdicts, so stops change none
  of them; "nothing fits" cannot follow a stop (an LR had fit).
- **Infrastructure failures** (crash, OOM, timeout, kill) are not "did not fit": such a seed counts
  as not run, listed in their own verdict; an LR with one is not eligible to be fastest.
- **A trial per (LR, seed)**: when storage holds several (a retry), the final one counts
  (finished > running > not started > failed; then the higher trial number).
- **Unfinished trials** (running, not started) make the result provisional (a verdict says so);
  "nothing fits" is only said once every trial has finished.
- **Every LR diverged** (none fit, none merely ran out of steps): the advice is to go lower
  (``--extend`` adds two points below the grid), never to train longer.
- **Validation best long before the fit**: when the fastest LR's objective (validation) was best
  at or before ``BEST_BEFORE_FIT`` (half) of its fit step (median over its seeds), the rest of the
  way to fitting the training set did not generalise: with noisy labels, fitting them is
  memorising noise, provided the objective got worse after that best beyond its noise where the
  runs' curves are read (a pooled slope, ``curve_trend``): on a plateau the best eval lands
  anywhere by noise. The recommendation stays the fit step (the playbook's rule); the verdict
  says so in one line, with the length that follows if the labels are noisy (2 x the best step,
  on the eval grid) and why; the report's best-step verdict checks it again after round 1.

``SweepResult.to_json()``'s schema is in its docstring (``sweep_result.py``).
"""

from __future__ import annotations

import math
from typing import Literal

from tuner.errors import UsageError
from tuner.playbook.sweep_grid import (
    HALF_DECADE,
    LR_PARAM,
    default_grid,
    extend_grid,
    format_lr,
)
from tuner.playbook.sweep_no_fit import BEST_BEFORE_FIT, no_fit_verdicts, rose_after_best
from tuner.playbook.sweep_result import (
    AllDiverged,
    BestLongBeforeFit,
    Diverged,
    FastestAtEdge,
    FitAtFirstEval,
    GridTooHigh,
    InfraFailed,
    NothingFits,
    Provisional,
    Recommendation,
    StoppedCannotWin,
    SweepResult,
    lrs_text,
    steps_text,
    stopped_verdict,
)
from tuner.playbook.sweep_rows import (
    FitDirection,
    RowOutcome,
    SweepOutcome,
    SweepRow,
    SweepTrial,
    build_row,
    group_trials,
    sweep_trial_from_optuna,
)
from tuner.playbook.sweep_table import TABLE_WIDTH, render_lines
from tuner.playbook.verdicts import Verdict

#: The analysis lives here; its parts (grid, rows, verdicts, table) in the modules above, whose
#: names stay importable from here.
__all__ = [
    "HALF_DECADE",
    "LR_PARAM",
    "TABLE_WIDTH",
    "AllDiverged",
    "BestLongBeforeFit",
    "Diverged",
    "FastestAtEdge",
    "FitAtFirstEval",
    "GridTooHigh",
    "InfraFailed",
    "NothingFits",
    "Provisional",
    "Recommendation",
    "RowOutcome",
    "StoppedCannotWin",
    "SweepOutcome",
    "SweepResult",
    "SweepRow",
    "SweepTrial",
    "analyze_sweep",
    "default_grid",
    "extend_grid",
    "format_lr",
    "render_lines",
    "sweep_trial_from_optuna",
]


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
    objective: str = "the objective",
    objective_direction: Literal["maximize", "minimize"] = "minimize",
) -> SweepResult:
    """The table, the recommended ``max_train_steps`` and the verdicts (rules: module docstring).

    ``grid`` is every LR the phase was asked to run (the extension included); ``seeds`` is
    ``sweep_lr.seeds``, so a seed with no trial yet shows as not started. ``direction`` is the fit
    metric's (``tuner.train.metric_direction``); when left out it is read off the trials.
    ``study_ref`` is how the ``--extend`` hint names the study file.
    """
    if eval_every < 1 or max_steps < 1:
        raise UsageError(f"max_steps and eval_every must be positive, got {max_steps} and {eval_every}")
    better = FitDirection(direction, fit_threshold, trials)
    groups = group_trials(trials, grid)
    rows = [build_row(lr, groups[lr], seeds, better) for lr in sorted(groups)]
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
    fastest_row: SweepRow | None = None
    if eligible:

        def rank(row: SweepRow) -> tuple[int, float]:
            return (row.slowest_fit_step or 0, row.median_fit_step or 0.0)

        best_rank = min(rank(row) for row in eligible)
        tied = [row for row in eligible if rank(row) == best_rank]
        fastest = fastest_row = tied[0]  # ascending LR: the smallest of the tied, furthest from divergence
        fastest_lr = fastest.lr
        fit_step = fastest.slowest_fit_step or 0
        recommended = math.ceil(fit_step / eval_every) * eval_every
        how = f"in {fit_step} steps"
        if fastest.seeds > 1:
            median = steps_text(fastest.median_fit_step or 0)
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
                others = lrs_text(r.lr for r in tied if r.lr != edge_lr)
                among = "" if len(tied) == 1 else f" (tied with lr {others})"
                verdicts.append(
                    FastestAtEdge(
                        edge=edge,
                        lr=edge_lr,
                        new_points=new_points,
                        extended_grid=sorted(full_grid + new_points),
                        text=f"the fastest LR to fit, {format_lr(edge_lr)}{among}, is the {word} in the "
                        f"grid: a {beyond} one may fit faster (then fewer than {recommended} steps would do)",
                        advice=f"run lr {lrs_text(new_points)} too: tuner sweep-lr {study_ref} --extend",
                    )
                )
        best_step = fastest.median_best_step
        if (
            best_step is not None
            and best_step <= BEST_BEFORE_FIT * fit_step
            and rose_after_best(groups[fastest.lr].values(), objective_direction)
        ):
            noisy = max(eval_every, math.ceil(2 * best_step / eval_every) * eval_every)
            verdicts.append(
                BestLongBeforeFit(
                    lr=fastest.lr,
                    best_step=best_step,
                    fit_step=fit_step,
                    noisy_labels_steps=noisy,
                    text=f"{objective} was best at step {steps_text(best_step)} with lr "
                    f"{format_lr(fastest.lr)}, long before the training set was fit (step {fit_step}): "
                    "what it learned after that did not generalise, as when labels are noisy and fitting "
                    "them is memorising them",
                    advice=f"max_train_steps stays {recommended} (the playbook's rule: the fewest steps to "
                    f"fit); if your labels are noisy, {noisy} steps (2 x that best step) is the length that "
                    f"follows: --set max_train_steps={noisy}; round 1's report checks it again",
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
    elif not (running or pending):
        verdicts += no_fit_verdicts(
            rows,
            groups,
            better,
            max_steps,
            eval_every,
            fit_metric=fit_metric,
            criterion=criterion,
            objective=objective,
            objective_direction=objective_direction,
            study_ref=study_ref,
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

    stopped = stopped_verdict(rows, fastest_row, max_steps)
    if stopped is not None:
        verdicts.append(stopped)

    failed = [row for row in rows if row.count(SweepOutcome.FAILED)]
    if failed:
        reasons = sorted({reason for row in failed for reason in row.failure_reasons})
        n = sum(row.count(SweepOutcome.FAILED) for row in failed)
        verdicts.append(
            InfraFailed(
                lrs=[row.lr for row in failed],
                reasons=reasons,
                text=f"{n} grid trial(s) failed for reasons outside training ({', '.join(reasons)}) at lr "
                f"{lrs_text(row.lr for row in failed)}: they count as not run, not as not fit, and such an "
                "LR cannot be the recommended one",
                advice="see the trials' logs; re-running the command retries what the retry budget allows",
            )
        )
    return SweepResult(
        rows=rows, recommended_max_train_steps=recommended, fastest_lr=fastest_lr, verdicts=verdicts
    )
