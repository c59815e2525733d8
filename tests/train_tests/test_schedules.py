"""The LR schedule: each shape's formula, length resolution, and the hold after the end."""

from __future__ import annotations

import math

import pytest

from tuner.spec._models import ScheduleSegment
from tuner.train.schedules import ResolvedSegment, build_schedule


@pytest.mark.parametrize("start", [1.0, 0.3])
def test_constant_holds_start_and_end_defaults_to_start(start: float) -> None:
    schedule = build_schedule([ScheduleSegment(shape="constant", start=start)], max_train_steps=20)
    assert [schedule(s) for s in (0, 7, 19, 20, 500)] == [start] * 5
    assert schedule.segments == (ResolvedSegment("constant", 0, 20, start, start),)


def test_linear_interpolates_from_start_towards_zero_by_default() -> None:
    schedule = build_schedule([ScheduleSegment(shape="linear", steps=8, start=2.0)], max_train_steps=8)
    assert [schedule(s) for s in range(8)] == pytest.approx([2.0 - 0.25 * i for i in range(8)])
    assert schedule(8) == 0.0  # past the end: the segment's end value


def test_cosine_follows_half_cosine_between_start_and_end() -> None:
    n = 12
    schedule = build_schedule(
        [ScheduleSegment(shape="cosine", steps=n, start=1.0, end=0.2)], max_train_steps=n
    )
    for i in range(n):
        assert schedule(i) == pytest.approx(0.2 + 0.8 * (1 + math.cos(math.pi * i / n)) / 2)
    assert schedule(n // 2) == pytest.approx(0.6)
    assert schedule(n) == pytest.approx(0.2)


def test_warmup_then_cosine_rest() -> None:
    schedule = build_schedule(
        [
            ScheduleSegment(shape="linear", steps=10, start=0.0, end=1.0),
            ScheduleSegment(shape="cosine"),
        ],
        max_train_steps=100,
    )
    assert schedule.total_steps == 100
    assert [(s.start_step, s.steps) for s in schedule.segments] == [(0, 10), (10, 90)]
    assert schedule(0) == 0.0
    assert schedule(5) == pytest.approx(0.5)
    assert schedule(10) == pytest.approx(1.0)
    assert schedule(55) == pytest.approx(0.5)
    assert 0.0 < schedule(99) < 1e-3
    assert schedule(150) == 0.0
    # Monotone up during warmup, monotone down during decay.
    values = [schedule(s) for s in range(100)]
    assert values[:11] == sorted(values[:11])
    assert values[10:] == sorted(values[10:], reverse=True)


@pytest.mark.parametrize(
    ("fraction", "max_steps", "expected"),
    [(0.1, 100, 10), (0.25, 10, 2), (0.001, 10, 1)],  # round(2.5) == 2; tiny fractions get 1 step
)
def test_fraction_lengths_round_with_a_floor_of_one(fraction: float, max_steps: int, expected: int) -> None:
    schedule = build_schedule(
        [
            ScheduleSegment(shape="linear", fraction=fraction, start=0.0, end=1.0),
            ScheduleSegment(shape="cosine"),
        ],
        max_train_steps=max_steps,
    )
    assert schedule.segments[0].steps == expected
    assert schedule.segments[1].start_step == expected
    assert schedule.total_steps == max_steps


def test_open_segment_takes_the_rest_wherever_it_sits() -> None:
    schedule = build_schedule(
        [
            ScheduleSegment(shape="linear", steps=5, start=0.0, end=1.0),
            ScheduleSegment(shape="constant"),
            ScheduleSegment(shape="cosine", fraction=0.2),
        ],
        max_train_steps=50,
    )
    assert [(s.shape, s.start_step, s.steps) for s in schedule.segments] == [
        ("linear", 0, 5),
        ("constant", 5, 35),
        ("cosine", 40, 10),
    ]
    assert schedule(20) == 1.0
    assert schedule(40) == pytest.approx(1.0)


def test_without_an_open_segment_the_schedule_keeps_its_own_length() -> None:
    schedule = build_schedule([ScheduleSegment(shape="linear", steps=4)], max_train_steps=10)
    assert schedule.total_steps == 4
    assert schedule(6) == 0.0


def test_after_the_last_segment_the_last_end_value_holds() -> None:
    schedule = build_schedule(
        [ScheduleSegment(shape="cosine", steps=10, start=1.0, end=0.05)], max_train_steps=10
    )
    assert schedule(9) > 0.05
    assert [schedule(s) for s in (10, 11, 10_000)] == [0.05, 0.05, 0.05]


@pytest.mark.parametrize(
    "fixed", [[ScheduleSegment(shape="linear", steps=10)], [ScheduleSegment(shape="linear", steps=12)]]
)
def test_open_segment_with_nothing_left_raises(fixed: list[ScheduleSegment]) -> None:
    with pytest.raises(ValueError, match="left over"):
        build_schedule([*fixed, ScheduleSegment(shape="cosine")], max_train_steps=10)


@pytest.mark.parametrize(
    ("fractions", "max_steps", "expected"),
    [
        # by hand: boundaries at round(cumulative fraction x steps), round half to even
        ([0.5, 0.5], 3, [2, 1]),  # 1.5 -> 2, 3 -> 3 (each on its own: 2 + 2 = 4 steps)
        ([0.25, 0.25, 0.5], 10, [2, 3, 5]),  # 2.5 -> 2, 5 -> 5, 10 (each alone: 2 + 2 + 5 = 9)
        ([0.3, 0.3, 0.4], 5, [2, 1, 2]),  # 1.5 -> 2, 3 -> 3, 5 (each alone: 2 + 2 + 2 = 6)
        ([0.1] * 10, 20, [2] * 10),  # no drift from adding 0.1 ten times
    ],
)
def test_fraction_segments_end_on_cumulative_boundaries(
    fractions: list[float], max_steps: int, expected: list[int]
) -> None:
    schedule = build_schedule(
        [ScheduleSegment(shape="linear", fraction=f, start=1.0, end=0.0) for f in fractions], max_steps
    )
    assert [s.steps for s in schedule.segments] == expected
    if sum(expected) == max_steps:
        assert schedule.total_steps == max_steps


def test_decay_reaches_its_end_at_the_last_step() -> None:
    schedule = build_schedule(
        [
            ScheduleSegment(shape="linear", fraction=0.5, start=0.0, end=1.0),
            ScheduleSegment(shape="linear", fraction=0.5, start=1.0, end=0.0),
        ],
        max_train_steps=3,
    )
    assert schedule.total_steps == 3
    assert [schedule(s) for s in range(4)] == [0.0, 0.5, 1.0, 0.0]


def test_fractions_adding_up_to_more_than_one_are_refused() -> None:
    with pytest.raises(ValueError, match=r"add up to 1\.2, more than 1"):
        build_schedule(
            [ScheduleSegment(shape="linear", fraction=0.6), ScheduleSegment(shape="cosine", fraction=0.6)],
            100,
        )


def test_steps_and_fractions_longer_than_the_run_are_refused() -> None:
    with pytest.raises(ValueError, match="add up to 110 steps, more than max_train_steps=100"):
        build_schedule(
            [ScheduleSegment(shape="linear", steps=10), ScheduleSegment(shape="cosine", fraction=1.0)], 100
        )
