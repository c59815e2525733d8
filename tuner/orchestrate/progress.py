"""A phase seen from outside: counts, best so far, what each local worker is doing.

Read only from the storage and the workers' status files, so the view is the same whichever
process (or machine) ran the trials. A display must never take the work down: when the storage
cannot be read, ``refresh`` hands back the last view, marked stale ("storage unreachable since").
Any other error is a bug of the view, not an outage: it propagates, and the pool, which never
lets a display stop its workers, reports it as such (``LocalPool.tick_errors``).
"""

from __future__ import annotations

import dataclasses
import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tuner.orchestrate.budget import Decision, PhaseCounts, count_trials, decide
from tuner.orchestrate.phase import PhaseSettings, window_started_at
from tuner.orchestrate.storage_retries import with_retries

REFRESH_ATTEMPTS = 2  # a refresh comes again within a second: no need to wait out a long backoff


@dataclass
class PhaseSnapshot:
    counts: PhaseCounts
    settings: PhaseSettings
    workers: list[dict[str, Any]] = field(default_factory=list)
    newly_finished: list[Any] = field(default_factory=list)  # FrozenTrials finished since the last look
    trials: list[Any] = field(default_factory=list)  # every FrozenTrial of the phase
    stale_since: float | None = None  # wall-clock time since which the storage could not be read
    window_started_at: float | None = None  # the phase's run window began (timeout_h counts from it)

    @property
    def best(self) -> Any | None:
        """The best trial (a FrozenTrial), if any has completed with a finite value."""
        number = self.counts.best_number
        return next((t for t in self.trials if t.number == number), None) if number is not None else None

    def decision(self, metric: str | None = None, now: float | None = None) -> Decision:
        """What a worker would decide now: the workers' own rule, so a summary says what they did
        (``stopped`` with the budget that ran out, ``failed``, ``done``...)."""
        return decide(
            self.counts, self.settings, window_started_at=self.window_started_at, now=now, metric=metric
        )

    @property
    def nothing_to_run(self) -> bool:
        """Every slot of the budget ended and nothing runs, waits or awaits a lost retry: a worker
        started now would only find that out and exit (``run_phase`` then starts none)."""
        from tuner.orchestrate.budget import Action
        from tuner.orchestrate.failures import missing_retries

        return self.decision().action == Action.DONE and not missing_retries(self.trials)


class PhaseWatcher:
    def __init__(self, study: Any, phase_dir: Path) -> None:
        self.study, self.phase_dir = study, phase_dir
        self.direction = study.direction.name.lower()
        self._seen: set[int] | None = None
        self._last: PhaseSnapshot | None = None
        self.unreachable_since: float | None = None  # time.time() of the first failed refresh

    def snapshot(self) -> PhaseSnapshot:
        """The phase as the storage has it now; storage errors (after ``with_retries``) propagate."""
        snapshot = self._read(with_retries)
        self.unreachable_since = None
        return snapshot

    def refresh(self) -> PhaseSnapshot | None:
        """Like ``snapshot``, but on a storage error the last view with ``stale_since`` set (None
        if there never was one). Retries briefly: the next refresh is a tick away. Another error
        propagates: calling it "storage unreachable" would hide a bug behind an outage."""

        def briefly(call: Any, *args: Any) -> Any:
            return with_retries(call, *args, attempts=REFRESH_ATTEMPTS, first_wait_s=0.25)

        try:
            snapshot = self._read(briefly)
        except Exception as error:
            from tuner.orchestrate.outage import is_storage_error

            if not is_storage_error(error):
                raise
            if self.unreachable_since is None:
                self.unreachable_since = time.time()
            if self._last is None:
                return None
            return dataclasses.replace(
                self._last, newly_finished=[], workers=self._workers(), stale_since=self.unreachable_since
            )
        self.unreachable_since = None
        return snapshot

    def _read(self, retrying: Any) -> PhaseSnapshot:
        trials = retrying(self.study.get_trials, False)
        attrs = retrying(lambda: self.study.user_attrs)
        finished = [t for t in trials if t.state.is_finished()]
        if self._seen is None:  # what was finished before we started watching is not news
            self._seen = {t.number for t in finished}
        news = [t for t in finished if t.number not in self._seen]
        self._seen.update(t.number for t in news)
        self._last = PhaseSnapshot(
            count_trials(trials, self.direction),
            PhaseSettings.from_attrs(attrs),
            self._workers(),
            sorted(news, key=lambda t: t.number),
            list(trials),
            window_started_at=window_started_at(attrs),
        )
        return self._last

    def _workers(self) -> list[dict[str, Any]]:
        workers = []
        for path in sorted((self.phase_dir / ".workers").glob("*.json")):
            try:
                workers.append(json.loads(path.read_text()))
            except (OSError, ValueError):
                continue
        return workers


