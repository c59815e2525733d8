"""The playbook's pitfall, measured: round 2's extra steps must not be spent at a low LR.

Seed 002 ("how long to train"): extend training with the extra steps at a high LR; for a linear
schedule keep round 1's decay length and grow the constant phase at the start; for a cosine keep
the base LR and stretch it to the new length (Chinchilla: the cosine cycle matches the run). For
every shape, round 1 runs 200 steps and round 2 1000; the multiplier is read at every step and
the steps at the peak, at >= 0.9x the peak and at <= 0.1x the peak are counted.

``rsqrt`` is not a segment shape (``constant``, ``linear``, ``cosine`` are); an rsqrt-like decay
is written as a chain of linear segments, and that is tested here.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from tuner.playbook.schedule_extension import extend_schedule
from tuner.spec._models import ScheduleSegment
from tuner.train.schedules import Schedule, build_schedule

ROUND1, ROUND2 = 200, 1000


def _seg(
    shape: str, steps: int | None = None, start: float = 1.0, end: float | None = None
) -> ScheduleSegment:
    return ScheduleSegment(shape=shape, steps=steps, start=start, end=end)


WARMUP = _seg("linear", 20, 0.0, 1.0)
SHAPES = {
    "warmup + linear decay": [WARMUP, _seg("linear", None, 1.0, 0.0)],
    "warmup + constant + linear decay": [WARMUP, _seg("constant", 60), _seg("linear", None, 1.0, 0.0)],
    "linear decay only": [_seg("linear", None, 2.0, 0.0)],
    "step decay": [_seg("constant", 100, 1.0), _seg("constant", 50, 0.1), _seg("constant", None, 0.01)],
    "warmup + step decay": [WARMUP, _seg("constant", 80, 1.0), _seg("constant", None, 0.1)],
    "warmup + linear decay to a floor": [
        WARMUP,
        _seg("linear", 140, 1.0, 0.01),
        _seg("constant", None, 0.01),
    ],
    "rsqrt-like linear chain": [
        WARMUP,
        _seg("linear", 30, 1.0, 0.5),
        _seg("linear", 50, 0.5, 0.33),
        _seg("linear", None, 0.33, 0.25),
    ],
    "cosine": [_seg("cosine", None, 1.0, 0.0)],
    "warmup + cosine": [WARMUP, _seg("cosine", None, 1.0, 0.05)],
    "warmup + cosine + hold at 0": [WARMUP, _seg("cosine", 160, 1.0, 0.0), _seg("constant", None, 0.0)],
}
COSINES = {"cosine", "warmup + cosine", "warmup + cosine + hold at 0"}


@dataclass(frozen=True)
class Spent:
    """Steps of a schedule by the LR they train at, relative to its peak."""

    at_peak: int
    high: int  # >= 0.9x peak
    low: int  # <= 0.1x peak


def _spent(schedule: Schedule) -> Spent:
    lrs = [schedule(step) for step in range(schedule.total_steps)]
    peak = max(lrs)
    return Spent(
        at_peak=sum(lr >= peak * (1 - 1e-9) for lr in lrs),
        high=sum(lr >= 0.9 * peak for lr in lrs),
        low=sum(lr <= 0.1 * peak + 1e-12 for lr in lrs),
    )


def _round1_and_2(name: str) -> tuple[Schedule, Schedule]:
    round1 = build_schedule(SHAPES[name], ROUND1)
    extended = extend_schedule(round1, ROUND2)
    return round1, build_schedule(extended.segments, ROUND2)


@pytest.mark.parametrize("name", sorted(set(SHAPES) - COSINES))
def test_every_extra_step_trains_at_the_peak_lr(name: str) -> None:
    round1, round2 = _round1_and_2(name)
    before, after = _spent(round1), _spent(round2)
    assert round2.total_steps == ROUND2
    assert after.at_peak == before.at_peak + (ROUND2 - ROUND1)
    assert after.high == before.high + (ROUND2 - ROUND1)
    assert after.low == before.low  # not one more step at a low LR
    assert max(round2(s) for s in range(ROUND2)) == pytest.approx(max(round1(s) for s in range(ROUND1)))


@pytest.mark.parametrize("name", sorted(COSINES))
def test_a_cosine_is_stretched_so_its_low_lr_share_does_not_grow(name: str) -> None:
    """002 keeps a cosine's base LR and stretches it to the new length: every LR level gets its
    share of the extra steps, so the share spent at <= 0.1x the peak stays round 1's (a step of
    rounding aside) and a hold after the cosine keeps its length."""
    round1, round2 = _round1_and_2(name)
    before, after = _spent(round1), _spent(round2)
    assert after.high >= before.high * (ROUND2 / ROUND1) - 5
    assert after.low / ROUND2 <= before.low / ROUND1 + 1 / ROUND1


def test_the_issues_reproductions_no_longer_spend_800_steps_at_the_bottom() -> None:
    # 200 -> 1000 steps gave a final constant of 850 steps at 0.01x, or 820 steps at LR 0
    step = extend_schedule(build_schedule(SHAPES["step decay"], ROUND1), ROUND2)
    assert [(s.start, s.steps) for s in step.segments] == [(1.0, 900), (0.1, 50), (0.01, 50)]
    held = extend_schedule(build_schedule(SHAPES["warmup + cosine + hold at 0"], ROUND1), ROUND2)
    assert [(s.shape, s.steps) for s in held.segments] == [("linear", 20), ("cosine", 960), ("constant", 20)]
