"""The pruning replay on constructed round-1 curves whose answer is known: a run that starts
slow and ends best (what a decaying schedule does) is stopped by the median rule, and the steps
it would have trained after are counted as saved."""

from __future__ import annotations

import pytest

from benchmarks.pruning_replay import Curve, replay

STEPS = range(10, 100, 10)


def _curve(number: int, slow: bool) -> Curve:
    """Error 0.3 from step 20 on; a slow run stays at 0.9 until step 60, then ends at 0.1."""
    if slow:
        evals = {s: 0.9 if s <= 60 else 0.1 for s in STEPS}
    else:
        evals = {s: 0.5 if s < 20 else 0.3 for s in STEPS}
    return Curve(number, evals, min(evals.values()))


def test_the_median_rule_stops_the_slow_starter_that_would_have_been_best() -> None:
    curves = [_curve(n, slow=n == 4) for n in range(6)]
    found = replay(curves, "minimize", "median")
    # judged from a third of the length (30) once 4 runs completed: 0.9 is above their 0.3
    assert found.best_stopped and found.top_stopped == 1
    assert found.steps_saved == pytest.approx((90 - 30) / (6 * 90))


def test_a_run_ahead_all_along_is_never_stopped() -> None:
    curves = [_curve(n, slow=False) for n in range(6)]
    found = replay(curves, "minimize", "median")
    assert not found.best_stopped and found.top_stopped == 0 and found.steps_saved == 0
