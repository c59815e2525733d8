"""Round 2's schedule extension: the LR at chosen steps against numbers worked out by hand.

Every case starts from round 1's schedule as ``build_schedule`` resolves it at round 1's length,
extends it, builds the extended segments at the new length (as a round-2 trial does) and reads
the multiplier at steps picked around the segment boundaries.
"""

from __future__ import annotations

import math

import pytest

from tuner.playbook.schedule_extension import extend_schedule, resolved_segments
from tuner.spec._models import ScheduleSegment
from tuner.train.schedules import Schedule, build_schedule

WARMUP_50 = ScheduleSegment(shape="linear", steps=50, start=0.0, end=1.0)


def _extended(
    segments: list[ScheduleSegment], round1_steps: int, new_total: int
) -> tuple[Schedule, list[str]]:
    extended = extend_schedule(build_schedule(segments, round1_steps), new_total)
    assert all(seg.steps is not None and seg.fraction is None for seg in extended.segments)
    assert sum(seg.steps or 0 for seg in extended.segments) == new_total
    schedule = build_schedule(extended.segments, new_total)
    assert schedule.total_steps == new_total
    return schedule, extended.notes


def _lengths(schedule: Schedule) -> list[int]:
    return [seg.steps for seg in schedule.segments]


def test_warmup_constant_linear_decay_grows_the_constant_only() -> None:
    # Round 1: 240 steps = warmup 50 + constant 70 (the open segment) + decay 120.
    round1 = [
        WARMUP_50,
        ScheduleSegment(shape="constant"),
        ScheduleSegment(shape="linear", steps=120, start=1.0, end=0.0),
    ]
    schedule, notes = _extended(round1, 240, 2520)
    assert _lengths(schedule) == [50, 2350, 120]
    expected = {
        0: 0.0,
        25: 0.5,
        49: 0.98,
        50: 1.0,
        1000: 1.0,
        2399: 1.0,  # last constant step
        2400: 1.0,  # decay step 0 of 120
        2430: 0.75,  # 1 - 30/120
        2460: 0.5,
        2519: 1 / 120,
        2520: 0.0,  # past the end: holds the end value
    }
    assert {s: schedule(s) for s in expected} == pytest.approx(expected)
    assert notes == [
        "warmup kept at 50 steps",
        "linear decay kept at 120 steps",
        "constant phase at 1x grown from 70 to 2350 steps so the linear decay keeps its 120 steps "
        "(the extra steps train at the peak LR)",
    ]


def test_warmup_cosine_keeps_warmup_and_stretches_the_cosine_horizon() -> None:
    # Round 1: 80 steps = warmup 10 + cosine 1 -> 0.1 over 70.
    round1 = [
        ScheduleSegment(shape="linear", steps=10, start=0.0, end=1.0),
        ScheduleSegment(shape="cosine", start=1.0, end=0.1),
    ]
    schedule, notes = _extended(round1, 80, 400)
    assert _lengths(schedule) == [10, 390]
    expected = {
        5: 0.5,
        10: 1.0,  # cosine i=0: its start multiplier
        140: 0.775,  # i=130=390/3: 0.1 + 0.9 * (1 + cos(pi/3)) / 2 = 0.1 + 0.9 * 0.75
        205: 0.55,  # i=195, half way: 0.1 + 0.9 * 0.5
        400: 0.1,  # the end multiplier is kept
    }
    assert {s: schedule(s) for s in expected} == pytest.approx(expected)
    assert notes == [
        "warmup kept at 10 steps",
        "cosine decay stretched from 70 to 390 steps (same start and end multipliers)",
    ]


def test_constant_only_stays_constant_for_the_new_length() -> None:
    schedule, notes = _extended([ScheduleSegment(shape="constant", start=0.5)], 100, 1000)
    assert _lengths(schedule) == [1000]
    assert [schedule(s) for s in (0, 99, 100, 999)] == [0.5] * 4
    assert notes == ["constant schedule: constant for 1000 steps"]


