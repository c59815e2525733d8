"""Supervising a trial's child process: fork it, pump its messages, enforce the timeout and the
progress watchdog (``stall.py``), forward stop signals, and obey the heartbeat thread when another
worker ended the trial.

One stop signal always ends the trial within seconds, even one hung in workload code (where
it never reaches the step boundary at which it would obey): after the signal, the child must
show a sign of life (a step, an eval, a checkpoint, its end) within ``stop_response_s`` (the
larger of ``STOP_RESPONSE_S`` and 3 median steps), else it is killed; once it moved, it gets
``STOP_JOIN_S`` to write its checkpoint. Either way the trial is recorded ``interrupted``
(resumable, no retry spent).

Storage writes are not made here: each message goes to ``on_message`` (``record.Recorder``).
"""

from __future__ import annotations

import dataclasses
import gc
import math
import multiprocessing
import os
import signal
import sys
import time
from collections.abc import Callable

from tuner.orchestrate._process import SignalFlag
from tuner.orchestrate.heartbeat import HeartbeatThread
from tuner.orchestrate.messages import (
    Abandoned,
    ChildMessage,
    Errored,
    Evaluated,
    Exited,
    Finished,
    Outcome,
    Stalled,
    Started,
    TimedOut,
)
from tuner.orchestrate.outpaced import REFRESH_S, StepLimit
from tuner.orchestrate.stall import ProgressBeacon, StallRule, check_stall, dump_stacks
from tuner.orchestrate.trial_process import TrialJob, trial_main

STOP_JOIN_S = 30.0  # a child asked to stop gets this long to checkpoint before it is killed
STOP_RESPONSE_S = 10.0  # ... but must first show a sign of life this soon (or 3 median steps)
POLL_S = 0.25
STEP_REPORT_S = 1.0  # how often ``on_step`` hears the trial's step (a status file write each)


class TrialAbandoned(Exception):
    """A storage write for our trial found it finished by someone else."""


def supervise(
    job: TrialJob,
    *,
    threads: int | None,
    timeout_s: float | None,
    signals: SignalFlag,
    beat: HeartbeatThread,
    on_message: Callable[[ChildMessage], None],
    stall: StallRule | None = None,
    limit_of: Callable[[], int | None] | None = None,
    on_step: Callable[[int], None] | None = None,
) -> Outcome:
    """Fork the child and pump its messages until it ends; returns how it ended.

    ``on_step``: the step the child has reached (its beacon), at most every ``STEP_REPORT_S``
    and only when it moved: the live view's step column (evaluations alone come too seldom).

    ``limit_of``: the step from which the trial no longer matters to its phase (``outpaced.py``),
    read before the fork, at each of the child's evaluations and every ``REFRESH_S``.

    ``on_message`` may raise ``TrialAbandoned``: the child is then killed, like when the
    heartbeat thread finds the trial ended elsewhere.
    """
    context = multiprocessing.get_context("fork")
    reader, writer = context.Pipe(duplex=False)
    sys.stdout.flush()
    sys.stderr.flush()
    beacon = ProgressBeacon(context)
    limit = StepLimit(context) if limit_of is not None else None
    refresh = _LimitRefresh(limit, limit_of)
    refresh.now()
    child = context.Process(
        target=trial_main, args=(writer, job, threads, os.getpid(), beacon, limit), daemon=True
    )
    # as Python's gc docs advise before a fork: the child's collections then skip the worker's
    # objects instead of touching (and so copying) every page that holds one; the child unfreezes
    gc.freeze()
    try:
        child.start()
    finally:
        gc.unfreeze()
    writer.close()
    deadline = time.monotonic() + timeout_s if timeout_s else math.inf
    signals_seen = 0
    ready = False  # the child handles SIGTERM (checkpoint, then stop) once it has said "started"
    stopping = _StopClock(beacon)
    outcome: Outcome | None = None
    reported, next_report = 0, time.monotonic() + STEP_REPORT_S
    try:
        while outcome is None:
            if on_step is not None and time.monotonic() >= next_report:
                next_report = time.monotonic() + STEP_REPORT_S
                if beacon.step > reported:
                    reported = beacon.step
                    on_step(reported)
            if reader.poll(max(0.0, min(deadline - time.monotonic(), POLL_S))):
                try:
                    message = reader.recv()
                except (EOFError, OSError):
                    break  # the child is gone; its exit code says how
                if isinstance(message, Finished | Errored):
                    outcome = message
                else:
                    on_message(message)
                    if isinstance(message, Evaluated):
                        refresh.now()
                ready = ready or isinstance(message, Started)
            refresh.when_due()
            if beat.ended_elsewhere.is_set():
                outcome = Abandoned()
            elif time.monotonic() >= deadline:
                outcome = TimedOut(float(timeout_s or 0))
            elif not signals.count and (stalled := check_stall(beacon, stall or StallRule())):
                outcome = dataclasses.replace(stalled, stacks=_stacks(child, job))
            if signals.count and stopping.overdue():
                child.kill()  # hung where it cannot obey: the pipe's end then ends this loop
                stopping.killed = True
            if signals.count > signals_seen and (ready or signals.count > 1):
                signals_seen = signals.count
                if child.pid is not None and child.is_alive():
                    # first signal: a clean stop with a checkpoint; second: now
                    os.kill(child.pid, signal.SIGTERM if signals_seen == 1 else signal.SIGKILL)
    except TrialAbandoned:
        outcome = Abandoned()
    except BaseException:
        # anything else (a storage outage longer than the retries, a bug) ends the worker: the
        # child must not train on unsupervised, least of all when the worker lives on in-process
        child.kill()
        child.join()
        raise
    finally:
        reader.close()
    if isinstance(outcome, Abandoned | TimedOut | Stalled):
        child.kill()
    _join(child, beat)
    if outcome is None:
        outcome = Exited(child.exitcode, signals.count, stopping.waited_s() if stopping.killed else None)
    return outcome


