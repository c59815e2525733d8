"""``tuner run-round --round 1`` end to end on SQLite: budgets, records, stopping rules, samplers
and the live status; trials that fail and workers that crash are ``test_round1_failures.py``."""

from __future__ import annotations

import contextlib
import re
from pathlib import Path

from tests.orchestrate_tests.conftest import load_phase, run_tuner, sqlite_url, toy_study


def test_a_round_runs_its_budget_each_trial_describes_itself_and_a_larger_budget_adds_trials(
    tmp_path: Path, output_dir: Path
) -> None:
    study = toy_study(tmp_path, round1={"trials": 5})
    done = run_tuner(
        "run-round", str(study), "--round", "1", "--workers", "2", "--output-dir", str(output_dir)
    )
    assert done.returncode == 0, done.stdout + done.stderr
    phase = load_phase(sqlite_url(output_dir), "toy")
    trials = phase.trials
    assert [t.number for t in trials] == [0, 1, 2, 3, 4]
    assert {t.state.name for t in trials} == {"COMPLETE"}
    lrs = [t.params["optimizer.lr"] for t in trials]
    assert len(set(lrs)) == 5 and all(0.01 <= lr <= 1.0 for lr in lrs)
    for trial in trials:
        attrs = trial.user_attrs
        run_dir = Path(attrs["run_dir"])
        assert run_dir == output_dir.resolve() / "toy" / "round-1" / f"trial-{trial.number:04d}"
        assert (run_dir / "metrics.csv").exists() and (run_dir / "checkpoints" / "latest.pt").exists()
        assert sorted(trial.intermediate_values) == [10, 20, 30, 40]
        assert trial.value == min(trial.intermediate_values.values())
        assert trial.intermediate_values[attrs["best_step"]] == trial.value
        assert attrs["max_train_steps"] == 40
        assert attrs["reproduce"].startswith(f"tuner train {study} --set optimizer.lr=")
        assert "--set max_train_steps=40" in attrs["reproduce"]
        assert "git_commit" in attrs and "git_dirty" in attrs
    assert "best trial" in done.stdout and "reproduce" in done.stdout

    again = run_tuner(
        "run-round", str(study), "--round", "1", "--workers", "2", "--output-dir", str(output_dir)
    )
    assert again.returncode == 0, again.stderr
    assert len(load_phase(sqlite_url(output_dir), "toy").trials) == 5  # nothing left to do, nothing added
    assert "5/5 done" in again.stdout
    assert "nothing left to run (no worker started)" in again.stderr  # no torch imported for nothing
    logs = [p.name for p in (output_dir / "toy" / "round-1" / ".workers").glob("*.log")]
    assert sorted(name.split("@")[0] for name in logs) == ["cpu0", "cpu1", "warm-start"], (
        logs
    )  # the first run's

    # a larger budget adds trials to the same phase; a smaller one is refused
    common = ("--round", "1", "--workers", "1", "--output-dir", str(output_dir))
    assert run_tuner("run-round", str(study), *common, "--trials", "6").returncode == 0
    trials = load_phase(sqlite_url(output_dir), "toy").trials
    assert [t.number for t in trials] == list(range(6)) and {t.state.name for t in trials} == {"COMPLETE"}
    smaller = run_tuner("run-round", str(study), *common, "--trials", "1")
    assert smaller.returncode == 2
    assert "already has 6 trials" in smaller.stderr and "Traceback" not in smaller.stderr


def test_trials_given_once_hold_until_given_again(tmp_path: Path, output_dir: Path) -> None:
    """``--trials 3`` (as ``tune`` gives round 1 its share): the same phase run again without
    ``--trials`` keeps 3, not the file's 4 (which would spend past the budget it was planned
    in); ``--trials 5`` grows it."""
    study = toy_study(tmp_path, round1={"trials": 4, "steps": 10})
    args = ("run-round", str(study), "--round", "1", "--workers", "1", "--output-dir", str(output_dir))
    assert run_tuner(*args, "--trials", "3").returncode == 0
    again = run_tuner(*args)
    assert again.returncode == 0, again.stderr
    assert len(load_phase(sqlite_url(output_dir), "toy").trials) == 3
    grown = run_tuner(*args, "--trials", "5")
    assert grown.returncode == 0, grown.stderr
    assert len(load_phase(sqlite_url(output_dir), "toy").trials) == 5


