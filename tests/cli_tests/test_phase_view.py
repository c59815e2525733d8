"""The phase view names trials by slot and attempt, says when its view is stale, and shows a long
phase the way its watcher wants it: one bar with counts and an ETA, one row per worker, 80 columns."""

from __future__ import annotations

import dataclasses
import io
import time
from datetime import datetime

import optuna
import pytest
from optuna.distributions import FloatDistribution
from rich.console import Console

from tuner.cli._phase_view import PhaseView, duration, render, short_params, trial_line, worker_cells
from tuner.orchestrate.budget import count_trials
from tuner.orchestrate.phase import PhaseSettings
from tuner.orchestrate.progress import PhaseSnapshot, phase_progress, worker_progress


def _trial(number: int, state: str, **attrs: object) -> optuna.trial.FrozenTrial:
    trial = optuna.trial.create_trial(
        state=optuna.trial.TrialState[state],
        value=0.5 if state == "COMPLETE" else None,
        user_attrs={"best_step": 40, **attrs},
    )
    trial.number = number
    return trial


TRIALS = [
    _trial(0, "FAIL", slot=0, attempt=0, failure_reason="crashed", error="boom", retried=True),
    _trial(1, "COMPLETE", slot=1, attempt=0),
    _trial(2, "RUNNING", slot=0, attempt=1),
]


def _snapshot() -> PhaseSnapshot:
    return PhaseSnapshot(count_trials(TRIALS), PhaseSettings.build(4), trials=TRIALS)


def test_trial_lines_name_the_slot_and_the_retry_not_optunas_number() -> None:
    assert trial_line(TRIALS[0], "val/error_rate") == "trial    0  crashed: boom  (retry 1 queued)"
    assert trial_line(TRIALS[1], "val/error_rate") == "trial    1  complete  val/error_rate 0.5 at step 40"
    assert trial_line(TRIALS[2], "val/error_rate") == "trial    0 (retry 1)  running"


def test_a_stop_that_spends_no_retry_says_it_continues_and_names_its_reason_once() -> None:
    full = _trial(
        3, "FAIL", slot=3, attempt=0, failure_reason="disk_full", retried=True,
        error="disk full: no space left on device writing runs/x (the trial continues later)",
    )  # fmt: skip
    assert trial_line(full, "val/error_rate") == (
        "trial    3  disk_full: disk full: no space left on device writing runs/x (the trial continues "
        "later)  (continues from its checkpoint)"
    )
    stopped = _trial(
        4, "FAIL", slot=4, attempt=0, failure_reason="interrupted", error="interrupted", retried=True
    )
    assert trial_line(stopped, "val/error_rate") == "trial    4  interrupted  (continues from its checkpoint)"


def test_a_workers_row_names_its_trial_by_slot_and_attempt() -> None:
    worker = {"label": "cpu0", "state": "training", "detail": "step 30", "trial": 2, "step": 30, "total": 40}
    label, trial, _, step, _, _ = worker_cells(worker_progress(worker, _snapshot()))
    assert (label, trial, step) == ("cpu0", "0 (retry 1)", "██████░░ 30/40")
    waiting = {"label": "cpu1", "state": "waiting", "detail": "the last trials are running"}
    assert worker_cells(worker_progress(waiting, _snapshot())) == (
        "cpu1", "", "waiting: the last trials are running", "", "", "",
    )  # fmt: skip


def test_a_stale_view_says_since_when_on_a_terminal_and_in_a_log() -> None:
    since = time.time()
    clock = time.strftime("%H:%M:%S", time.localtime(since))
    for live in (True, False):
        buffer = io.StringIO()
        console = Console(
            file=buffer,
            force_terminal=live,
            force_interactive=live,
            width=120,
            color_system=None,
            highlight=False,
        )
        view = PhaseView(console, "round-1", "val/error_rate", live=live, since=0)
        view.update(_snapshot())
        view.update(None, since)  # nothing readable yet: still says so
        stale = PhaseSnapshot(count_trials(TRIALS), PhaseSettings.build(4), trials=TRIALS, stale_since=since)
        view.update(stale)
        view.update(_snapshot())
        view.close()
        if live:
            assert f"storage unreachable since {clock}, showing the last view" in buffer.getvalue()
        else:
            assert "storage reachable again" in buffer.getvalue()


# -- the live panel: constructed phases rendered at 80 columns ------------------------------------
NOW = 1_700_000_000.0
SPACE = {
    "optimizer.lr": FloatDistribution(1e-5, 1.0, log=True),
    "optimizer.weight_decay": FloatDistribution(0.0, 1.0),
    "model.dropout": FloatDistribution(0.0, 1.0),
}


