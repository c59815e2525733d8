"""Learning-rate schedules built from segments (the playbook's warmup, then decay).

A schedule returns a *multiplier* of ``optimizer.lr``, so the base LR stays the one number the
search tunes and the schedule's shape can be stretched (round 2) without touching it.
Pure Python on purpose: it is called once per training step and must not import torch.
"""

from __future__ import annotations

import math
from bisect import bisect_right
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # only for the type hint; the models need no runtime import here
    from tuner.spec._models import ScheduleSegment

_SHAPES = ("constant", "linear", "cosine")


@dataclass(frozen=True)
class ResolvedSegment:
    """A segment with its length and values fixed: what the study file meant, made explicit."""

    shape: str
    start_step: int
    steps: int
    start: float
    end: float


class Schedule:
    """The LR multiplier for each 0-based update step.

    Steps past the last segment hold the last segment's ``end``, so a run that goes a little
    longer than planned (a resume, an off-by-one in a caller) never jumps back to a stale value.
    """

    def __init__(self, segments: Sequence[ResolvedSegment]) -> None:
        if not segments:
            raise ValueError("a schedule needs at least one segment")
        self.segments: tuple[ResolvedSegment, ...] = tuple(segments)
        # Precomputed so __call__ is one bisect and a few float ops per step.
        self._starts = [seg.start_step for seg in self.segments]
        self._total = self.segments[-1].start_step + self.segments[-1].steps
        self._final = self.segments[-1].end

    @property
    def total_steps(self) -> int:
        return self._total

    def __call__(self, step: int) -> float:
        if step >= self._total:
            return self._final
        # Negative steps are clamped into the first segment rather than raising: there is no
        # update before step 0, but a caller probing "the LR before training" gets the start.
        index = max(bisect_right(self._starts, step) - 1, 0)
        seg = self.segments[index]
        i = max(step - seg.start_step, 0)
        if seg.shape == "constant":
            return seg.start
        if seg.shape == "linear":
            return seg.start + (seg.end - seg.start) * i / seg.steps
        return seg.end + (seg.start - seg.end) * (1.0 + math.cos(math.pi * i / seg.steps)) / 2.0

    def __repr__(self) -> str:
        parts = ", ".join(
            f"{s.shape}[{s.start_step}:{s.start_step + s.steps}] {s.start:g}->{s.end:g}"
            for s in self.segments
        )
        return f"Schedule({parts})"


def _fraction_lengths(fractions: Sequence[float], max_train_steps: int) -> list[int]:
    """Lengths of the fractional segments, from cumulative boundaries.

    The k-th fractional segment ends at ``round(sum of fractions up to k * max_train_steps)``, so
    the lengths always add up to ``round(sum * max_train_steps)``: rounding each on its own made
    ``[0.5, 0.5]`` of 3 steps 4 steps long, and the decay never reached its end. Each segment
    keeps at least one step (a tiny fraction of a short run still exists); the next boundary
    still comes from the cumulative sum, so the excess is absorbed as soon as it can be.
    """
    lengths, cumulative, end = [], 0.0, 0
    for fraction in fractions:
        cumulative += fraction
        new_end = max(end + 1, round(cumulative * max_train_steps))
        lengths.append(new_end - end)
        end = new_end
    return lengths


def build_schedule(segments: Sequence[ScheduleSegment], max_train_steps: int) -> Schedule:
    """Resolve segment lengths against ``max_train_steps`` and default the end values.

    A segment's length is its ``steps``, else its share of ``max_train_steps`` by ``fraction``
    (see ``_fraction_lengths``), else - for the one open segment - whatever the others leave.
    A schedule shorter than ``max_train_steps`` holds its last value; one that is longer is an
    error (its end would never be reached), as are fractions adding up to more than 1.
    """
    if not segments:
        raise ValueError("a schedule needs at least one segment")
    if max_train_steps < 1:
        raise ValueError(f"max_train_steps must be at least 1, got {max_train_steps}")
    for seg in segments:
        if seg.shape not in _SHAPES:
            raise ValueError(f"unknown schedule shape {seg.shape!r}; expected one of {_SHAPES}")
    fractions = [seg.fraction for seg in segments if seg.steps is None and seg.fraction is not None]
    if sum(fractions) > 1 + 1e-9:
        raise ValueError(f"the segments' fractions add up to {sum(fractions):g}, more than 1")
    from_fractions = iter(_fraction_lengths(fractions, max_train_steps))
    lengths: list[int | None] = [
        seg.steps if seg.steps is not None else next(from_fractions) if seg.fraction is not None else None
        for seg in segments
    ]

    open_indices = [k for k, n in enumerate(lengths) if n is None]
    if len(open_indices) > 1:
        raise ValueError("at most one schedule segment may leave out steps/fraction (it takes the rest)")
    fixed = sum(n for n in lengths if n is not None)
    if open_indices:
        rest = max_train_steps - fixed
        k = open_indices[0]
        if rest < 1:
            raise ValueError(
                f"schedule segment {k + 1} ({segments[k].shape}) takes the steps left over, but the "
                f"other segments already use {fixed} of max_train_steps={max_train_steps}; "
                "shorten them or raise max_train_steps"
            )
        lengths[k] = rest
    elif fixed > max_train_steps:
        raise ValueError(
            f"the segments add up to {fixed} steps, more than max_train_steps={max_train_steps}, so the "
            "schedule would never reach its end; shorten them (a fraction scales with the run)"
        )

    resolved: list[ResolvedSegment] = []
    start_step = 0
    for seg, n in zip(segments, lengths, strict=True):
        assert n is not None  # every open length was filled in above
        end = seg.end if seg.end is not None else (seg.start if seg.shape == "constant" else 0.0)
        resolved.append(
            ResolvedSegment(shape=seg.shape, start_step=start_step, steps=n, start=seg.start, end=end)
        )
        start_step += n
    return Schedule(resolved)