def test_no_new_best_in_n_completed_trials_stops_the_round_with_exit_0(
    tmp_path: Path, output_dir: Path
) -> None:
    # the searched option changes nothing the toy trains: every trial scores the same, so trial 0
    # stays the best and the round stops after 1 + N completed trials
    space = {"workload.fail_at_step": {"type": "int", "low": 100, "high": 200}}
    study = toy_study(tmp_path, options={"fail_at_step": 150}, search_space=space, round1={"trials": 6})
    common = ("--round", "1", "--workers", "1", "--output-dir", str(output_dir))
    patience = ("--set", "rounds.round1.stop_after_no_improvement=2")
    done = run_tuner("run-round", str(study), *common, *patience)
    assert done.returncode == 0, done.stdout + done.stderr
    trials = load_phase(sqlite_url(output_dir), "toy").trials
    assert [t.state.name for t in trials] == ["COMPLETE"] * 3 and len({t.value for t in trials}) == 1
    best = f"best val/error_rate {trials[0].value:.6g} from trial 0"
    assert (
        f"stopped starting trials: no new best in the last 2 completed trials ({best}; "
        "rounds.round1.stop_after_no_improvement: 2)"
    ) in done.stdout
    assert "3/6 done" in done.stdout and "interrupted" not in done.stderr
    # the rule is read from the storage: running again stops at once, a larger N goes on
    again = run_tuner("run-round", str(study), *common, *patience)
    assert again.returncode == 0 and "no new best in the last 2 completed trials" in again.stdout
    assert len(load_phase(sqlite_url(output_dir), "toy").trials) == 3
    more = run_tuner("run-round", str(study), *common, "--set", "rounds.round1.stop_after_no_improvement=3")
    assert more.returncode == 0, more.stdout + more.stderr
    assert len(load_phase(sqlite_url(output_dir), "toy").trials) == 4
    assert "no new best in the last 3 completed trials" in more.stdout


def test_the_wall_time_budget_stops_new_trials_and_a_rerun_continues(
    tmp_path: Path, output_dir: Path
) -> None:
    # trials of at least 2 s (40 steps of 50 ms) against a budget of 1.8 s: the phase stops early
    study = toy_study(tmp_path, options={"step_sleep_s": 0.05}, round1={"trials": 4})
    common = ("--round", "1", "--workers", "1", "--output-dir", str(output_dir))
    done = run_tuner("run-round", str(study), *common, "--set", "rounds.round1.timeout_h=0.0005")
    assert done.returncode == 0, done.stdout + done.stderr
    trials = load_phase(sqlite_url(output_dir), "toy").trials
    assert len(trials) < 4 and {t.state.name for t in trials} <= {"COMPLETE"}
    assert re.search(
        r"^stopped starting trials: the 0\.0005 h wall-time budget \(rounds\.round1\.timeout_h\) ran out "
        rf"after {len(trials)} of 4 trials; run the same command again to continue$",
        done.stdout,
        re.M,
    ), done.stdout
    # the same command again opens a new window (here with time enough to finish)
    again = run_tuner("run-round", str(study), *common, "--set", "rounds.round1.timeout_h=1")
    assert again.returncode == 0, again.stdout + again.stderr
    assert [t.state.name for t in load_phase(sqlite_url(output_dir), "toy").trials] == ["COMPLETE"] * 4
    assert "4/4 done" in again.stdout and "stopped starting trials" not in again.stdout


