"""A schedule the trial length ``tune`` chose cannot hold, scaled by ``schedule_fit``'s rule: the
segments' steps at the lengths the rounds train, against numbers worked out by hand."""

from __future__ import annotations

from tuner.playbook.schedule_fit import scaled_to_fit
from tuner.spec import ScheduleSegment
from tuner.train.schedules import build_schedule

WARMUP_50 = ScheduleSegment(shape="linear", steps=50, start=0.0, end=1.0)
COSINE_REST = ScheduleSegment(shape="cosine", start=1.0, end=0.0)


def _steps(segments: list[ScheduleSegment], total: int) -> list[int]:
    return [segment.steps for segment in build_schedule(segments, total).segments]


def test_a_schedule_that_fits_is_not_changed() -> None:
    assert scaled_to_fit([WARMUP_50, COSINE_REST], 51) is None  # the cosine keeps one step: it fits
    # fixed steps shorter than the run: the run holds the last value after them
    assert scaled_to_fit([ScheduleSegment(shape="linear", steps=15, start=1.0, end=0.1)], 20) is None


def test_a_warmup_the_run_cannot_hold_takes_half_of_it_as_a_fraction() -> None:
    """The templates' 50-step warmup and a cosine over the rest, at sweep-lr's 20 steps (the
    small-dataset case): the warmup becomes half of each run, the cosine the other half."""
    scaled = scaled_to_fit([WARMUP_50, COSINE_REST], 20)
    assert scaled is not None
    assert scaled.documents() == [
        {"shape": "linear", "fraction": 0.5, "start": 0.0, "end": 1.0},
        {"shape": "cosine", "start": 1.0, "end": 0.0},
    ]
    assert (scaled.fixed_steps, scaled.scaled_steps) == ([50], [10])
    assert scaled.changes() == "linear 50 -> 10 steps"
    assert scaled.as_set().startswith('schedule=[{"shape": "linear", "fraction": 0.5')
    # a fraction: it holds at every length a round trains, shorter or longer
    assert _steps(scaled.segments, 20) == [10, 10]
    assert _steps(scaled.segments, 160) == [80, 80]


def test_fixed_segments_without_a_rest_fill_the_run_in_their_proportions() -> None:
    """A step schedule of 300 + 200 fixed steps, no segment taking the rest, in a run of 20."""
    step_down = [
        ScheduleSegment(shape="constant", steps=300),
        ScheduleSegment(shape="constant", steps=200, start=0.1),
    ]
    scaled = scaled_to_fit(step_down, 20)
    assert scaled is not None
    assert [s.get("fraction") for s in scaled.documents()] == [0.6, 0.4]
    assert _steps(scaled.segments, 20) == [12, 8]
    assert scaled.changes() == "constant 300 -> 12 steps, constant 200 -> 8 steps"


def test_a_fraction_the_file_gives_keeps_its_share_and_the_fixed_steps_share_what_it_leaves() -> None:
    """warmup 50 steps, a constant for 40% of the run, a cosine over the rest, in 20 steps: the
    warmup gets half of the 60% the constant leaves (30%), the cosine the other half."""
    segments = [WARMUP_50, ScheduleSegment(shape="constant", fraction=0.4), COSINE_REST]
    scaled = scaled_to_fit(segments, 20)
    assert scaled is not None
    assert [s.get("fraction") for s in scaled.documents()] == [0.3, 0.4, None]
    assert _steps(scaled.segments, 20) == [6, 8, 6]


def test_no_scaling_holds_a_run_shorter_than_its_segments() -> None:
    assert scaled_to_fit([WARMUP_50, COSINE_REST], 1) is None  # two segments need two steps
