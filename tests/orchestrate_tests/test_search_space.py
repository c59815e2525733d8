"""Quasi-random round-1 points: inside the space, spread out, reproducible, Optuna-storable."""

from __future__ import annotations

import math

import pytest

from tuner.orchestrate import distributions, quasi_random_point, random_point
from tuner.orchestrate.search_space import _scrambled_halton, to_config_values
from tuner.spec import CategoricalParam, FloatParam, IntParam

SPACE = {
    "optimizer.lr": FloatParam(type="float", low=1e-4, high=1e-1, log=True),
    "optimizer.momentum": FloatParam(type="float", low=0.8, high=0.99),
    "batch_size": IntParam(type="int", low=16, high=128, step=16),
    "workload.hidden_sizes": CategoricalParam(type="categorical", choices=[[64], [128, 64]]),
}


def test_points_lie_in_the_space_and_fit_optunas_distributions() -> None:
    dists = distributions(SPACE)
    for index in range(32):
        point = quasi_random_point(SPACE, index, seed=3)
        for key, value in point.items():
            assert dists[key]._contains(dists[key].to_internal_repr(value)), (key, value)
        assert (point["batch_size"] - 16) % 16 == 0


def test_the_sequence_is_reproducible_and_continues_where_it_stopped() -> None:
    first = [quasi_random_point(SPACE, i, seed=0) for i in range(8)]
    assert first == [quasi_random_point(SPACE, i, seed=0) for i in range(8)]
    assert first != [quasi_random_point(SPACE, i, seed=1) for i in range(8)]
    assert len({p["optimizer.lr"] for p in first}) == 8
    assert random_point(SPACE, 5, seed=0) == random_point(SPACE, 5, seed=0)


@pytest.mark.parametrize(("dimensions", "seed"), [(1, 0), (4, 7), (9, 2**31 - 1)])
def test_the_halton_points_are_scipys_bit_for_bit(dimensions: int, seed: int) -> None:
    qmc = pytest.importorskip("scipy.stats.qmc")
    expected = qmc.Halton(d=dimensions, scramble=True, seed=seed).random(40)
    points = [_scrambled_halton(dimensions, index, seed) for index in range(40)]
    assert points == expected.tolist()


def test_quasi_random_covers_a_log_range_evenly() -> None:
    logs = sorted(math.log10(quasi_random_point(SPACE, i, seed=0)["optimizer.lr"]) for i in range(16))
    # each of the three decades 1e-4..1e-1 holds between 3 and 8 of 16 points
    for low in (-4, -3, -2):
        assert 3 <= sum(low <= x < low + 1 for x in logs) <= 8, logs


def test_list_choices_travel_through_optuna_as_text_and_come_back_as_lists() -> None:
    stored = quasi_random_point(SPACE, 0, seed=0)["workload.hidden_sizes"]
    assert isinstance(stored, str)
    assert to_config_values(SPACE, {"workload.hidden_sizes": stored})["workload.hidden_sizes"] in (
        [64],
        [128, 64],
    )
