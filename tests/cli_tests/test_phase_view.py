"""The phase view names trials by slot and attempt, and says when its view is stale."""

from __future__ import annotations

import io
import time

import optuna
from rich.console import Console

from tuner.cli._phase_view import PhaseView, trial_line, worker_row
from tuner.orchestrate.budget import count_trials
from tuner.orchestrate.phase import PhaseSettings
from tuner.orchestrate.progress import PhaseSnapshot


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


def test_a_workers_row_names_its_trial_by_slot_and_attempt() -> None:
    worker = {"label": "cpu0", "state": "training", "detail": "step 30", "trial": 2, "step": 30}
    assert worker_row(worker, _snapshot()) == ("cpu0", "training", "trial 0 (retry 1) · step 30")
    waiting = {"label": "cpu1", "state": "waiting", "detail": "the last trials are running"}
    assert worker_row(waiting, _snapshot()) == ("cpu1", "waiting", "the last trials are running")


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
