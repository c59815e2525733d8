"""sweep-lr's analysis on constructed sweeps whose answers are known by hand: the fastest LR and
its edge, the recommendation, several seeds, and the trials read from Optuna (when no LR gives a
plain answer: ``test_sweep_lr_nothing_fits.py``)."""

from __future__ import annotations

import pytest

from tests.playbook_tests.sweep_builders import (
    DIVERGED,
    FAILED,
    FIT,
    GRID,
    NOT_FIT,
    RUNNING,
    analyze,
    frozen,
    kinds,
    only,
    trial,
)
from tuner.playbook.sweep_lr import (
    FastestAtEdge,
    FitAtFirstEval,
    NothingFits,
    Recommendation,
    RowOutcome,
    SweepTrial,
    render_lines,
    sweep_trial_from_optuna,
)

# -- the fastest LR and its edge ----------------------------------------------------------------


def test_largest_lr_fastest_warns_with_the_extended_grid():
    trials = [
        trial(0.0001, NOT_FIT),
        trial(0.000316, FIT, 800),
        trial(0.001, FIT, 600),
        trial(0.00316, FIT, 500),
        trial(0.01, FIT, 300),
    ]
    result = analyze(trials, study_ref="study.yaml")
    assert result.fastest_lr == 0.01
    assert result.recommended_max_train_steps == 300
    edge = only(result, FastestAtEdge)
    assert (edge.edge, edge.lr) == ("high", 0.01)
    assert edge.new_points == [0.0316, 0.1]
    assert edge.extended_grid == [*GRID, 0.0316, 0.1]
    assert "0.01" in edge.text and "largest" in edge.text
    assert edge.advice == "run lr 0.0316, 0.1 too: tuner sweep-lr study.yaml --extend"


def test_smallest_lr_fastest_warns_low():
    trials = [trial(lr, FIT, step) for lr, step in zip(GRID, [200, 400, 600, 800, 900], strict=True)]
    result = analyze(trials)
    edge = only(result, FastestAtEdge)
    assert (edge.edge, edge.lr, edge.new_points) == ("low", 0.0001, [1e-05, 3.16e-05])
    assert "smallest" in edge.text


def test_interior_fastest_gives_no_edge_warning():
    trials = [trial(lr, FIT, step) for lr, step in zip(GRID, [900, 600, 400, 500, 700], strict=True)]
    result = analyze(trials)
    assert result.fastest_lr == 0.001
    assert FastestAtEdge not in kinds(result)
    assert kinds(result) == [Recommendation]


def test_a_tie_with_the_edge_still_warns_and_picks_the_smaller_lr():
    trials = [trial(lr, FIT, step) for lr, step in zip(GRID, [900, 700, 500, 400, 400], strict=True)]
    result = analyze(trials)
    assert result.fastest_lr == 0.00316  # tied at 400 steps: the smaller LR is further from divergence
    edge = only(result, FastestAtEdge)
    assert edge.edge == "high" and "tied with lr 0.00316" in edge.text


# -- the recommendation -------------------------------------------------------------------------


@pytest.mark.parametrize(("fit_step", "expected"), [(480, 500), (500, 500), (501, 600)])
def test_recommendation_rounds_up_to_eval_every(fit_step, expected):
    trials = [trial(0.0001, NOT_FIT), trial(0.001, FIT, fit_step), trial(0.01, FIT, 900)]
    result = analyze(trials, grid=[0.0001, 0.001, 0.01])
    assert result.recommended_max_train_steps == expected
    rec = only(result, Recommendation)
    assert (rec.steps, rec.lr, rec.fit_step, rec.eval_every) == (expected, 0.001, fit_step, 100)
    assert rec.text.startswith(
        f"max_train_steps = {expected}: lr 0.001 fit the training set (train/accuracy >= 1)"
    )
    assert f"in {fit_step} steps" in rec.text and "eval_every (100)" in rec.text
    assert ("rounded up" in rec.text) == (fit_step != expected)


def test_minimized_fit_metric_reads_its_direction_off_the_trials():
    trials = [
        trial(0.0001, NOT_FIT, value=0.3),
        trial(0.001, FIT, 400, value=0.01),
        trial(0.01, FIT, 700, value=0.02),
    ]
    result = analyze(trials, grid=[0.0001, 0.001, 0.01], fit_metric="train/loss", fit_threshold=0.05)
    assert "(train/loss <= 0.05)" in only(result, Recommendation).text


def test_fit_at_the_first_eval_says_the_answer_is_coarse():
    result = analyze(
        [trial(0.0001, NOT_FIT), trial(0.001, FIT, 100), trial(0.01, FIT, 300)], grid=[0.0001, 0.001, 0.01]
    )
    first = only(result, FitAtFirstEval)
    assert (first.lr, first.fit_step, first.eval_every) == (0.001, 100, 100)
    assert "eval_every" in (first.advice or "")


