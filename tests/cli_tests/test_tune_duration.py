"""``tuner tune --budget 2h``: a duration converted to steps at the pace of a probe, then a
wall-clock limit on each phase, kept across runs (Ctrl-C included)."""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path
from typing import Any

import pytest

from tests.cli_tests._tune_support import store_tune_state, tune_args, tune_study
from tests.orchestrate_tests.conftest import load_phase, run_tuner, start_tuner
from tests.spec_tests._support import invoke


def test_a_duration_is_converted_to_steps_at_the_pace_of_a_probe_here(tmp_path: Path) -> None:
    """``--budget 2m``: the probe's seconds per step (start-up included) on one worker give the
    steps; the plan stays within them, and the conversion is said in one line of the log."""
    import re

    from tuner.playbook.budget import parse_budget, steps_for_duration

    assert parse_budget("1.5h").seconds == 5400 and parse_budget("90s").seconds == 90
    assert steps_for_duration(7200, 0.5, workers=2) == 28_800  # two trials side by side
    path = tune_study(tmp_path)
    args = ("--dry-run", "--json", "--workers", "1", "--output-dir", str(tmp_path / "runs"))
    result = invoke("tune", str(path), "--budget", "2m", *args)
    assert result.exit_code == 0, result.output
    said = re.search(r"budget 2m = ([\d,]+) training steps at ([\d.e+-]+) s a step", result.output)
    assert said, result.output
    steps, per_step = int(said.group(1).replace(",", "")), float(said.group(2))
    assert steps == pytest.approx(120 / per_step, rel=0.01)  # the pace is printed to 3 digits
    assert 0 < json.loads(result.stdout)["plan"]["steps"] <= steps
    assert not (tmp_path / "runs").exists()


def _round1_done(tmp_path: Path, budget: str, spent_s: float, **options: Any) -> Any:
    """Round 1 (built: 4 trials of 10 steps) done by an earlier run of ``--budget BUDGET`` (400
    steps) that had run for ``spent_s`` wall seconds; ``options``: the toy workload's."""
    from tests.report_tests.builders import add_trial, study
    from tuner.playbook.decision_log import Stage

    built = study(tmp_path, round1={"steps": 10, "trials": 4}, round2={"top_k": 1}, options=options or None)
    phase = built.start("round-1")
    for slot in range(4):
        add_trial(phase, slot, 0.1 * (slot + 1), {"optimizer.lr": 0.02 * (slot + 1)}, best_step=10)
    first = Stage("toy", "round-1", str(built.path), [], 4, 40, done=True, steps_per_trial=10)
    store_tune_state(built, first, budget, 400, spent_s=spent_s)
    return built


def test_a_duration_budget_whose_time_is_spent_starts_no_further_phase(tmp_path: Path) -> None:
    from tuner.orchestrate.storage import open_storage
    from tuner.playbook.decision_log import load_state

    built = _round1_done(tmp_path, "10m", spent_s=600)
    done = run_tuner(*tune_args(built, "10m", "--no-apply-suggestions"))
    assert done.returncode == 0, done.stderr
    payload = json.loads(done.stdout)
    (spent,) = [d for d in payload["decisions"] if d["kind"] == "time_spent"]
    assert spent["stage"] == "toy/round-2" and "the 10m budget's time is spent" in spent["text"]
    assert not (built.output_dir / "toy" / "round-2").exists()  # round 2 never started
    state = load_state(open_storage(built.storage_url), "toy")
    assert state is not None and state.spent_s >= 600  # this run's seconds are added


def test_a_duration_budget_limits_each_phase_to_the_time_left(tmp_path: Path) -> None:
    """An hour's budget of which 10 minutes ran: round 2 may start trials for the 50 minutes left
    (its ``timeout_h``), and the state adds this run's seconds."""
    from tuner.orchestrate.phase import SETTINGS_ATTR
    from tuner.orchestrate.storage import open_storage
    from tuner.playbook.decision_log import load_state

    built = _round1_done(tmp_path, "1h", spent_s=600)
    done = run_tuner(*tune_args(built, "1h", "--no-apply-suggestions"))
    assert done.returncode == 0, done.stderr
    assert "time_spent" not in [d["kind"] for d in json.loads(done.stdout)["decisions"]]
    state = load_state(open_storage(built.storage_url), "toy")
    assert state is not None and state.spent_s > 600
    limit = load_phase(built.storage_url, "toy", "round-2").user_attrs[SETTINGS_ATTR]["timeout_h"]
    assert 3000 - (state.spent_s - 600) <= limit * 3600 <= 3000


def test_a_duration_budget_stopped_with_ctrl_c_keeps_the_seconds_it_ran(tmp_path: Path) -> None:
    """Ctrl-C while round 2 trains: the seconds up to the stop are added to the state (else the
    same command run again would have more time than the budget has left)."""
    from optuna.trial import TrialState

    from tests._processes import wait_for
    from tuner.orchestrate.storage import open_storage
    from tuner.playbook.decision_log import load_state

    built = _round1_done(tmp_path, "1h", spent_s=600, step_sleep_s=0.05)
    command = start_tuner(*tune_args(built, "1h", "--no-apply-suggestions"))

    def round2_trains() -> bool:
        if not (built.output_dir / "toy" / "round-2").exists():
            return False
        try:
            trials = load_phase(built.storage_url, "toy", "round-2").get_trials(deepcopy=False)
        except KeyError:  # the phase is being created
            return False
        return any(t.state == TrialState.RUNNING for t in trials)

    wait_for(lambda: round2_trains() or command.poll() is not None, what="round 2 to train")
    assert command.poll() is None, command.output()
    state = load_state(open_storage(built.storage_url), "toy")
    assert state is not None
    before = state.spent_s  # the state as the run saved it last, before round 2 started
    time.sleep(1.5)  # nothing saves the state meanwhile: round 2 is still training
    command.send_signal(signal.SIGINT)
    output, _ = command.communicate(timeout=120)
    assert command.returncode == 130, output
    state = load_state(open_storage(built.storage_url), "toy")
    assert state is not None and state.spent_s >= before + 1.5, (before, state.spent_s)
