"""sweep-lr's verdicts when no LR gives a plain answer, on constructed sweeps whose answers are
known by hand: nothing fits, LRs diverge, trials fail or have not finished yet."""

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
    kinds,
    only,
    trial,
)
from tuner.playbook.sweep_lr import (
    AllDiverged,
    Diverged,
    FastestAtEdge,
    GridTooHigh,
    InfraFailed,
    NothingFits,
    Provisional,
    Recommendation,
    RowOutcome,
    render_lines,
)

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