def test_linear_decay_without_a_constant_before_it_gets_one_at_the_peak() -> None:
    # Round 1: 100 steps = warmup 20 + decay 1 -> 0 over 80. Stretching the decay to 480 would
    # spend 5x the steps below 0.1x (the playbook's pitfall); 002 keeps the decay's length and
    # grows a constant phase at the start of it instead.
    round1 = [
        ScheduleSegment(shape="linear", steps=20, start=0.0, end=1.0),
        ScheduleSegment(shape="linear", start=1.0, end=0.0),
    ]
    schedule, notes = _extended(round1, 100, 500)
    assert _lengths(schedule) == [20, 400, 80]
    expected = {10: 0.5, 20: 1.0, 419: 1.0, 420: 1.0, 440: 0.75, 460: 0.5, 499: 1 / 80, 500: 0.0}
    assert {s: schedule(s) for s in expected} == pytest.approx(expected)
    assert notes == [
        "warmup kept at 20 steps",
        "linear decay kept at 80 steps",
        "constant phase at 1x (the peak) of 400 steps inserted before the linear decay: "
        "the extra steps train at the peak LR",
    ]


def test_fraction_warmup_resolved_at_round1_length_keeps_its_steps() -> None:
    # Round 1 at 120 steps: warmup = 0.1 * 120 = 12 steps, cosine 1 -> 0 the other 108.
    # Re-resolving the fraction at 600 would give a 60-step warmup; the extension keeps 12.
    round1 = [
        ScheduleSegment(shape="linear", fraction=0.1, start=0.0, end=1.0),
        ScheduleSegment(shape="cosine", start=1.0, end=0.0),
    ]
    schedule, notes = _extended(round1, 120, 600)
    assert _lengths(schedule) == [12, 588]
    expected = {
        6: 0.5,
        11: 11 / 12,
        12: 1.0,
        159: (1 + math.sqrt(0.5)) / 2,  # i=147=588/4: (1 + cos(pi/4)) / 2 = 0.853553...
        306: 0.5,  # i=294, half way
        600: 0.0,
    }
    assert {s: schedule(s) for s in expected} == pytest.approx(expected)
    assert build_schedule(round1, 600)(30) == pytest.approx(0.5)  # what re-resolving would do
    assert notes == [
        "warmup kept at 12 steps",
        "cosine decay stretched from 108 to 588 steps (same start and end multipliers)",
    ]


def test_a_warmup_with_a_held_tail_keeps_its_length_and_the_hold_grows() -> None:
    # Round 1 ran 200 steps on a 50-step warmup: steps 50..199 held 1.0.
    schedule, notes = _extended([WARMUP_50], 200, 1000)
    assert _lengths(schedule) == [50, 950]
    expected = {25: 0.5, 50: 1.0, 500: 1.0, 999: 1.0}
    assert {s: schedule(s) for s in expected} == pytest.approx(expected)
    assert notes[0] == "warmup kept at 50 steps"
    assert "holds 1" in notes[1] and "950 steps" in notes[1]


def test_a_decay_with_a_held_tail_ends_at_the_new_length() -> None:
    # Round 1: warmup 10 + decay 40 = 50 steps of a 100-step run (the last 50 held 0). The held
    # tail is left over, not grown: the 150 extra steps train at the peak, the decay keeps 40.
    round1 = [
        ScheduleSegment(shape="linear", steps=10, start=0.0, end=1.0),
        ScheduleSegment(shape="linear", steps=40, start=1.0, end=0.0),
    ]
    schedule, _ = _extended(round1, 100, 200)
    assert _lengths(schedule) == [10, 150, 40]
    assert schedule(159) == 1.0 and schedule(180) == pytest.approx(0.5)  # 1 - 20/40


def test_a_step_schedule_grows_its_first_step_at_the_peak() -> None:
    # A step schedule: 1.0 for 100 steps, then 0.1 for 50. Growing the last step (as before)
    # spent every extra step at 0.1x: the playbook's pitfall.
    round1 = [
        ScheduleSegment(shape="constant", steps=100, start=1.0),
        ScheduleSegment(shape="constant", steps=50, start=0.1),
    ]
    schedule, notes = _extended(round1, 150, 300)
    assert _lengths(schedule) == [250, 50]
    assert [schedule(s) for s in (249, 250, 299)] == pytest.approx([1.0, 0.1, 0.1])
    assert notes == [
        "constant phase at 0.1x kept at 50 steps",
        "constant phase at 1x grown from 100 to 250 steps so the constant phase at 0.1x keeps its "
        "50 steps (the extra steps train at the peak LR)",
    ]


