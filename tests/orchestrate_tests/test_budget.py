"""The budget rules as pure functions of the phase's counts (and of its trials, as stored)."""

from __future__ import annotations

import datetime
import time
from pathlib import Path
from typing import Any

import pytest

from tuner.errors import UsageError
from tuner.orchestrate import PhaseCounts, PhaseSettings, count_trials, decide, open_storage, start_phase
from tuner.orchestrate.phase import window_started_at

T0 = datetime.datetime(2024, 1, 1, 12, 0, 0)


def _trial(
    number: int, state: str, value: float | None = None, done_s: float | None = None, **attrs: Any
) -> Any:
    """A stored trial as Optuna hands it back: slot ``number``, completed ``done_s`` s after T0."""
    from optuna.trial import TrialState, create_trial

    trial = create_trial(
        state=TrialState[state], value=value, user_attrs={"slot": number, "attempt": 0, **attrs}
    )
    trial.number = number
    if done_s is not None:
        trial.datetime_complete = T0 + datetime.timedelta(seconds=done_s)
    return trial


def _completed(values: list[float], *, first: int = 0) -> list[Any]:
    """Trials completing in this order (numbers start at ``first``, one second apart)."""
    return [_trial(first + i, "COMPLETE", value, done_s=i) for i, value in enumerate(values)]


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
        ({"max_trials": 3, "timeout_h": 0.0}, "wall-time budget \\(timeout_h\\) must be positive"),
        ({"max_trials": 3, "timeout_h": float("inf")}, "wall-time budget \\(timeout_h\\) must be positive"),
        ({"max_trials": 3, "stop_after_no_improvement": 0}, "stop_after_no_improvement must be at least 1"),
    ],
)
def test_impossible_budgets_are_refused(kwargs: dict, message: str) -> None:
    with pytest.raises(UsageError, match=message):
        PhaseSettings.build(**kwargs)


def test_the_failure_budget_stops_the_phase() -> None:
    counts = PhaseCounts(completed=4, failed=3, slots=7)
    counts.reasons.update({"crashed": 2, "oom": 1})
    decision = decide(counts, PhaseSettings.build(12, max_failed=3))
    assert decision.action == "failed"
    assert "3 of 7 finished trials failed (2 crashed, 1 oom); the limit is 3" in decision.reason


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


# -- diverged trials: information, not failures ---------------------------------------------------


def test_diverged_trials_fill_their_slots_without_spending_the_failure_budget() -> None:
    trials = [
        _trial(0, "FAIL", failure_reason="diverged", retried=False),
        _trial(1, "FAIL", failure_reason="crashed", retried=False),
        _trial(2, "COMPLETE", 0.3, done_s=1),
        _trial(3, "FAIL", failure_reason="diverged", retried=False),
    ]
    counts = count_trials(trials)
    assert (counts.completed, counts.failed, counts.diverged, counts.finished) == (1, 1, 2, 4)
    assert counts.failure_summary() == "1 crashed"
    assert counts.failure_rate == 0.25
    assert counts.best_number == 2
    # the one crash leaves the budget of 2 unspent; diverged trials do not reserve any either
    assert decide(counts, PhaseSettings.build(6, max_failed=2)).action == "start"
    assert decide(counts, PhaseSettings.build(4, max_failed=2)).action == "done"


def test_a_phase_where_every_trial_diverges_completes() -> None:
    trials = [_trial(i, "FAIL", failure_reason="diverged", retried=False) for i in range(5)]
    counts = count_trials(trials)
    assert (counts.failed, counts.diverged, counts.slots, counts.best_value) == (0, 5, 5, None)
    settings = PhaseSettings.build(5, max_failed=1)
    assert decide(counts, settings).action == "done"
    # with slots left, the next one starts: the failure budget of 1 is untouched
    assert decide(counts, PhaseSettings.build(8, max_failed=1)).action == "start"


# -- timeout_h: a wall-time budget from the run window's start -------------------------------------


def test_the_wall_time_budget_stops_new_trials_and_says_so_with_the_numbers() -> None:
    settings = PhaseSettings.build(20, timeout_h=0.5, config_key="rounds.round1")
    counts = PhaseCounts(completed=11, failed=1, slots=12)
    now = 1_000_000.0
    assert decide(counts, settings, window_started_at=now - 1799, now=now).action == "start"
    stopped = decide(counts, settings, window_started_at=now - 1800, now=now)
    assert stopped.action == "stopped"
    assert stopped.reason == (
        "stopped starting trials: the 0.5 h wall-time budget (rounds.round1.timeout_h) ran out "
        "after 12 of 20 trials; run the same command again to continue"
    )
    # running trials finish first; a waiting retry does not start either
    running = PhaseCounts(completed=10, running=1, waiting=1, slots=12)
    waiting = decide(running, settings, window_started_at=now - 3600, now=now)
    assert waiting.action == "wait" and "0.5 h wall-time budget" in waiting.reason
    # a phase started before run windows existed has no wall-time budget to run out
    assert decide(counts, settings, window_started_at=None, now=now).action == "start"


