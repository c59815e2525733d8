"""The round after the study file's last, decided on its report (``tuner.playbook.extra_round``),
on constructed cases: its kind, its length on the eval grid and its size within the steps left."""

from __future__ import annotations

import pytest

from tuner.playbook.budget import LaterRound
from tuner.playbook.extra_round import ExtraKind, ExtraRound, shape_extra_round

# round 2 as it ran: 3 points x 2 seeds x 1 LR multiplier of 150 steps (900 steps)
ROUND2 = LaterRound(2, 3, 2, 1, 150)


@pytest.mark.parametrize(
    ("left", "steps"),
    [
        (10_000, 600),  # at most 4x, however much is left
        (1_000, 500),  # the longest 2 seeds hold: 500 each, on the eval grid of 25
        (990, 475),  # 495 a seed, down to the grid
        (450, 225),  # exactly 1.5x, the report's own suggestion: still a longer round
    ],
)
def test_still_improving_trains_the_chosen_point_longer_on_two_seeds(left: int, steps: int) -> None:
    shape = shape_extra_round(left, ROUND2, 25, still_improving=True)
    assert shape == ExtraRound(ExtraKind.LONGER, 3, 1, 2, steps)
    assert shape.cost <= left
    assert shape.sets() == ["rounds.round3.top_k=1", "rounds.round3.seeds=2", f"rounds.round3.steps={steps}"]


def test_a_longer_round_under_1_5x_is_not_worth_it_the_steps_go_to_seeds() -> None:
    # 2 seeds x 200 would be 1.33x: below the report's 1.5x; 449 steps hold 2 points x 1 seed
    assert shape_extra_round(449, ROUND2, 25, still_improving=True) == ExtraRound(
        ExtraKind.SEEDS, 3, 2, 1, 150
    )


@pytest.mark.parametrize(
    ("left", "expected"),
    [
        (2_000, ExtraRound(ExtraKind.SEEDS, 3, 3, 4, 150)),  # 4 new seeds of each of the 3 points
        (450, ExtraRound(ExtraKind.SEEDS, 3, 3, 1, 150)),  # exactly one seed each
        (300, ExtraRound(ExtraKind.SEEDS, 3, 2, 1, 150)),  # less: the best 2 points, one seed each
        (149, None),  # not one run of 150 steps
    ],
)
def test_otherwise_the_points_run_again_on_as_many_new_seeds_as_fit(
    left: int, expected: ExtraRound | None
) -> None:
    assert shape_extra_round(left, ROUND2, 25, still_improving=False) == expected


def test_each_lr_multiplier_of_a_point_is_a_point_of_its_own() -> None:
    # round 2: 2 points x 3 multipliers = 6 points of 100 steps; 1,200 steps: 2 new seeds each
    with_multipliers = LaterRound(2, 2, 1, 3, 100)
    assert shape_extra_round(1_200, with_multipliers, 10, still_improving=False) == ExtraRound(
        ExtraKind.SEEDS, 3, 6, 2, 100
    )


def test_a_round_without_completed_points_has_no_round_after_it() -> None:
    assert shape_extra_round(5_000, LaterRound(2, 0, 2, 1, 150), 25, still_improving=True) is None


def test_no_extra_seeds_leaves_only_the_longer_round() -> None:
    assert shape_extra_round(5_000, ROUND2, 25, still_improving=False, seeds_allowed=False) is None
    longer = shape_extra_round(5_000, ROUND2, 25, still_improving=True, seeds_allowed=False)
    assert longer is not None and longer.kind is ExtraKind.LONGER


def test_the_round_after_a_files_round_3_is_round_4() -> None:
    shape = shape_extra_round(1_000, LaterRound(3, 1, 2, 1, 100), 10, still_improving=True)
    assert shape == ExtraRound(ExtraKind.LONGER, 4, 1, 2, 400)
    assert shape.to_json() == {
        "kind": "longer", "round": 4, "top_k": 1, "seeds": 2, "steps_per_trial": 400, "trials": 2,
        "steps": 800,
    }  # fmt: skip


def test_a_later_round_takes_no_more_points_than_the_round_before_completed() -> None:
    """Round 1 completed 2 trials (its pruner stopped the rest): round 2 trains those 2, not the
    file's 3, and round 3 (top 3 of round 2) no more than round 2's 2; unknown, the file's own."""
    from tuner.playbook.budget import fit_later_rounds

    rounds = [LaterRound(2, 3, 2, 1, 500), LaterRound(3, 3, 2, 1, 500)]
    fitted = fit_later_rounds(100_000, rounds, fill_seeds=False, round1_trials=2)
    assert [(r.number, r.top_k, r.seeds) for r in fitted] == [(2, 2, 2), (3, 2, 2)]
    as_file = fit_later_rounds(100_000, rounds, fill_seeds=False, round1_trials=None)
    assert [(r.top_k, r.seeds) for r in as_file] == [(3, 2), (3, 2)]
