"""`tuner train` end to end: the run folder, Ctrl-C and re-run, overrides, bad input."""

from __future__ import annotations

import csv
import os
import signal
import subprocess
import sys
from pathlib import Path

import yaml
from typer.testing import CliRunner

from tests._processes import finish, spawn, wait_for
from tests.train_tests.conftest import write_study
from tuner.cli.app import app
from tuner.train import read_status


def tuner(*args: str) -> subprocess.Popen[str]:
    """``tuner ARGS`` in a process group of its own, killed with the test if it is left running."""
    return spawn(
        [sys.executable, "-m", "tuner", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "TUNER_DEBUG": ""},
    )


def _rows(metrics: Path) -> int:
    """Rows in ``metrics.csv`` (they are flushed at evals): the run's progress."""
    return metrics.read_text().count("\n") - 1 if metrics.exists() else 0


def test_ctrl_c_then_rerun_continues_where_it_stopped(tmp_path: Path) -> None:
    study = write_study(tmp_path, max_train_steps=1000, eval_every=100, log_every=10)
    runs = tmp_path / "runs"
    process = tuner("train", str(study), "--output-dir", str(runs), "--no-progress")
    metrics = runs / "engine-test" / "train" / "run-001" / "metrics.csv"
    # Ctrl-C once the step-100 eval has flushed its rows: mid-run however slow the machine is
    wait_for(lambda: _rows(metrics) >= 10, what="the rows of the step-100 eval", process=process)
    process.send_signal(signal.SIGINT)
    out, err = finish(process, lambda: _rows(metrics), what="the interrupted run")
    assert process.returncode == 130, err
    assert "run the same command again" in err
    status = read_status(metrics.parent)
    assert status["status"] == "interrupted" and 0 < status["step"] < 1000

    rerun = tuner("train", str(study), "--output-dir", str(runs), "--no-progress")
    out, err = finish(rerun, lambda: _rows(metrics), what="the resumed run")  # no deadline while it trains
    assert rerun.returncode == 0, err
    assert "resuming" in err and f"resumed from step {status['step']}" in out
    with metrics.open() as handle:
        steps = [int(r["step"]) for r in csv.DictReader(handle)]
    assert steps == list(range(10, 1010, 10))  # nothing lost, nothing logged twice


def test_a_finished_run_is_not_resumed_and_overrides_reach_the_run_folder(tmp_path: Path) -> None:
    study = write_study(tmp_path, max_train_steps=20, eval_every=10)
    args = ["train", str(study), "--output-dir", str(tmp_path / "runs"), "--no-progress"]
    first = CliRunner().invoke(app, args)
    second = CliRunner().invoke(app, [*args, "--set", "optimizer.lr=0.01", "--set", "workload.dropout=0.0"])
    assert first.exit_code == 0 and second.exit_code == 0, second.output
    run1, run2 = (tmp_path / "runs" / "engine-test" / "train" / name for name in ("run-001", "run-002"))
    assert str(run1) in first.output and str(run2) in second.output
    config = yaml.safe_load((run2 / "config.yaml").read_text())
    assert config["training"]["optimizer"]["lr"] == 0.01 and config["workload"]["options"]["dropout"] == 0.0
    command = (run2 / "command.txt").read_text()
    assert "--set optimizer.lr=0.01" in command and "--output-dir" in command
    assert "best         val/error_rate = " in second.output


def test_missing_max_train_steps_is_a_usage_error(tmp_path: Path) -> None:
    study = write_study(tmp_path, max_train_steps=None)
    result = CliRunner().invoke(app, ["train", str(study), "--output-dir", str(tmp_path / "runs")])
    assert result.exit_code == 2
    assert "max_train_steps is not set" in result.output and "Traceback" not in result.output


def test_objective_the_workload_does_not_compute_is_a_usage_error(tmp_path: Path) -> None:
    study = write_study(tmp_path)
    result = CliRunner().invoke(
        app,
        [
            "train",
            str(study),
            "--output-dir",
            str(tmp_path / "runs"),
            "--set",
            "objective.metric=val/perplexity",
        ],
    )
    assert result.exit_code == 2
    # found by the study checks before anything is built (the engine checks user workloads again)
    assert "'val/perplexity' is not a metric digits-mlp computes" in result.output