def test_a_met_budget_is_done_not_stopped_and_a_spent_failure_budget_comes_first() -> None:
    settings = PhaseSettings.build(4, max_failed=1, timeout_h=1.0)
    long_ago = time.time() - 7200
    assert decide(PhaseCounts(completed=4, slots=4), settings, window_started_at=long_ago).action == "done"
    spent = PhaseCounts(completed=1, failed=1, slots=2)
    assert decide(spent, settings, window_started_at=long_ago).action == "failed"


def test_each_command_that_starts_a_phase_opens_a_new_run_window(tmp_path: Path) -> None:
    storage = open_storage(f"sqlite:///{tmp_path / 'study.db'}")
    settings = PhaseSettings.build(4, timeout_h=1.0)
    before = time.time()
    study = start_phase(storage, "s", "round-1", settings, direction="minimize")
    first = window_started_at(study.user_attrs)  # SQLite's clock: this machine's, to the millisecond
    assert first is not None and before - 0.01 <= first <= time.time() + 0.01
    again = start_phase(storage, "s", "round-1", settings, direction="minimize")
    second = window_started_at(again.user_attrs)
    assert second is not None and second >= first
    assert PhaseSettings.from_attrs(again.user_attrs).timeout_h == 1.0


# -- stop_after_no_improvement -----------------------------------------------------------------------


def test_no_new_best_in_n_completed_trials_stops_exactly_at_n() -> None:
    settings = PhaseSettings.build(20, stop_after_no_improvement=3, config_key="rounds.round1")
    values = [0.5, 0.4, 0.45, 0.42]  # trial 1 is the best; 2 trials since
    counts = count_trials(_completed(values))
    assert (counts.since_best, counts.best_slot) == (2, 1)
    assert decide(counts, settings).action == "start"
    counts = count_trials(_completed([*values, 0.4]))  # equal is not better: 3 without a new best
    assert counts.since_best == 3
    stopped = decide(counts, settings, metric="val/error_rate")
    assert stopped.action == "stopped"
    assert stopped.reason == (
        "stopped starting trials: no new best in the last 3 completed trials "
        "(best val/error_rate 0.4 from trial 1; rounds.round1.stop_after_no_improvement: 3)"
    )
    # a new best resets the count
    assert decide(count_trials(_completed([*values, 0.4, 0.1])), settings).action == "start"


def test_no_improvement_is_judged_in_trial_order_with_the_direction() -> None:
    settings = PhaseSettings.build(20, stop_after_no_improvement=2)
    # trial 0 started first, then 1, 2, 3 (their clock stamps do not matter: test_clock_skew.py)
    trials = [
        _trial(0, "COMPLETE", 0.9, done_s=2),
        _trial(1, "COMPLETE", 0.5, done_s=3),
        _trial(2, "COMPLETE", 0.6, done_s=4),
        _trial(3, "COMPLETE", 0.7, done_s=1),
    ]
    maximizing = count_trials(trials, "maximize")
    assert (maximizing.since_best, maximizing.best_slot) == (3, 0)
    assert decide(maximizing, settings).action == "stopped"
    minimizing = count_trials(trials, "minimize")  # 0.9, then 0.5 (new best), 0.6, 0.7
    assert (minimizing.since_best, minimizing.best_slot) == (2, 1)
    assert decide(minimizing, settings).action == "stopped"
    assert decide(minimizing, PhaseSettings.build(20, stop_after_no_improvement=3)).action == "start"


def test_only_completed_finite_trials_count_towards_no_improvement() -> None:
    settings = PhaseSettings.build(20, stop_after_no_improvement=2)
    trials = [
        *_completed([0.3, 0.5]),  # one without a new best
        _trial(2, "FAIL", failure_reason="diverged", retried=False),
        _trial(3, "FAIL", failure_reason="crashed", retried=True),  # its retry is the slot's trial
        _trial(4, "COMPLETE", float("inf"), done_s=10),
        _trial(5, "PRUNED", done_s=11),
        _trial(6, "RUNNING"),
    ]
    counts = count_trials(trials)
    assert counts.since_best == 1
    assert decide(counts, settings).action == "start"
    # nothing completed yet: no best to beat, nothing to stop
    assert count_trials([_trial(0, "FAIL", failure_reason="diverged")]).since_best == 0
    assert decide(PhaseCounts(slots=1, diverged=1), settings).action == "start"
