"""A worker whose clock is off (``TUNER_TEST_CLOCK_OFFSET_S``) decides the budgets as the others do."""

from __future__ import annotations

from pathlib import Path

from tests._warm_processes import run_warm_tuner
from tests.orchestrate_tests.conftest import load_phase, sqlite_url, toy_study, tuner_env
from tuner.playbook import start_round
from tuner.spec import load_study


def test_a_worker_an_hour_fast_does_not_see_a_half_hour_budget_spent(tmp_path: Path) -> None:
    path = toy_study(tmp_path, round1={"trials": 2, "steps": 10, "timeout_h": 0.5})
    output_dir = tmp_path / "runs"
    start_round(load_study(path), "round-1", output_dir)  # the run window opens on this machine
    fast = tuner_env(TUNER_TEST_CLOCK_OFFSET_S="3600")
    served = run_warm_tuner(
        "worker", str(path), "--phase", "round-1", "--output-dir", str(output_dir), env=fast
    )
    assert served.returncode == 0, served.stdout + served.stderr
    assert "wall-time budget" not in served.stdout + served.stderr
    trials = load_phase(sqlite_url(output_dir), "toy").trials
    assert sorted(t.state.name for t in trials) == ["COMPLETE", "COMPLETE"]


def test_a_worker_an_hour_slow_still_stops_when_the_budget_is_spent(tmp_path: Path) -> None:
    path = toy_study(tmp_path, round1={"trials": 2, "steps": 10, "timeout_h": 0.5})
    output_dir = tmp_path / "runs"
    started = start_round(load_study(path), "round-1", output_dir)
    window = started.study.user_attrs["tuner:window_started_at"]
    started.study.set_user_attr("tuner:window_started_at", window - 3600)  # opened an hour ago
    slow = tuner_env(TUNER_TEST_CLOCK_OFFSET_S="-3600")
    served = run_warm_tuner(
        "worker", str(path), "--phase", "round-1", "--output-dir", str(output_dir), env=slow
    )
    assert served.returncode == 0, served.stdout + served.stderr
    assert "0.5 h wall-time budget" in served.stdout + served.stderr
    assert load_phase(sqlite_url(output_dir), "toy").trials == []


def test_no_improvement_is_judged_in_trial_order_whatever_the_workers_clocks_stamped() -> None:
    """Trials 0 and 1 were recorded by a worker 5 minutes fast, 2 and 3 by one on time: their
    completion stamps say 2, 3, 0, 1, but 0 and 1 finished first."""
    import datetime

    from optuna.trial import TrialState, create_trial

    from tuner.orchestrate import PhaseSettings, count_trials, decide

    t0 = datetime.datetime(2024, 1, 1, 12, 0, 0)
    stamped = [(0.5, 300 + 10), (0.2, 300 + 20), (0.3, 30), (0.4, 40)]  # (value, seconds after t0)
    trials = []
    for number, (value, seconds) in enumerate(stamped):
        trial = create_trial(state=TrialState.COMPLETE, value=value, user_attrs={"slot": number})
        trial.number = number
        trial.datetime_complete = t0 + datetime.timedelta(seconds=seconds)
        trials.append(trial)
    counts = count_trials(trials)  # trial 1 (0.2) is the best; 2 and 3 came after it
    assert (counts.best_slot, counts.since_best) == (1, 2)
    assert decide(counts, PhaseSettings.build(20, stop_after_no_improvement=2)).action == "stopped"