def test_shrinking_shrinks_the_absorbing_segment() -> None:
    round1 = [
        WARMUP_50,
        ScheduleSegment(shape="constant", steps=70),
        ScheduleSegment(shape="linear", steps=120, start=1.0, end=0.0),
    ]
    schedule, notes = _extended(round1, 240, 200)
    assert _lengths(schedule) == [50, 30, 120]
    assert schedule(80) == pytest.approx(1.0) and schedule(140) == pytest.approx(0.5)
    assert (
        notes[-1] == "constant phase at 1x shrunk from 70 to 30 steps so the linear decay keeps its 120 steps"
    )


def test_shrinking_below_one_step_scales_every_segment() -> None:
    round1 = [
        ScheduleSegment(shape="constant", steps=10),
        ScheduleSegment(shape="linear", steps=90, start=1.0, end=0.0),
    ]
    # The constant cannot give up 50 steps: both scale by 1/2 -> 5 + 45.
    schedule, notes = _extended(round1, 100, 50)
    assert _lengths(schedule) == [5, 45]
    assert schedule(4) == 1.0 and schedule(14) == pytest.approx(0.8)  # 1 - 9/45
    assert notes[0].startswith("schedule shrunk from 100 to 50 steps")
    # Cumulative rounding: 3 equal segments of 7 steps into 10 -> boundaries 3, 7, 10.
    thirds = [ScheduleSegment(shape="constant", steps=7, start=v) for v in (1.0, 0.5, 0.25)]
    assert _lengths(_extended(thirds, 21, 10)[0]) == [3, 4, 3]
    assert _lengths(_extended(thirds, 21, 3)[0]) == [1, 1, 1]


def test_fewer_steps_than_segments_or_none_is_refused() -> None:
    schedule = build_schedule([WARMUP_50, ScheduleSegment(shape="cosine")], 100)
    with pytest.raises(ValueError, match="2 segments into 1 steps"):
        extend_schedule(schedule, 1)
    with pytest.raises(ValueError, match="at least 1 step"):
        extend_schedule(schedule, 0)


SHAPES = {
    "warmup-constant-decay": [
        WARMUP_50,
        ScheduleSegment(shape="constant"),
        ScheduleSegment(shape="linear", steps=120, start=1.0, end=0.0),
    ],
    "warmup-cosine-fractions": [
        ScheduleSegment(shape="linear", fraction=0.13, start=0.0, end=1.0),
        ScheduleSegment(shape="cosine", fraction=0.8, start=1.0, end=0.05),
    ],
    "constant": [ScheduleSegment(shape="constant")],
    "warmup-only": [WARMUP_50],
    "decay-only": [ScheduleSegment(shape="linear", start=2.0, end=0.0)],
    "warmup-step-decay": [
        WARMUP_50,
        ScheduleSegment(shape="constant", steps=100, start=0.1),
        ScheduleSegment(shape="constant", start=0.01),
    ],
    "warmup-cosine-hold": [
        WARMUP_50,
        ScheduleSegment(shape="cosine", steps=150, start=1.0, end=0.0),
        ScheduleSegment(shape="constant", start=0.0),
    ],
}


@pytest.mark.parametrize("name", sorted(SHAPES))
@pytest.mark.parametrize("new_total", [3, 177, 240, 241, 999, 12345])
def test_lengths_add_up_and_the_same_length_reproduces_the_schedule(name: str, new_total: int) -> None:
    original = build_schedule(SHAPES[name], 240)
    extended = extend_schedule(original, new_total)
    assert sum(seg.steps or 0 for seg in extended.segments) == new_total
    assert all((seg.steps or 0) >= 1 for seg in extended.segments)
    assert build_schedule(extended.segments, new_total).total_steps == new_total
    assert extended.notes
    # Extending to the schedule's own length changes nothing, and so does resolved_segments.
    same = extend_schedule(original, original.total_steps)
    assert build_schedule(same.segments, original.total_steps).segments == original.segments
    assert build_schedule(resolved_segments(original), original.total_steps).segments == original.segments