# -- what the live view shows: the phase's bar and one row per worker -----------------------------
def _failed_and_diverged(counts: PhaseCounts) -> tuple[int, int, str]:
    """(final failures, diverged trials, ``1 crashed, 2 oom``). Diverged trials are information
    about the search space, not failures: ``count_trials`` keeps them apart."""
    return counts.failed, counts.diverged, counts.failure_summary()


def trial_seconds(trial: Any) -> float | None:
    """How long a finished trial took, wall clock (start-up included: that is what an ETA needs);
    its ``train_s`` when the storage has no times."""
    start, end = trial.datetime_start, trial.datetime_complete
    if start is not None and end is not None:
        return max(0.0, (end - start).total_seconds())
    seconds = trial.user_attrs.get("train_s")
    return float(seconds) if isinstance(seconds, int | float) else None


def _started_at(trial: Any) -> float | None:
    return trial.datetime_start.timestamp() if trial.datetime_start is not None else None


@dataclass(frozen=True)
class PhaseProgress:
    """The overall bar: trials done / running / failed / diverged of ``total``, and when it ends."""

    total: int
    done: int  # completed (a clean early stop included)
    running: int
    failed: int  # final failures (crashed, oom, timeout...), diverged trials apart
    diverged: int
    failure_summary: str  # ``1 crashed, 2 oom``: the failures' reasons
    to_start: int  # trials not started yet (retries waiting included)
    mean_trial_s: float | None  # measured on the completed trials; None before the first
    eta_s: float | None  # seconds until the last trial ends; None while unknown

    @property
    def finished(self) -> int:
        return self.done + self.failed + self.diverged


def phase_progress(snapshot: PhaseSnapshot, now: float | None = None, workers: int = 0) -> PhaseProgress:
    """Counts and an ETA: the trials still to start and the rest of the running ones, at the
    mean duration of the completed trials, spread over the trials running side by side or
    ``workers`` (the workers known to serve the phase), whichever is more; never shorter than
    the longest running trial's rest. Short trials leave a worker idle between two of them:
    counting only the running trials would make the ETA jump."""
    now = time.time() if now is None else now
    counts = snapshot.counts
    failed, diverged, failure_summary = _failed_and_diverged(counts)
    durations = [
        seconds
        for trial in snapshot.trials
        if trial.state.name == "COMPLETE" and (seconds := trial_seconds(trial)) is not None
    ]
    mean = sum(durations) / len(durations) if durations else None
    eta = None
    if mean is not None:
        running = [t for t in snapshot.trials if t.state.name == "RUNNING"]
        rests = [max(0.0, mean - (now - (_started_at(t) or now))) for t in running]
        parallel = max(1, len(running), workers)
        if snapshot.settings.max_parallel is not None:
            parallel = min(parallel, max(1, snapshot.settings.max_parallel))
        to_start = counts.to_start(snapshot.settings)
        eta = max((to_start * mean + sum(rests)) / parallel, max(rests, default=0.0))
        if to_start and eta < mean:  # a trial still to start takes a whole trial at least
            eta = mean
    return PhaseProgress(
        total=snapshot.settings.max_trials,
        done=counts.completed,
        running=counts.running,
        failed=failed,
        diverged=diverged,
        failure_summary=failure_summary,
        to_start=counts.to_start(snapshot.settings),
        mean_trial_s=mean,
        eta_s=eta,
    )


@dataclass(frozen=True)
class WorkerProgress:
    """One worker's row: its state, and the trial it trains (values from the storage)."""

    label: str
    state: str  # training, waiting, finished, stopped
    detail: str  # the worker's own words when it does not train
    trial: Any | None = None  # the FrozenTrial it trains
    step: int | None = None  # the last evaluated step
    total: int | None = None  # the trial's steps
    value: float | None = None  # the objective at the last evaluation
    elapsed_s: float | None = None  # since the trial started training


def worker_progress(
    worker: dict[str, Any], snapshot: PhaseSnapshot, now: float | None = None
) -> WorkerProgress:
    """A worker's status file (``.workers/<label>.json``) joined with its trial in the storage."""
    now = time.time() if now is None else now
    label, state, detail = str(worker.get("label")), str(worker.get("state")), str(worker.get("detail", ""))
    number = worker.get("trial")
    trial = next((t for t in snapshot.trials if t.number == number), None) if number is not None else None
    if trial is None or state != "training":
        return WorkerProgress(label, state, detail)
    values = trial.intermediate_values
    last = max(values, default=None)
    step = worker.get("step", last)
    total = worker.get("total", trial.user_attrs.get("max_train_steps"))
    started = worker.get("trial_started_at") or _started_at(trial)
    return WorkerProgress(
        label,
        state,
        detail,
        trial=trial,
        step=int(step) if isinstance(step, int | float) else None,
        total=int(total) if isinstance(total, int | float) else None,
        value=values[last] if last is not None else None,
        elapsed_s=max(0.0, now - float(started)) if isinstance(started, int | float) else None,
    )