def test_tpe_trials_and_their_reproduce_command_give_the_same_run(tmp_path: Path, output_dir: Path) -> None:
    import shlex

    study = toy_study(tmp_path, round1={"trials": 3, "sampler": "tpe"})
    done = run_tuner(
        "run-round", str(study), "--round", "1", "--workers", "1", "--output-dir", str(output_dir)
    )
    assert done.returncode == 0, done.stdout + done.stderr
    trials = load_phase(sqlite_url(output_dir), "toy").trials
    assert {t.state.name for t in trials} == {"COMPLETE"} and len(
        {t.params["optimizer.lr"] for t in trials}
    ) == 3
    best = min(trials, key=lambda t: t.value)
    words = shlex.split(best.user_attrs["reproduce"])
    assert words[:2] == ["tuner", "train"]
    again = run_tuner(*words[1:], "--no-progress")
    assert again.returncode == 0, again.stderr
    assert (
        f"best         val/error_rate = {best.value:.6g} at step {best.user_attrs['best_step']}"
        in again.stdout
    )


def test_a_tpe_trial_after_a_failed_one_is_sampled_from_the_study_as_it_is_now(
    tmp_path: Path, output_dir: Path
) -> None:
    """The sampler reads the study through Optuna's per-thread cache of its trials, which ``ask``
    and ``tell`` empty. A trial that crashed is failed without ``tell``, so the next trial's TPE
    sampling used to read the list cached while the crashed one was sampled (without the trial
    being sampled now) and crashed too, with a ``KeyError``: every trial after a failure."""
    markers = tmp_path / "markers"
    markers.mkdir()
    study = toy_study(
        tmp_path,
        round1={"trials": 3, "sampler": "tpe", "max_retries": 0, "max_failed": 2},  # the next is sampled
        options={"fail": "crash_once", "fail_at_step": 2, "marker_dir": str(markers)},  # after a step
    )
    done = run_tuner(
        "run-round", str(study), "--round", "1", "--workers", "1", "--output-dir", str(output_dir)
    )
    assert done.returncode == 0, done.stdout + done.stderr
    trials = load_phase(sqlite_url(output_dir), "toy").trials
    failed = [t for t in trials if t.state.name == "FAIL"]
    assert len(failed) == 1 and "crashes once" in failed[0].user_attrs["error"], [
        (t.number, t.state.name, t.user_attrs.get("error")) for t in trials
    ]
    assert sorted(t.user_attrs["slot"] for t in trials if t.state.name == "COMPLETE") == [1, 2]


def test_a_workers_status_follows_its_trials_step_between_evaluations(
    tmp_path: Path, output_dir: Path
) -> None:
    """The live view's step column reads the worker's status file: it moves with the trial's
    steps (every second or so), not only at its evaluations (every 10 steps here)."""
    import json
    import time

    from tests.orchestrate_tests.conftest import PATIENCE_S, start_tuner

    # 0.13 s a step: a beacon each second lands between evaluations (10 steps would take 1 s to the
    # beat, and every sample could land on an evaluation step)
    study = toy_study(tmp_path, round1={"trials": 1, "steps": 40}, options={"step_sleep_s": 0.13})
    command = start_tuner(
        "run-round",
        str(study),
        "--round",
        "1",
        "--workers",
        "1",
        "--no-progress",
        "--output-dir",
        str(output_dir),
    )
    status = output_dir / "toy" / "round-1" / ".workers"
    seen: set[int] = set()
    deadline = time.monotonic() + PATIENCE_S
    while command.poll() is None and time.monotonic() < deadline:
        for path in status.glob("*.json"):
            with contextlib.suppress(OSError, ValueError):
                step = json.loads(path.read_text()).get("step")
                if step:
                    seen.add(int(step))
        time.sleep(0.05)
    command.communicate(timeout=PATIENCE_S)
    assert command.returncode == 0, command.output()
    assert any(step % 10 for step in seen), seen  # a step between two evaluations was shown
