"""Round 2's LR schedule: round 1's schedule, as round 1 resolved it, extended the playbook's way.

The playbook (seed 002, "how long to train") names the pitfall of a longer round: spending the
extra steps at too low a learning rate. Its rule: extend training at a high LR - for a linear
schedule keep round 1's decay length and grow the constant phase at the start; for a cosine keep
the base LR and stretch it to the new length (as in "Training compute-optimal large language
models", where a cosine cycle matched to the run's length does best). So every segment keeps its
length in steps except one, chosen in this order:

1. the schedule never decays (constant; warmup + constant; a lone warmup): its last constant
   grows, or, after a final rising segment, a hold at its end value is appended and grows;
2. a constant phase right before the first decay (the LR at its peak, as in warmup + constant +
   decay or a step decay's first step) grows: the decay and everything after it keep their
   lengths, so a step decay's 0.1x and 0.01x steps, a floor, or a hold at 0 after a decay stay
   as long as in round 1;
3. else, when the first decay is a cosine, the cosine stretches (same start and end
   multipliers), and anything after it (a hold at 0, say) keeps its length;
4. else (a linear decay, a chain of them, a step down straight after the warmup) a constant phase
   at the LR the first decay starts from is inserted before it and takes all the extra steps.

"The first decay" is the first segment whose LR falls (``end < start``) or the first drop
between two segments (a step schedule). A warmup (a leading rising segment) always keeps its
length: it exists to get through the first unstable updates, which do not get more numerous in a
longer run, and 002 lists warmup length among what transfers. ``rsqrt`` is not a segment shape;
an rsqrt-like decay written as a chain of linear segments is case 4.

**Round 1's held tail.** ``schedule`` is round 1's schedule resolved at round 1's length. When its
segments add up to less than that, round 1's trials held the last value for the remaining steps.
That tail is not a segment, so the extension starts from ``schedule.total_steps``; a tail held at
a decayed LR is left out, not grown (it was left over, not a designed phase).

**Shrinking** (``new_total`` below ``schedule.total_steps``, e.g. a tiny smoke run): nothing is
inserted; the constant at the peak (case 2) or the first decay (cases 3 and 4) or the last
segment (case 1) shrinks; if that would leave it under one step, every segment is scaled by
``new_total / total_steps`` with cumulative rounding (each keeps at least one step) and a note
says so. Fewer steps than segments is a ``ValueError``.

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

    PEAK_CONSTANT = "peak_constant"  # the constant right before the first decay
    NEW_PEAK_CONSTANT = "new_peak_constant"  # inserted before the first decay (growing only)
    COSINE = "cosine"  # the first decay, a cosine: stretched
    FIRST_DECAY = "first_decay"  # shrinking with no constant at the peak
    HOLD = "hold"  # no decay, a final rising segment: a constant at its end value is appended
    LAST_SEGMENT = "last_segment"  # no decay: the last constant


@dataclass(frozen=True)
class _Choice:
    kind: _Absorber
    index: int  # the absorbing segment's index; HOLD / NEW_PEAK_CONSTANT: where it is inserted
    value: float = 0.0  # HOLD / NEW_PEAK_CONSTANT: the inserted constant's multiplier


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
    if choice.kind in (_Absorber.HOLD, _Absorber.NEW_PEAK_CONSTANT):
        inserted = ResolvedSegment("constant", 0, delta, choice.value, choice.value)
        extended = [_explicit(seg, seg.steps) for seg in segments]
        extended.insert(choice.index, _explicit(inserted, delta))
        notes = _kept_notes(segments, absorbing=None)
        notes.append(_inserted_note(segments, choice, delta))
        return ExtendedSchedule(extended, notes)

    absorbing = segments[choice.index]
    new_length = absorbing.steps + delta
    if new_length < 1:
        return _scaled(segments, old_total, new_total, choice.index)
    extended = [
        _explicit(seg, new_length if k == choice.index else seg.steps) for k, seg in enumerate(segments)
    ]
    notes = _kept_notes(segments, absorbing=choice.index)
    notes.append(_absorbed_note(segments, choice, new_length))
    return ExtendedSchedule(extended, notes)


def _first_decay(segments: list[ResolvedSegment]) -> tuple[int, bool] | None:
    """Where the LR first falls: (index, True) inside segment ``index``, (index, False) at the
    drop into segment ``index`` from the one before; None if it never falls."""
    for k, seg in enumerate(segments):
        if k > 0 and seg.start < segments[k - 1].end:
            return k, False
        if seg.end < seg.start:
            return k, True
    return None


def _is_flat(seg: ResolvedSegment) -> bool:
    return seg.shape == "constant" or seg.start == seg.end


def _choose_absorber(segments: list[ResolvedSegment], *, growing: bool) -> _Choice:
    decay = _first_decay(segments)
    if decay is None:
        last = segments[-1]
        if not _is_flat(last) and growing:  # rising at the end: keep it, hold its end value
            return _Choice(_Absorber.HOLD, len(segments), last.end)
        flats = [k for k, seg in enumerate(segments) if _is_flat(seg)]
        return _Choice(_Absorber.LAST_SEGMENT, flats[-1] if flats else len(segments) - 1)
    index, inside = decay
    if index > 0 and _is_flat(segments[index - 1]):
        return _Choice(_Absorber.PEAK_CONSTANT, index - 1)
    if inside and segments[index].shape == "cosine":
        return _Choice(_Absorber.COSINE, index)
    if not growing:
        return _Choice(_Absorber.FIRST_DECAY, index)
    peak = segments[index].start if inside else segments[index - 1].end
    return _Choice(_Absorber.NEW_PEAK_CONSTANT, index, peak)


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
        return f"constant phase at {seg.start:g}x"
    trend = "decay" if seg.end < seg.start else "rise" if seg.end > seg.start else "segment"
    return f"{seg.shape} {trend}"


def _kept_notes(segments: list[ResolvedSegment], *, absorbing: int | None) -> list[str]:
    """ "<segment> kept at N steps" for every segment that keeps its length, in order."""
    return [
        f"{_describe(segments, k)} kept at {seg.steps} steps"
        for k, seg in enumerate(segments)
        if k != absorbing
    ]


def _inserted_note(segments: list[ResolvedSegment], choice: _Choice, steps: int) -> str:
    if choice.kind is _Absorber.HOLD:
        return (
            f"then the LR holds {choice.value:g} (the {_describe(segments, len(segments) - 1)}'s end "
            f"value, as round 1's schedule did past its end) for {steps} steps"
        )
    return (
        f"constant phase at {choice.value:g}x (the peak) of {steps} steps inserted before the "
        f"{_describe(segments, choice.index)}: the extra steps train at the peak LR"
    )


def _absorbed_note(segments: list[ResolvedSegment], choice: _Choice, new_length: int) -> str:
    seg = segments[choice.index]
    verb = "grown" if new_length > seg.steps else "shrunk"
    change = f"from {seg.steps} to {new_length} steps"
    if choice.kind is _Absorber.PEAK_CONSTANT:
        after = choice.index + 1
        at_peak = " (the extra steps train at the peak LR)" if new_length > seg.steps else ""
        return (
            f"{_describe(segments, choice.index)} {verb} {change} so the {_describe(segments, after)} "
            f"keeps its {segments[after].steps} steps{at_peak}"
        )
    if choice.kind is _Absorber.COSINE:
        stretched = "stretched" if new_length > seg.steps else "shortened"
        return f"cosine decay {stretched} {change} (same start and end multipliers)"
    if len(segments) == 1 and seg.shape == "constant":
        return f"constant schedule: constant for {new_length} steps"
    return f"{_describe(segments, choice.index)} {verb} {change} (it takes the change in length)"
