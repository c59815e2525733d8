"""``tuner run-round --round 1`` end to end on SQLite when trials fail, diverge or crash, and when
a worker itself crashes: what is retried, what spends the failure budget, what stops the round
at once, and the one line each case prints."""

from __future__ import annotations

import contextlib
import math
import re
from pathlib import Path

from tests.orchestrate_tests.conftest import load_phase, run_tuner, sqlite_url, toy_study


def test_a_workload_that_fails_before_its_first_step_stops_the_round_at_once_retrying_nothing(
    tmp_path: Path, output_dir: Path
) -> None:
    """Every trial would raise in ``build``: the round stops with one line (the user's error and
    what to do), exit 2, after the trials the two workers had started; none is retried. The same
    command again (another run window) tries one of them once more, and stops as before."""
    study = toy_study(tmp_path, options={"fail": "raise"}, round1={"trials": 9})
    args = ("run-round", str(study), "--round", "1", "--workers", "2", "--output-dir", str(output_dir))
    done = run_tuner(*args)
    assert done.returncode == 2, done.stdout + done.stderr
    errors = [line for line in done.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and "Traceback" not in done.stderr
    assert errors[0].startswith("error: the workload raised ValueError: toy workload asked to fail at ")
    assert errors[0].endswith(
        "it failed before the first training step, as every trial would, so no trial was retried: "
        "fix it, then run the same command again"
    )
    trials = load_phase(sqlite_url(output_dir), "toy").trials
    assert 1 <= len(trials) <= 2 and all(t.state.name == "FAIL" for t in trials)
    assert not any(t.user_attrs["retried"] for t in trials)
    assert all(t.user_attrs["workload_broken"] for t in trials)
    again = run_tuner(*args, "--workers", "1")  # in case it was passing: one more try, no more
    assert again.returncode == 2
    # a retry is enqueued for each slot the first run failed (one or two); one worker runs one,
    # it fails before its first step as before, and the phase stops: the other waits for a fix
    again_trials = load_phase(sqlite_url(output_dir), "toy").trials
    tried = [t for t in again_trials if t.user_attrs.get("tried_again") and t.state.name != "WAITING"]
    assert len(tried) == 1 and tried[0].user_attrs["retry_of"] in {t.number for t in trials}
    waiting = [t for t in again_trials if t.state.name == "WAITING"]
    assert len(waiting) == len(trials) - 1 and all(t.user_attrs["tried_again"] for t in waiting)


def test_an_option_the_workload_never_reads_stops_the_round_before_any_step(
    tmp_path: Path, output_dir: Path
) -> None:
    """``fial: raise`` (for ``fail``) would train every trial with the default and say nothing:
    each trial's build refuses it, and the round stops at once, as for any broken workload."""
    study = toy_study(tmp_path, options={"fial": "raise"}, round1={"trials": 4})
    done = run_tuner(
        "run-round", str(study), "--round", "1", "--workers", "1", "--output-dir", str(output_dir)
    )
    assert done.returncode == 2, done.stdout + done.stderr
    errors = [line for line in done.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and "Traceback" not in done.stderr
    assert errors[0].startswith(
        "error: workload option 'fial' was never read by toy_workload.py:build (it read: diverge, fail, "
        "fail_at_step, fit_at_steps, marker_dir, nan_above_weight, step_sleep_s; did you mean 'fail'?)"
    )
    trials = load_phase(sqlite_url(output_dir), "toy").trials
    assert len(trials) == 1 and trials[0].user_attrs["workload_broken"]
    assert not list(output_dir.rglob("metrics.csv"))  # not one step trained


def test_an_objective_the_workload_never_computes_stops_the_round_at_once(
    tmp_path: Path, output_dir: Path
) -> None:
    """``val/top5_accuracy`` passes ``tuner validate`` (a metric the engine knows) but the toy
    workload does not compute it: one line naming what it computes, exit 2, no retry; the study
    fixed, the same folder goes on (the phase starts over)."""
    study = toy_study(tmp_path, round1={"trials": 6})
    done = run_tuner(
        "run-round", str(study), "--round", "1", "--workers", "1", "--output-dir", str(output_dir),
        "--set", "objective.metric=val/top5_accuracy", "--set", "objective.direction=maximize",
    )  # fmt: skip
    assert done.returncode == 2, done.stdout + done.stderr
    errors = [line for line in done.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1
    assert errors[0].startswith(
        "error: objective.metric 'val/top5_accuracy' is not computed by this workload; it computes: val/loss,"
    )
    trials = load_phase(sqlite_url(output_dir), "toy").trials
    assert len(trials) == 1 and not trials[0].user_attrs["retried"]

    # the fix is the study itself: the phase trained nothing, so it starts over under the new file
    fixed = run_tuner(
        "run-round", str(study), "--round", "1", "--workers", "1", "--output-dir", str(output_dir)
    )
    assert fixed.returncode == 0, fixed.stdout + fixed.stderr
    aside = output_dir.resolve() / "toy" / "round-1" / ".started-over-1"
    assert "started over: every trial of toy/round-1 had failed before its first step" in fixed.stderr
    assert (aside / "trial-0000" / "error.log").exists()
    trials = load_phase(sqlite_url(output_dir), "toy").trials
    assert len(trials) == 6 and {t.state.name for t in trials} == {"COMPLETE"}
    changed = run_tuner(  # a phase that trained keeps its configuration: refused as before
        "run-round", str(study), "--round", "1", "--output-dir", str(output_dir), "--set", "seed=3"
    )
    assert (
        changed.returncode == 2 and "differs from the study file that created toy/round-1" in changed.stderr
    )


def test_a_phase_where_every_trial_raises_after_a_step_stops_at_max_failed_or_one_past(
    tmp_path: Path, output_dir: Path
) -> None:
    """The trials train a step first (proving the workload runs), then raise: the failure
    budget, not the broken-workload rule, stops the phase. A trial that has trained a step no
    longer holds back the other worker (``budget.decide``), so a claim made between its first
    step and its failure overshoots the budget by one at most (W - 1, two workers): rare, but
    seen under a loaded CI run."""
    study = toy_study(tmp_path, options={"fail": "raise_at_step", "fail_at_step": 2}, round1={"trials": 9})
    done = run_tuner(
        "run-round", str(study), "--round", "1", "--workers", "2", "--max-failed", "3",
        "--output-dir", str(output_dir),
    )  # fmt: skip
    assert done.returncode == 1, done.stdout + done.stderr
    assert "Traceback" not in done.stderr
    trials = load_phase(sqlite_url(output_dir), "toy").trials
    final = [t for t in trials if t.state.name == "FAIL" and not t.user_attrs["retried"]]
    assert len(final) in (3, 4), done.stderr
    failed = len(final)
    assert f"failure budget is spent: {failed} trials failed ({failed} crashed), limit 3" in done.stderr
    (advice,) = [line for line in done.stderr.splitlines() if "read their error.log" in line]
    for trial in sorted(final, key=lambda t: t.number)[:3]:  # each failed slot's error.log, by its
        assert f"round-1/trial-{trial.user_attrs['slot']:04d}/error.log" in advice, advice  # folder
    assert advice.endswith(" and 1 more") == (failed == 4), advice
    assert "diverged" not in done.stderr
    assert not [t for t in trials if t.state.name == "RUNNING"]
    # the default single retry happened for each failed slot, and it failed the same way
    retried = [t for t in trials if t.state.name == "FAIL" and t.user_attrs["retried"]]
    # (a retry of a fourth slot may have been queued when the budget was spent: it never starts)
    assert {t.user_attrs["retry_of"] for t in final} <= {t.number for t in retried}
    assert not [t for t in trials if t.state.name == "RUNNING"]
    for trial in final:
        assert trial.user_attrs["failure_reason"] == "crashed"
        # the workload's own error, in tuner's words (no exception class name in front of them)
        expected = "the workload raised RuntimeError: toy workload fails at step 2 at "
        assert trial.user_attrs["error"].startswith(expected), trial.user_attrs["error"]
        assert (
            "RuntimeError: toy workload fails at step 2"
            in (Path(trial.user_attrs["run_dir"]) / "error.log").read_text()
        )


def test_nan_trials_are_recorded_as_diverged_and_never_chosen_as_best(
    tmp_path: Path, output_dir: Path
) -> None:
    space = {"workload.diverge": {"type": "categorical", "choices": [True, False]}}
    study = toy_study(
        tmp_path, options={"diverge": False}, search_space=space, round1={"trials": 6, "max_failed": 6}
    )
    done = run_tuner("run-round", str(study), "--round", "1", "--output-dir", str(output_dir))
    assert done.returncode == 0, done.stdout + done.stderr
    phase = load_phase(sqlite_url(output_dir), "toy")
    diverged = [t for t in phase.trials if t.params["workload.diverge"]]
    healthy = [t for t in phase.trials if not t.params["workload.diverge"]]
    assert diverged and healthy and len(phase.trials) == 6  # diverged trials are not retried
    for trial in diverged:
        assert trial.state.name == "FAIL" and trial.user_attrs["failure_reason"] == "diverged"
        assert not trial.user_attrs["retried"]
    assert phase.best_trial.number in {t.number for t in healthy}
    assert math.isfinite(phase.best_value)
    assert "diverged" in done.stdout


def test_a_crashed_trial_is_retried_from_its_last_checkpoint(tmp_path: Path, output_dir: Path) -> None:
    study = toy_study(
        tmp_path,
        options={"fail": "crash_once", "fail_at_step": 25, "marker_dir": str(tmp_path)},
        round1={"trials": 1},
    )
    done = run_tuner(
        "run-round", str(study), "--round", "1", "--workers", "1", "--output-dir", str(output_dir)
    )
    assert done.returncode == 0, done.stdout + done.stderr
    first, retry = load_phase(sqlite_url(output_dir), "toy").trials
    assert first.state.name == "FAIL" and first.user_attrs["failure_reason"] == "crashed"
    assert first.user_attrs["retried"] and first.user_attrs["last_checkpoint_step"] == 20
    assert retry.state.name == "COMPLETE" and retry.user_attrs["retry_of"] == 0
    assert retry.user_attrs["resumed_from_step"] == 20  # steps 1-20 were not trained again
    assert retry.user_attrs["run_dir"] == first.user_attrs["run_dir"]
    assert retry.params == first.params
    assert sorted(retry.intermediate_values) == [30, 40]
    # on screen, both are slot 0 (folder trial-0000); Optuna numbers the retry 1
    assert re.search(
        r"^trial    0  crashed: the workload raised RuntimeError: toy workload crashes once at "
        r"\S*toy_workload\.py:\d+ in loss_fn \(traceback: \S+/trial-0000/error\.log\)  \(retry 1 queued\)$",
        done.stderr,
        re.M,
    ), done.stderr
    assert "trial    0 (retry 1)  complete  val/error_rate" in done.stderr
    assert "best val/error_rate" in done.stdout and "(trial 0 (retry 1))" in done.stdout
    assert "best trial   0 (retry 1): val/error_rate = " in done.stdout
    assert "trial    1" not in done.stdout + done.stderr
    assert re.search(r"1 trial of 40 steps \(quasi-random\), 1 worker \(cpu0@\S+:\d+\)", done.stderr)


def test_a_phase_where_every_trial_diverges_completes_without_spending_the_failure_budget(
    tmp_path: Path, output_dir: Path
) -> None:
    study = toy_study(tmp_path, options={"diverge": True}, round1={"trials": 3, "max_failed": 1})
    done = run_tuner(
        "run-round", str(study), "--round", "1", "--workers", "1", "--output-dir", str(output_dir)
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "3/3 done · 0 running · 0 failed (limit 1) · 3 diverged" in done.stdout
    assert (
        "diverged     3 trials (NaN/inf loss; not counted against the failure budget): "
        "trial 0, trial 1, trial 2" in done.stdout
    )
    assert "no trial reached a finite val/error_rate: lower the learning rate" in done.stderr
    assert "failure budget" not in done.stderr and "error.log" not in done.stderr
    trials = load_phase(sqlite_url(output_dir), "toy").trials
    assert len(trials) == 3  # never retried
    assert {(t.state.name, t.user_attrs["failure_reason"], t.user_attrs["retried"]) for t in trials} == {
        ("FAIL", "diverged", False)
    }


def test_a_worker_that_crashes_is_reported_as_crashed_with_exit_70(tmp_path: Path, output_dir: Path) -> None:
    """A bug in the worker (here: a corrupted trial record it cannot read) is not a spent budget."""
    from tuner.playbook import start_round
    from tuner.spec import load_study

    study = toy_study(tmp_path, round1={"trials": 2})
    start_round(load_study(study), "round-1", output_dir)
    phase = load_phase(sqlite_url(output_dir), "toy")
    phase.enqueue_trial({"optimizer.lr": 0.1}, user_attrs={"slot": 0, "attempt": 0, "run_dir": 7})

    worker = run_tuner("worker", str(study), "--phase", "round-1", "--output-dir", str(output_dir))
    assert worker.returncode == 70, worker.stdout + worker.stderr
    assert worker.stderr.startswith("error: internal error (TypeError): expected str"), worker.stderr

    done = run_tuner(
        "run-round", str(study), "--round", "1", "--workers", "1", "--output-dir", str(output_dir)
    )
    assert done.returncode == 70, done.stdout + done.stderr
    (log,) = (output_dir / "toy" / "round-1" / ".workers").glob("cpu0@*.log")  # cpu0@host:pid
    label = log.stem
    (line,) = [line for line in done.stderr.splitlines() if line.startswith(f"error: worker {label}")]
    assert line.startswith(f"error: worker {label} crashed: internal error (TypeError): expected"), line
    assert line.endswith(f"; its log: {log}"), line
    assert "internal error (TypeError)" in log.read_text()
    assert "Traceback" not in done.stderr


def test_a_worker_killed_by_sigkill_is_replaced_and_its_trial_retried(
    tmp_path: Path, output_dir: Path
) -> None:
    """The kernel's OOM killer takes the worker itself (not only its trial): run-round starts it
    again, the lost trial goes stale and is retried, and the round completes (exit 0) instead
    of ending with "worker died of SIGKILL" and exit 70."""
    import json
    import os
    import signal
    import time

    from tests.orchestrate_tests.conftest import PATIENCE_S, start_tuner, tuner_env

    study = toy_study(tmp_path, round1={"trials": 3, "steps": 40}, options={"step_sleep_s": 0.05})
    command = start_tuner(
        "run-round", str(study), "--round", "1", "--workers", "1", "--no-progress", "--output-dir",
        str(output_dir), env=tuner_env(TUNER_HEARTBEAT_GRACE_S="3"),
    )  # fmt: skip
    status = output_dir / "toy" / "round-1" / ".workers"
    deadline = time.monotonic() + PATIENCE_S
    killed = None
    while time.monotonic() < deadline and killed is None:  # its first trial past its first step
        for path in status.glob("*.json"):
            with contextlib.suppress(OSError, ValueError):
                worker = json.loads(path.read_text())
                if worker.get("state") == "training" and worker.get("step"):
                    killed = int(worker["pid"])
        time.sleep(0.05)
    assert killed is not None, command.output()
    os.kill(killed, signal.SIGKILL)
    output, _ = command.communicate(timeout=2 * PATIENCE_S)
    assert command.returncode == 0, output
    assert "was killed by SIGKILL (as the kernel's OOM killer does) and started again (1 time)" in output
    assert "died of SIGKILL" not in output
    trials = load_phase(sqlite_url(output_dir), "toy").trials
    final = {t.user_attrs["slot"]: t.state.name for t in trials if not t.user_attrs.get("retried")}
    assert final == {0: "COMPLETE", 1: "COMPLETE", 2: "COMPLETE"}
    assert any(t.user_attrs.get("failure_reason") == "killed" for t in trials)  # the lost trial, retried