def _timed(
    number: int,
    state: str,
    *,
    started: float | None = None,  # seconds before NOW
    took: float | None = None,
    values: dict[int, float] | None = None,
    **attrs: object,
) -> optuna.trial.FrozenTrial:
    trial = optuna.trial.create_trial(
        state=optuna.trial.TrialState[state],
        value=0.1 + number / 100 if state == "COMPLETE" else None,
        params={
            "optimizer.lr": 0.0031 * (number + 1),
            "optimizer.weight_decay": 1.2e-5,
            "model.dropout": 0.03,
        },
        distributions=SPACE,
        user_attrs={"slot": number, "attempt": 0, "max_train_steps": 1000, **attrs},
        intermediate_values=values or {},
    )
    trial.number = number
    if started is not None:
        trial.datetime_start = datetime.fromtimestamp(NOW - started)
        trial.datetime_complete = datetime.fromtimestamp(NOW - started + took) if took is not None else None
    return trial


def _phase(trials: list[optuna.trial.FrozenTrial], workers: list[dict], budget: int = 20) -> PhaseSnapshot:
    return PhaseSnapshot(count_trials(trials), PhaseSettings.build(budget), workers=workers, trials=trials)


def _screen(snapshot: PhaseSnapshot, phase: str = "sweep-lr", width: int = 80) -> list[str]:
    console = Console(width=width, record=True, color_system=None, file=io.StringIO())
    console.print(render(snapshot, phase, "val/error_rate", now=NOW))
    lines = console.export_text().splitlines()
    assert all(len(line) <= width for line in lines), "\n".join(lines)
    return [line.rstrip() for line in lines]


# two workers on a 20-trial phase: 2 completed (100 s and 120 s), 1 diverged, 1 crashed, 2 running
MIDWAY = [
    _timed(0, "COMPLETE", started=400, took=100),
    _timed(1, "COMPLETE", started=300, took=120),
    _timed(2, "FAIL", started=170, took=5, failure_reason="diverged"),
    _timed(3, "FAIL", started=160, took=1, failure_reason="crashed", error="boom"),
    _timed(4, "RUNNING", started=40, values={100: 0.31, 300: 0.2345}),
    _timed(5, "RUNNING", started=130),
]
WORKERS = [
    {"label": "cpu0", "state": "training", "trial": 4, "step": 300, "total": 1000, "updated_at": NOW},
    {"label": "cpu1", "state": "training", "trial": 5, "updated_at": NOW, "trial_started_at": NOW - 125},
]


def test_the_bar_counts_done_running_failed_and_diverged_apart_with_an_eta_from_measured_trials() -> None:
    progress = phase_progress(_phase(MIDWAY, WORKERS), NOW, workers=2)
    assert (progress.done, progress.running, progress.failed, progress.diverged) == (2, 2, 1, 1)
    assert progress.failure_summary == "1 crashed"  # diverged is not a failure
    assert progress.mean_trial_s == 110
    # 14 trials to start at 110 s, plus the running ones' rest (70 s; trial 5 is past the mean: 0),
    # over 2 workers
    assert progress.eta_s == (14 * 110 + 70) / 2
    screen = _screen(_phase(MIDWAY, WORKERS))
    assert screen[0].startswith("sweep-lr █") and screen[0].endswith(f"4/20 ETA {duration(progress.eta_s)}")
    assert duration(progress.eta_s) == "13m 25s"
    assert screen[1] == "2 done · 2 running · 1 failed: 1 crashed (limit 6) · 1 diverged · 14 to start"
    assert screen[2] == "best val/error_rate 0.1 (trial 0)"


def test_the_eta_is_unknown_until_a_trial_completes_and_never_shorter_than_a_running_trials_rest() -> None:
    starting = [
        _timed(0, "RUNNING", started=30),
        _timed(1, "FAIL", started=20, took=2, failure_reason="diverged"),
    ]
    assert phase_progress(_phase(starting, []), NOW).eta_s is None
    assert "ETA unknown" in _screen(_phase(starting, []))[0]
    # the last trial runs, one of 100 s completed: 60 s to go even with 4 idle workers
    ending = [_timed(0, "COMPLETE", started=300, took=100), _timed(1, "RUNNING", started=40)]
    assert phase_progress(_phase(ending, [], budget=2), NOW, workers=4).eta_s == 60


