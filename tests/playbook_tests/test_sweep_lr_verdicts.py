"""sweep-lr's analysis on constructed sweeps whose answers are known by hand."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from tuner.playbook.sweep_lr import (
    AllDiverged,
    Diverged,
    FastestAtEdge,
    FitAtFirstEval,
    GridTooHigh,
    InfraFailed,
    NothingFits,
    Provisional,
    Recommendation,
    RowOutcome,
    SweepOutcome,
    SweepTrial,
    analyze_sweep,
    render_lines,
    sweep_trial_from_optuna,
)

GRID = [0.0001, 0.000316, 0.001, 0.00316, 0.01]
FIT, NOT_FIT, DIVERGED, FAILED, RUNNING = (
    SweepOutcome.FIT,
    SweepOutcome.NOT_FIT,
    SweepOutcome.DIVERGED,
    SweepOutcome.FAILED,
    SweepOutcome.RUNNING,
)


def trial(lr: float, outcome: SweepOutcome, fit_step: int | None = None, seed: int = 0, **kw) -> SweepTrial:
    value = kw.pop("value", 1.0 if outcome is FIT else 0.9)
    return SweepTrial(
        lr=lr,
        seed_index=seed,
        outcome=outcome,
        fit_step=fit_step,
        steps_trained=fit_step or 1000,
        final_train_loss=kw.pop("loss", 0.1),
        best_fit_value=value,
        number=kw.pop("number", None),
        failure_reason=kw.pop("reason", None),
        best_step=kw.pop("best_step", None),
    )


def analyze(trials, grid=GRID, **kw):
    options = dict(max_steps=1000, eval_every=100, fit_metric="train/accuracy", fit_threshold=1.0)
    options.update(kw)
    return analyze_sweep(trials, grid=grid, **options)


def only(result, kind):
    found = [v for v in result.verdicts if isinstance(v, kind)]
    assert len(found) == 1, result.verdicts
    return found[0]


def kinds(result):
    return [type(v) for v in result.verdicts]


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


# -- nothing fits, divergence, failures, unfinished ---------------------------------------------


def test_nothing_fits_gives_the_best_value_and_the_compute_bound_path():
    trials = [
        trial(0.0001, NOT_FIT, value=0.62),
        trial(0.000316, NOT_FIT, value=0.81),
        trial(0.001, NOT_FIT, value=0.934),
        trial(0.00316, NOT_FIT, value=0.9),
        trial(0.01, DIVERGED, value=None, loss=float("nan"), reason="diverged"),
    ]
    result = analyze(trials, max_steps=2000)
    assert result.recommended_max_train_steps is None and result.fastest_lr is None
    assert Recommendation not in kinds(result) and FastestAtEdge not in kinds(result)
    nothing = only(result, NothingFits)
    assert (nothing.max_steps, nothing.best_lr, nothing.best_value) == (2000, 0.001, 0.934)
    assert "within 2000 steps" in nothing.text and "0.934 (lr 0.001)" in nothing.text
    assert "training.max_train_steps" in nothing.advice and "rounds.round1.steps" in nothing.advice
    assert any("not within 2000 steps" in line for line in render_lines(result, "train/accuracy", 1.0, 2000))


@pytest.mark.parametrize(
    ("best_step", "length"),
    [(100, 200), (130, 300), (1000, 2000), (1001, None), (1900, None), (None, None)],
)
def test_nothing_fits_with_an_early_best_step_gives_2x_it_at_and_below_half_the_cap(
    best_step: int | None, length: int | None
) -> None:
    """Noisy labels: nothing fits within the cap, but validation was best long before it (at or
    before half of it, inclusive): the length that follows is 2 x that best step, on the eval grid
    (130 -> 260 -> 300), from the LR that came closest to fitting; past half the cap, none."""
    trials = [
        trial(0.0001, NOT_FIT, value=0.62, best_step=1900),
        trial(0.001, NOT_FIT, value=0.934, best_step=best_step),
        trial(0.01, NOT_FIT, value=0.9, best_step=50),
    ]
    nothing = only(analyze(trials, grid=[0.0001, 0.001, 0.01], max_steps=2000), NothingFits)
    assert (nothing.best_lr, nothing.best_step, nothing.noisy_labels_steps) == (0.001, best_step, length)
    said = f"{length} steps (2 x that best step)"
    assert (said in nothing.text) == (length is not None), nothing.text
    assert (f"--set max_train_steps={length}" in nothing.advice) == (length is not None), nothing.advice


def test_lrs_far_too_high_that_never_reach_nan_say_go_lower_not_noisy_labels() -> None:
    """AdamW at 30, 100 and 300: nothing fits, nothing diverges, training accuracy stays at
    chance and the loss at the end rises with the LR (8 -> 185); validation is best at the first
    eval, as in a run that never learned. The sweep says: go lower, not "memorised"."""
    grid = [30.0, 100.0, 300.0]
    trials = [
        trial(30.0, NOT_FIT, value=0.12, loss=8.0, best_step=100),
        trial(100.0, NOT_FIT, value=0.1, loss=41.0, best_step=100),
        trial(300.0, NOT_FIT, value=0.1, loss=185.0, best_step=100),
    ]
    result = analyze(trials, grid=grid, max_steps=2000)
    nothing = only(result, NothingFits)
    assert nothing.noisy_labels_steps is None and "noisy" not in nothing.text
    assert nothing.advice == "go lower first (see below)"
    too_high = only(result, GridTooHigh)
    assert too_high.lowest_lr == 30.0 and max(too_high.new_points) < 30.0
    assert "the training loss at the end rises with the LR (8 at lr 30 to 185 at lr 300)" in too_high.text
    assert too_high.advice.startswith("go lower: run lr ") and "--extend" in too_high.advice


@pytest.mark.parametrize(
    ("values", "losses"),
    [
        ((0.5, 0.7, 0.6), (0.9, 0.4, 0.8)),  # the middle LR is best: the grid brackets it
        ((0.7, 0.6, 0.5), (0.5, 0.4, 0.6)),  # the lowest is best, but the loss does not rise with the LR
        ((0.7, 0.6, 0.5), (0.5, 0.5, 0.5)),  # a flat loss is no evidence either
    ],
)
def test_a_grid_is_too_high_only_when_lower_is_better_all_along(values, losses) -> None:
    grid = [0.001, 0.01, 0.1]
    trials = [
        trial(lr, NOT_FIT, value=value, loss=loss, best_step=100)
        for lr, value, loss in zip(grid, values, losses, strict=True)
    ]
    result = analyze(trials, grid=grid, max_steps=2000)
    assert GridTooHigh not in kinds(result)
    assert only(result, NothingFits).noisy_labels_steps == 200  # the noisy-labels length stands


def test_diverged_above_a_point_is_a_frontier():
    grid = [0.001, 0.00316, 0.01, 0.0316, 0.1, 0.316]
    trials = [trial(0.001, NOT_FIT), trial(0.00316, FIT, 700), trial(0.01, FIT, 400), trial(0.0316, FIT, 600)]
    trials += [trial(lr, DIVERGED, value=None, reason="diverged") for lr in (0.1, 0.316)]
    diverged = only(analyze(trials, grid=grid), Diverged)
    assert (diverged.lrs, diverged.threshold_lr) == ([0.1, 0.316], 0.1)
    assert diverged.text == "lr >= 0.1 diverged (2 of 6 grid points)"


def test_diverged_not_above_a_point_is_listed():
    grid = [0.001, 0.01, 0.1, 1.0]
    trials = [
        trial(0.001, DIVERGED, reason="diverged"),
        trial(0.01, FIT, 400),
        trial(0.1, FIT, 300),
        trial(1.0, DIVERGED, reason="diverged"),
    ]
    diverged = only(analyze(trials, grid=grid), Diverged)
    assert diverged.threshold_lr is None
    assert diverged.text == "lr 0.001, 1 diverged (2 of 4 grid points)"


def test_infrastructure_failures_are_listed_not_counted_as_not_fit():
    trials = [
        trial(0.0001, NOT_FIT),
        trial(0.000316, FIT, 800),
        trial(0.001, FIT, 500),
        trial(0.00316, FAILED, reason="oom"),
        trial(0.01, FIT, 700),
    ]
    result = analyze(trials)
    failed = only(result, InfraFailed)
    assert (failed.lrs, failed.reasons) == ([0.00316], ["oom"])
    assert result.rows[3].outcome is RowOutcome.FAILED and result.rows[3].outcome_text == "failed (oom)"
    assert NothingFits not in kinds(result) and result.recommended_max_train_steps == 500


def test_a_retried_failure_is_replaced_by_its_retry():
    trials = [
        trial(0.0001, NOT_FIT),
        trial(0.001, FAILED, reason="crashed", number=1),
        trial(0.001, FIT, 400, number=5),
        trial(0.01, FIT, 600),
    ]
    result = analyze(trials, grid=[0.0001, 0.001, 0.01])
    assert InfraFailed not in kinds(result) and result.rows[1].outcome is RowOutcome.FIT


def test_running_and_missing_trials_make_the_result_provisional():
    trials = [trial(0.0001, NOT_FIT), trial(0.001, FIT, 500), trial(0.00316, RUNNING)]
    result = analyze(trials)  # 0.000316 and 0.01 have no trial yet
    prov = only(result, Provisional)
    assert (prov.running, prov.pending) == (1, 2)
    assert prov.text.startswith("provisional: 1 running and 2 not started of 5 grid trials")
    assert result.to_json()["provisional"] is True
    assert result.recommended_max_train_steps == 500  # what has finished so far
    assert [row.outcome_text for row in result.rows] == [
        "not fit",
        "not started",
        "fit",
        "running",
        "not started",
    ]


def test_nothing_fits_waits_for_every_trial():
    result = analyze([trial(0.0001, NOT_FIT), trial(0.001, RUNNING)], grid=[0.0001, 0.001, 0.01])
    assert kinds(result) == [Provisional]


# -- from Optuna's trials -----------------------------------------------------------------------


def frozen(state: str, number: int = 0, lr: float | None = 0.001, **attrs):
    return SimpleNamespace(
        number=number,
        state=SimpleNamespace(name=state),
        params={} if lr is None else {"optimizer.lr": lr},
        user_attrs=attrs,
    )


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


# -- output ---------------------------------------------------------------------------------------


def test_every_lr_diverged_says_go_lower_not_train_longer():
    trials = [trial(lr, DIVERGED, value=None, loss=float("nan"), reason="diverged") for lr in GRID]
    result = analyze(trials)
    assert NothingFits not in kinds(result) and result.recommended_max_train_steps is None
    lower = only(result, AllDiverged)
    assert lower.lowest_lr == 0.0001 and lower.new_points == [1e-05, 3.16e-05]
    assert "every LR diverged" in lower.text and "train longer" not in lower.text + lower.advice
    assert "lr 1e-05, 3.16e-05" in lower.advice and "--extend" in lower.advice
    assert only(result, Diverged).threshold_lr == 0.0001


def test_one_lr_not_fit_below_the_diverged_ones_is_still_nothing_fits():
    trials = [trial(0.0001, NOT_FIT)]
    trials += [trial(lr, DIVERGED, value=None, reason="diverged") for lr in GRID[1:]]
    result = analyze(trials)
    assert AllDiverged not in kinds(result) and NothingFits in kinds(result)
