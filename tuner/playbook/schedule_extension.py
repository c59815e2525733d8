"""Round 2's LR schedule: round 1's schedule, as round 1 resolved it, extended the playbook's way.

The playbook's rule (round 2 trains longer than round 1): the parts of a schedule whose length is
about *steps* keep their length in steps, and the growth goes to the part whose length is about
*the run*:

- a warmup (a leading linear segment that rises) keeps its length: it exists to get through the
  first unstable updates, which do not get more numerous in a longer run;
- a linear decay keeps its length and the constant phase before it grows (a "constant, then a
  short decay" schedule stays that). Without a constant phase before it, the decay itself
  stretches, and a note says so;
- a cosine decay keeps its start and end multipliers and stretches its horizon to the new end;
- a constant schedule simply stays constant for the new length.

In general every segment keeps its length in steps except one that absorbs the change: the last
constant segment before a final linear decay; else a final cosine; else the last segment. A
final segment that rises (a warmup with nothing after it, say) is kept too: the LR then holds its
end value, exactly as ``Schedule`` holds it past its end, and that hold is the segment that grows.

**Round 1's held tail.** ``schedule`` is round 1's schedule resolved at round 1's length. When its
segments add up to less than that (fixed ``steps`` that do not fill the run, fractions adding up
to less than 1), round 1's trials held the last value for the remaining steps. That tail is not a
segment - it is the last segment's hold - so the extension starts from ``schedule.total_steps``.
For a final constant this changes nothing (the constant grows anyway); for a final rising segment
the hold is made explicit and grows (above); for a final decay the extended decay ends exactly at
``new_total`` and there is no held tail any more: the tail was left over, not a designed phase,
and growing a hold at a decayed LR would spend round 2's extra steps learning almost nothing.

**Shrinking** (``new_total`` below ``schedule.total_steps``, e.g. a tiny smoke run) is supported:
the same segment absorbs the change and shrinks; if that would leave it under one step, every
segment is scaled by ``new_total / total_steps`` with cumulative rounding (each keeps at least one
step) and a note says so. Fewer steps than segments is a ``ValueError``.

Pure: no storage, no torch. The returned segments all carry explicit ``steps`` adding up to
``new_total`` exactly, so ``build_schedule(extended.segments, new_total)`` is the round-2
schedule and can be stored in a phase's plan as is.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from tuner.spec._models import ScheduleSegment
from tuner.train.schedules import ResolvedSegment, Schedule


@dataclass(frozen=True)
class ExtendedSchedule:
    """Explicit-step segments adding up to the new length, and what was done to get them.

    ``notes`` are short plain sentences for the phase header ("warmup kept at 50 steps").
    """

    segments: list[ScheduleSegment]
    notes: list[str]


class _Absorber(enum.Enum):
    """Which part of the schedule takes up the change in length (see the module docstring)."""

    CONSTANT_BEFORE_DECAY = "constant_before_decay"
    STRETCHED_DECAY = "stretched_decay"  # a final linear decay with no constant before it
    COSINE = "cosine"
    HOLD = "hold"  # a new constant after a final rising segment, at its end value
    LAST_SEGMENT = "last_segment"


@dataclass(frozen=True)
class _Choice:
    kind: _Absorber
    index: int  # the absorbing segment's index; for HOLD, len(segments) (it is appended)


def resolved_segments(schedule: Schedule) -> list[ScheduleSegment]:
    """``schedule`` as explicit-step segments: building them again gives the same schedule."""
    return [_explicit(seg, seg.steps) for seg in schedule.segments]


def extend_schedule(schedule: Schedule, new_total: int) -> ExtendedSchedule:
    """Round 1's ``schedule`` grown (or shrunk) to ``new_total`` steps by the playbook's rules."""
    if new_total < 1:
        raise ValueError(f"a schedule needs at least 1 step, got new_total={new_total}")
    segments = list(schedule.segments)
    old_total = schedule.total_steps
    delta = new_total - old_total
    if delta == 0:
        return ExtendedSchedule(
            resolved_segments(schedule), [f"schedule kept as round 1 ran it ({old_total} steps)"]
        )
    if new_total < len(segments):
        raise ValueError(
            f"cannot fit the schedule's {len(segments)} segments into {new_total} steps "
            "(each needs at least one)"
        )

    choice = _choose_absorber(segments, growing=delta > 0)
    if choice.kind is _Absorber.HOLD:
        last = segments[-1]
        hold = ResolvedSegment("constant", old_total, delta, last.end, last.end)
        extended = [_explicit(seg, seg.steps) for seg in segments] + [_explicit(hold, delta)]
        notes = _kept_notes(segments, skip=None)
        notes.append(
            f"then the LR holds {last.end:g} (the {_describe(segments, len(segments) - 1)}'s end "
            f"value, as round 1's schedule did past its end) for {delta} steps"
        )
        return ExtendedSchedule(extended, notes)

    absorbing = segments[choice.index]
    new_length = absorbing.steps + delta
    if new_length < 1:
        return _scaled(segments, old_total, new_total, choice.index)
    extended = [
        _explicit(seg, new_length if k == choice.index else seg.steps) for k, seg in enumerate(segments)
    ]
    skip = len(segments) - 1 if choice.kind is _Absorber.CONSTANT_BEFORE_DECAY else None
    notes = _kept_notes(segments, skip=skip, absorbing=choice.index)
    notes.append(_absorbed_note(segments, choice, new_length))
    return ExtendedSchedule(extended, notes)


def _choose_absorber(segments: list[ResolvedSegment], *, growing: bool) -> _Choice:
    last_index = len(segments) - 1
    last = segments[-1]
    if last.shape == "linear" and last.end < last.start:
        constants = [k for k in range(last_index) if segments[k].shape == "constant"]
        if constants:
            return _Choice(_Absorber.CONSTANT_BEFORE_DECAY, constants[-1])
        return _Choice(_Absorber.STRETCHED_DECAY, last_index)
    if last.shape == "cosine" and last.end <= last.start:
        return _Choice(_Absorber.COSINE, last_index)
    if last.shape != "constant":  # rising (or flat) at the end: keep it, hold its end value
        if growing:
            return _Choice(_Absorber.HOLD, len(segments))
        constants = [k for k in range(last_index) if segments[k].shape == "constant"]
        if constants:
            return _Choice(_Absorber.LAST_SEGMENT, constants[-1])
    return _Choice(_Absorber.LAST_SEGMENT, last_index)


def _scaled(
    segments: list[ResolvedSegment], old_total: int, new_total: int, absorbing: int
) -> ExtendedSchedule:
    """Every segment scaled by new/old, lengths from cumulative boundaries (each at least 1)."""
    lengths, cumulative, end = [], 0, 0
    for k, seg in enumerate(segments):
        cumulative += seg.steps
        ideal = (2 * cumulative * new_total + old_total) // (2 * old_total)  # round half up
        remaining = len(segments) - k - 1  # later segments need a step each
        new_end = min(max(end + 1, ideal), new_total - remaining)
        lengths.append(new_end - end)
        end = new_end
    lengths[-1] += new_total - end  # only if rounding left a gap (it never should)
    extended = [_explicit(seg, n) for seg, n in zip(segments, lengths, strict=True)]
    note = (
        f"schedule shrunk from {old_total} to {new_total} steps: too short for the "
        f"{_describe(segments, absorbing)} alone to absorb it, so every segment was scaled "
        f"(lengths {', '.join(str(n) for n in lengths)})"
    )
    return ExtendedSchedule(extended, [note])


def _explicit(seg: ResolvedSegment, steps: int) -> ScheduleSegment:
    return ScheduleSegment(shape=seg.shape, steps=steps, start=seg.start, end=seg.end)


def _is_warmup(segments: list[ResolvedSegment], index: int) -> bool:
    seg = segments[index]
    return index == 0 and seg.shape == "linear" and seg.start < seg.end


def _describe(segments: list[ResolvedSegment], index: int) -> str:
    seg = segments[index]
    if _is_warmup(segments, index):
        return "warmup"
    if seg.shape == "constant":
        return "constant phase"
    trend = "decay" if seg.end < seg.start else "rise" if seg.end > seg.start else "segment"
    return f"{seg.shape} {trend}"


def _kept_notes(
    segments: list[ResolvedSegment], *, skip: int | None, absorbing: int | None = None
) -> list[str]:
    """ "<segment> kept at N steps" for every segment that keeps its length, in order."""
    return [
        f"{_describe(segments, k)} kept at {seg.steps} steps"
        for k, seg in enumerate(segments)
        if k not in (skip, absorbing)
    ]


def _absorbed_note(segments: list[ResolvedSegment], choice: _Choice, new_length: int) -> str:
    seg = segments[choice.index]
    verb = "grown" if new_length > seg.steps else "shrunk"
    change = f"from {seg.steps} to {new_length} steps"
    if choice.kind is _Absorber.CONSTANT_BEFORE_DECAY:
        decay = segments[-1].steps
        return f"constant phase {verb} {change} so the linear decay keeps its {decay} steps"
    if choice.kind is _Absorber.STRETCHED_DECAY:
        stretched = "stretched" if new_length > seg.steps else "shortened"
        return (
            f"linear decay {stretched} {change}: there is no constant phase before it to take "
            "the change, so the decay itself does"
        )
    if choice.kind is _Absorber.COSINE:
        stretched = "stretched" if new_length > seg.steps else "shortened"
        return f"cosine decay {stretched} {change} (same start and end multipliers)"
    if len(segments) == 1 and seg.shape == "constant":
        return f"constant schedule: constant for {new_length} steps"
    return f"{_describe(segments, choice.index)} {verb} {change} (it takes the change in length)"
