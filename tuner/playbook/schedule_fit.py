"""A study file's LR schedule that the trial length ``tuner tune`` chose cannot hold, scaled to it.

A schedule's segments have fixed ``steps`` (the templates' 50-step warmup), a ``fraction`` of
the run, or neither (the one segment that takes the rest). When the study file leaves
``max_train_steps`` out, ``tune`` chooses the length (sweep-lr's answer); fixed steps written
before that answer can use the whole of it (a 50-step warmup, sweep-lr's 20 steps), and round 1
would refuse to start after the sweep had spent part of the budget. A length the user gave is
the user's: ``train`` and ``run-round`` refuse a schedule that does not fit it, naming both. A
length ``tune`` chose is ``tune``'s, so it makes the schedule fit, by one rule:

- a schedule that fits is never changed, however odd (it is the user's);
- one that does not: its fixed-step segments become fractions of the run, in the proportions
  of their steps, the other segments keeping their form. With a segment that takes the rest (a
  warmup, then a decay over the rest) they share **half** of what the file's fractions leave,
  and that segment keeps the other half; without one, they share all of it.

Why fractions: the schedule then holds at every length a round trains (round 1, the longer
rounds after it), as the file's own fractions do. Why half: it is the schedule as it would run
at twice its fixed steps, the shortest length at which the segment taking the rest is as long as
the fixed ones before it, scaled to the run; a warmup longer than the decay after it is no longer
a warmup. Why shrink the fixed segments rather than have the length grow to hold them: sweep-lr
measured its length at a constant LR with no warmup, where its fastest LR fit the training set
without diverging, so its answer is the evidence, and the fixed steps were written before it.

The templates keep their warmup in ``steps`` rather than a ``fraction``: a warmup is there for the
first, unstable updates, whose number does not grow with the run (round 2's extension keeps it
for the same reason), and the figures the docs show were measured with it. A length too short to
hold it is this rule's to handle, on the templates and on a user's own schedule alike.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from tuner.spec import ScheduleSegment

#: the share of the run the fixed-step segments keep when a segment takes the rest
FIXED_SHARE_WITH_OPEN = 0.5


@dataclass(frozen=True)
class ScaledSchedule:
    """The schedule as ``tune`` runs it (``segments``, as the study file would write them) and what
    changed: the fixed-step segments' steps before, and as they resolve in a run of ``steps``."""

    segments: list[ScheduleSegment]
    steps: int  # the trial length it was scaled for
    indices: list[int]  # which segments had fixed steps
    fixed_steps: list[int]  # each fixed-step segment's steps as the file gives them
    scaled_steps: list[int]  # the same segments' steps in a run of ``steps``

    def documents(self) -> list[dict[str, Any]]:
        """The segments as study-file mappings (only the fields they set)."""
        return [segment.model_dump(exclude_none=True) for segment in self.segments]

    def as_set(self) -> str:
        """The ``--set`` value that runs it (``schedule=[...]``)."""
        return f"schedule={json.dumps(self.documents())}"

    def changes(self) -> str:
        """``linear 50 -> 10 steps``, one part per fixed-step segment."""
        return ", ".join(
            f"{self.segments[k].shape} {before} -> {after} steps"
            for k, before, after in zip(self.indices, self.fixed_steps, self.scaled_steps, strict=True)
        )


def scaled_to_fit(segments: Sequence[ScheduleSegment], steps: int) -> ScaledSchedule | None:
    """The schedule scaled by the module's rule when a run of ``steps`` cannot hold it; None when
    it fits, or when no scaling of its fixed-step segments would make it fit (it has none, or the
    run is shorter than its segments): the phase then says why, as it does for a user's length."""
    from tuner.train.schedules import build_schedule

    try:
        build_schedule(segments, steps)
    except ValueError:
        pass
    else:
        return None
    fixed = [k for k, s in enumerate(segments) if s.steps is not None]
    if not fixed:
        return None
    total = sum(segments[k].steps or 0 for k in fixed)
    left = 1.0 - sum(s.fraction or 0.0 for s in segments if s.steps is None)
    takes_rest = any(s.steps is None and s.fraction is None for s in segments)
    share = left * (FIXED_SHARE_WITH_OPEN if takes_rest else 1.0)
    scaled = [
        s.model_copy(update={"steps": None, "fraction": _readable(share * (s.steps or 0) / total)})
        if k in fixed
        else s
        for k, s in enumerate(segments)
    ]
    try:
        resolved = build_schedule(scaled, steps).segments
    except ValueError:
        return None
    before = [segments[k].steps or 0 for k in fixed]
    return ScaledSchedule(scaled, steps, fixed, before, [resolved[k].steps for k in fixed])


def _readable(fraction: float) -> float:
    """``fraction`` to 6 decimals, rounded down (so that the fractions never add up to more than
    they should: 0.3, not 0.30000000000000004), and never 0."""
    return max(math.floor(fraction * 1e6) / 1e6, 1e-6)
