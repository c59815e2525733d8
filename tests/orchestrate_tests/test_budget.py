"""The budget rules as pure functions of the phase's counts."""

from __future__ import annotations

import pytest

from tuner.errors import UsageError
from tuner.orchestrate import PhaseCounts, PhaseSettings, decide


def test_default_failure_budget_is_a_third_of_the_trials_and_at_least_one() -> None:
    assert PhaseSettings.build(30).max_failed == 10
    assert PhaseSettings.build(20).max_failed == 6
    assert PhaseSettings.build(2).max_failed == 1
    assert PhaseSettings.build(5, max_failed=4).max_failed == 4
    assert PhaseSettings.build(5).max_retries == 1


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"max_trials": 0}, "trial budget must be at least 1"),
        ({"max_trials": 3, "max_failed": 0}, "failure budget must be at least 1"),
        ({"max_trials": 3, "max_parallel": 0}, "max parallel trials must be at least 1"),
        ({"max_trials": 3, "trial_timeout_s": 0.0}, "timeout must be positive"),
    ],
)
def test_impossible_budgets_are_refused(kwargs: dict, message: str) -> None:
    with pytest.raises(UsageError, match=message):
        PhaseSettings.build(**kwargs)


def test_the_failure_budget_stops_the_phase() -> None:
    counts = PhaseCounts(completed=4, failed=3, slots=7)
    counts.reasons.update({"crashed": 2, "diverged": 1})
    decision = decide(counts, PhaseSettings.build(12, max_failed=3))
    assert decision.action == "failed"
    assert "3 of 7 finished trials failed (2 crashed, 1 diverged); the limit is 3" in decision.reason


def test_done_only_when_nothing_is_left_to_start_or_running() -> None:
    settings = PhaseSettings.build(4)
    assert decide(PhaseCounts(completed=4, slots=4), settings).action == "done"
    assert decide(PhaseCounts(completed=3, running=1, slots=4), settings).action == "wait"
    # every slot started, but a retry waits: not done
    assert decide(PhaseCounts(completed=3, failed=0, waiting=1, slots=4), settings).action == "start"
    # slots of the budget never started (or a budget raised on a re-run): start them
    assert decide(PhaseCounts(completed=4, slots=4), PhaseSettings.build(6)).action == "start"


def test_max_parallel_holds_across_workers() -> None:
    settings = PhaseSettings.build(10, max_parallel=2, max_failed=9)
    assert decide(PhaseCounts(running=2, waiting=8), settings).action == "wait"
    assert decide(PhaseCounts(running=1, waiting=8), settings).action == "start"


def test_unproven_trials_reserve_failure_budget_so_it_is_never_overshot() -> None:
    settings = PhaseSettings.build(10, max_failed=2)
    # one failure so far, one running trial that has not finished a step: it could fail too
    assert decide(PhaseCounts(failed=1, running=1, unproven=1, waiting=5), settings).action == "wait"
    # once it has trained a step it no longer holds the budget back
    assert decide(PhaseCounts(failed=1, running=1, unproven=0, waiting=5), settings).action == "start"