# -- several seeds ------------------------------------------------------------------------------


def test_seeds_median_spread_and_the_slowest_seed_rule():
    grid = [0.0001, 0.001, 0.01]
    trials = [
        trial(0.0001, NOT_FIT, seed=0),
        trial(0.0001, NOT_FIT, seed=1),
        trial(0.0001, NOT_FIT, seed=2),
        # lr 0.001: median 400 but one slow seed (700)
        trial(0.001, FIT, 300, seed=0),
        trial(0.001, FIT, 400, seed=1),
        trial(0.001, FIT, 700, seed=2),
        # lr 0.01: median 500, slowest 600: wins on the slowest seed
        trial(0.01, FIT, 500, seed=0),
        trial(0.01, FIT, 600, seed=1),
        trial(0.01, FIT, 450, seed=2),
    ]
    result = analyze(trials, grid=grid, seeds=3)
    row = result.rows[1]
    assert (row.fit_steps, row.median_fit_step, row.spread, row.slowest_fit_step) == (
        [300, 400, 700],
        400.0,
        (300, 700),
        700,
    )
    assert result.fastest_lr == 0.01
    assert result.recommended_max_train_steps == 600
    assert (
        "in 600 steps on each of its 3 seeds (the slowest; median 500)" in only(result, Recommendation).text
    )
    lines = render_lines(result, "train/accuracy", 1.0, 1000)
    assert "median [min..max]" in lines[0]
    assert any(line.startswith("0.001 ") and "400 [300..700]" in line for line in lines)


def test_an_lr_fit_on_some_seeds_only_is_never_the_fastest():
    grid = [0.0001, 0.001, 0.01]
    trials = [
        trial(0.0001, NOT_FIT, seed=0),
        trial(0.0001, NOT_FIT, seed=1),
        trial(0.001, FIT, 200, seed=0),
        trial(0.001, NOT_FIT, seed=1),
        trial(0.01, FIT, 800, seed=0),
        trial(0.01, FIT, 900, seed=1),
    ]
    result = analyze(trials, grid=grid, seeds=2)
    partly = result.rows[1]
    assert partly.outcome is RowOutcome.PARTLY_FIT
    assert partly.outcome_text == "fit 1 of 2 seeds, 1 not fit"
    assert (partly.median_fit_step, partly.slowest_fit_step) == (200.0, None)
    assert result.fastest_lr == 0.01 and result.recommended_max_train_steps == 900


def test_nothing_fit_reliably_names_the_partial_lrs():
    trials = [trial(0.001, FIT, 200, seed=0), trial(0.001, NOT_FIT, seed=1, value=0.97)]
    trials += [trial(lr, NOT_FIT, seed=s, value=0.5) for lr in (0.0001, 0.01) for s in (0, 1)]
    result = analyze(trials, grid=[0.0001, 0.001, 0.01], seeds=2)
    nothing = only(result, NothingFits)
    assert nothing.partly_fit_lrs == [0.001]
    assert result.recommended_max_train_steps is None


# -- from Optuna's trials -----------------------------------------------------------------------


def test_sweep_trial_from_optuna_reads_the_recorded_attributes():
    fit = sweep_trial_from_optuna(
        frozen(
            "COMPLETE",
            3,
            slot=2,
            fit_step=400,
            best_fit_value=1.0,
            final_train_loss=0.01,
            final_step=400,
            seed_index=1,
        )
    )
    assert fit == SweepTrial(0.001, 1, FIT, 400, 400, 0.01, 1.0, number=2)
    not_fit = sweep_trial_from_optuna(frozen("COMPLETE", best_fit_value=0.9, max_train_steps=1000))
    assert (not_fit.outcome, not_fit.fit_step, not_fit.steps_trained, not_fit.seed_index) == (
        NOT_FIT,
        None,
        1000,
        0,
    )
    diverged = sweep_trial_from_optuna(frozen("FAIL", failure_reason="diverged", final_step=30))
    assert (diverged.outcome, diverged.steps_trained) == (DIVERGED, 30)
    oom = sweep_trial_from_optuna(frozen("FAIL", failure_reason="oom"))
    assert (oom.outcome, oom.failure_reason) == (FAILED, "oom")
    assert sweep_trial_from_optuna(frozen("FAIL", failure_reason="crashed", retried=True)) is None
    assert sweep_trial_from_optuna(frozen("RUNNING")).outcome is RUNNING
    assert sweep_trial_from_optuna(frozen("WAITING", lr=None)) is None