class _LimitRefresh:
    """Keeps the child's ``StepLimit`` up to date (nothing to do without one)."""

    def __init__(self, limit: StepLimit | None, limit_of: Callable[[], int | None] | None) -> None:
        self.limit, self.limit_of = limit, limit_of
        self.due = math.inf

    def now(self) -> None:
        if self.limit is not None and self.limit_of is not None:
            self.limit.set(self.limit_of())
            self.due = time.monotonic() + REFRESH_S

    def when_due(self) -> None:
        if time.monotonic() >= self.due:
            self.now()


class _StopClock:
    """After a stop signal: is the child overdue (see the module docstring)?"""

    def __init__(self, beacon: ProgressBeacon) -> None:
        self.beacon = beacon
        self.asked_at: float | None = None
        self.marks = 0
        self.killed = False

    def waited_s(self) -> float:
        return time.monotonic() - self.asked_at if self.asked_at is not None else 0.0

    def overdue(self) -> bool:
        now = time.monotonic()
        if self.asked_at is None:
            self.asked_at, self.marks = now, self.beacon.marks
        if self.beacon.marks == self.marks:  # no sign of life since the signal
            median = self.beacon.median_step_s or 0.0
            return now - self.asked_at > max(STOP_RESPONSE_S, 3 * median)
        return now - max(self.asked_at, self.beacon.last_mark) > STOP_JOIN_S


def _stacks(child: multiprocessing.process.BaseProcess, job: TrialJob) -> str:
    return dump_stacks(child.pid, job.run_dir / "trial.log") if child.pid is not None else ""


def _join(child: multiprocessing.process.BaseProcess, beat: HeartbeatThread) -> None:
    """Wait for the child (it may be writing its last checkpoint); the heartbeat thread keeps
    beating meanwhile. Killed if it takes too long, or if another worker took the trial over."""
    deadline = time.monotonic() + STOP_JOIN_S
    while child.is_alive() and time.monotonic() < deadline and not beat.ended_elsewhere.is_set():
        child.join(timeout=POLL_S)
    if child.is_alive():
        child.kill()
    child.join()