def test_a_row_per_worker_shows_its_trial_params_step_value_and_elapsed_time() -> None:
    screen = _screen(_phase(MIDWAY, [*WORKERS, {"label": "cpu2", "state": "waiting", "detail": "idle"}]))
    header = next(line for line in screen if line.startswith("worker"))
    assert header.split() == ["worker", "trial", "params", "step", "error_rate", "time"]
    rows = {line.split()[0]: line for line in screen[screen.index(header) + 1 :]}
    assert rows["cpu0"].split()[1:3] == ["4", "lr=0.0155"]  # slot 4's lr, 3 significant digits
    assert "██░░░░░░ 300/1000" in rows["cpu0"]  # from the status file
    assert rows["cpu0"].split()[-2:] == ["0.2345", "40s"]  # latest value from the storage, time since start
    assert "░░░░░░░░ 0/1000" in rows["cpu1"]  # total from the trial's max_train_steps
    assert rows["cpu1"].split()[-2:] == ["2m", "05s"]  # from the worker's trial_started_at
    assert rows["cpu2"].split()[1:] == ["waiting:", "idle"]


def test_params_are_short_dotted_keys_by_their_last_part_in_three_significant_digits() -> None:
    params = {
        "optimizer.lr": 0.0031234,
        "optimizer.weight_decay": 1.2345e-5,
        "model.dropout": 0.03,
        "model.depth": 4,
    }
    assert short_params(params) == "lr=0.00312 wd=1.23e-05 dropout=0.03 depth=4"
    assert short_params(params, width=20) == "lr=0.00312 wd=1.23e…"
    assert (
        short_params({"encoder.dropout": 0.1, "head.dropout": 0.25})
        == "encoder.dropout=0.1 head.dropout=0.25"
    )


def test_the_panel_fits_80_columns_with_long_labels_params_retries_and_failure_reasons() -> None:
    many = {f"model.block{i}.very_long_parameter_name_{i}": 1.23456789e-7 * (i + 1) for i in range(8)}
    trial = optuna.trial.create_trial(
        state=optuna.trial.TrialState.RUNNING,
        params=many,
        distributions={key: FloatDistribution(0.0, 1.0) for key in many},
        user_attrs={"slot": 123, "attempt": 2, "max_train_steps": 1_000_000},
        intermediate_values={999_000: -1.23456789e-12},
    )
    trial.number = 100
    failures = [
        _timed(n, "FAIL", failure_reason=reason, error="x")
        for n, reason in enumerate(["crashed", "oom", "timeout", "killed", "interrupted"] * 3)
    ]
    worker = {
        "label": "gpu-server-17/cuda:3",
        "state": "training",
        "trial": 100,
        "step": 999_000,
        "updated_at": NOW,
    }
    for width in (80, 120):
        screen = _screen(_phase([*failures, trial], [worker], budget=1000), phase="round-12", width=width)
        row = next(line for line in screen if "123 (retry 2)" in line)
        assert "…" in row and "999k/1M" in row


def test_a_log_gets_a_progress_line_with_the_eta_after_each_finished_trial() -> None:
    buffer = io.StringIO()
    console = Console(file=buffer, width=200, color_system=None, highlight=False)
    view = PhaseView(console, "round-2", "val/error_rate", live=False, since=0)
    view.update(_phase(MIDWAY[:4] + MIDWAY[5:], WORKERS))
    view.update(dataclasses.replace(_phase(MIDWAY, WORKERS), newly_finished=[]))  # nothing new: silent
    assert buffer.getvalue() == ""
    view.update(dataclasses.replace(_phase(MIDWAY, WORKERS), newly_finished=[MIDWAY[1]]))
    view.close()
    lines = buffer.getvalue().splitlines()
    assert lines[0] == "trial    1  complete  val/error_rate 0.11 at step None"
    assert lines[1].startswith(
        "round-2: 4/20 · 2 done · 2 running · 1 failed: 1 crashed (limit 6) · 1 diverged"
    )
    assert "best val/error_rate 0.1 (trial 0) · ETA " in lines[1]


def test_a_log_gets_a_progress_line_now_and_then_while_trials_run(monkeypatch: pytest.MonkeyPatch) -> None:
    import tuner.cli._phase_view as phase_view

    buffer = io.StringIO()
    console = Console(file=buffer, width=200, color_system=None, highlight=False)
    view = PhaseView(console, "sweep-lr", "val/error_rate", live=False, since=0)
    view.update(_phase(MIDWAY, WORKERS))
    assert buffer.getvalue() == ""  # not due yet
    monkeypatch.setattr(phase_view, "PROGRESS_EVERY_S", 0.0)
    view.update(_phase(MIDWAY, WORKERS))
    view.close()
    assert buffer.getvalue().startswith("sweep-lr: 4/20 · 2 done · 2 running")
