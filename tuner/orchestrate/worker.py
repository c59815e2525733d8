"""A worker: claims trials of one phase, trains each in a child process, records the outcome.

Any number of workers, on any number of machines, can serve one phase: everything they share
goes through the storage (claims under the phase lock, heartbeats, results), nothing through
their memory. The worker itself never trains: it forks a child per trial, feeds the storage
with what the child reports, beats the trial's heartbeat, enforces the timeout, and turns any
way the child can die into a recorded failure (and, when allowed, a retry that resumes).
"""

from __future__ import annotations

import contextlib
import gc
import math
import multiprocessing
import os
import signal
import socket
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tuner._atomic import atomic_write_json
from tuner.orchestrate._process import SignalFlag, resident_memory_mb
from tuner.orchestrate.budget import Decision, count_trials, decide
from tuner.orchestrate.code_version import code_version
from tuner.orchestrate.failures import (
    describe_exit,
    fail_stale_trials,
    fail_trial,
    latest_checkpoint_step,
    save_error_log,
)
from tuner.orchestrate.locks import phase_lock
from tuner.orchestrate.phase import PhaseSettings, open_phase
from tuner.orchestrate.search_space import Param, distributions, to_config_values
from tuner.orchestrate.storage import open_storage, with_retries
from tuner.orchestrate.trial_process import TrialJob, trial_main

HEARTBEAT_ENV = "TUNER_HEARTBEAT_S"
DEFAULT_HEARTBEAT_S = 5
GRACE_HEARTBEATS = 4  # a trial is stale after this many missed heartbeats


def heartbeat_settings() -> tuple[int, int]:
    """(interval, grace) in seconds; ``$TUNER_HEARTBEAT_S`` shortens both (tests, impatient users)."""
    interval = max(1, int(os.environ.get(HEARTBEAT_ENV, DEFAULT_HEARTBEAT_S)))
    return interval, interval * GRACE_HEARTBEATS


@dataclass
class WorkerOptions:
    storage_url: str
    study: str
    phase: str
    phase_dir: Path
    search_space: Mapping[str, Param]
    make_job: Callable[[dict[str, Any], Path], TrialJob]  # config values, run folder -> job
    params_for_slot: Callable[[int], dict[str, Any]] = dict  # fixed points ({}: the sampler picks)
    code_dir: Path = field(default_factory=Path.cwd)
    threads: int | None = None
    label: str = ""
    poll_s: float = 0.5
    sampler: Any = None
    on_trial_end: Callable[[Any], None] | None = None  # gets the finished FrozenTrial


@dataclass
class WorkerResult:
    outcome: str  # done | failed | interrupted
    message: str = ""
    trials_run: int = 0


class _Abandoned(Exception):
    """Our trial was finished by someone else (declared stale while we were stalled)."""


def _suggest(trial: Any, name: str, distribution: Any) -> Any:
    from optuna.distributions import CategoricalDistribution, FloatDistribution

    if isinstance(distribution, FloatDistribution):
        return trial.suggest_float(name, distribution.low, distribution.high, log=distribution.log)
    if isinstance(distribution, CategoricalDistribution):
        return trial.suggest_categorical(name, distribution.choices)
    return trial.suggest_int(
        name, distribution.low, distribution.high, log=distribution.log, step=distribution.step
    )


def open_worker_storage(url: str) -> Any:
    """The storage as workers open it: with heartbeats, so dead workers' trials go stale."""
    interval, grace = heartbeat_settings()
    return open_storage(url, heartbeat_interval_s=interval, grace_period_s=grace)


class Worker:
    def __init__(
        self, options: WorkerOptions, storage: Any = None, signals: SignalFlag | None = None
    ) -> None:
        self.options = options
        self.heartbeat_s, _ = heartbeat_settings()
        # opening a storage costs ~0.3 s of CPU (schema checks): reuse the caller's if it has one
        self.storage = storage if storage is not None else open_worker_storage(options.storage_url)
        self.study = open_phase(self.storage, options.study, options.phase, sampler=options.sampler)
        self.direction = self.study.direction.name.lower()
        self.distributions = distributions(options.search_space)
        self.label = options.label or f"{socket.gethostname()}:{os.getpid()}"
        self.version = code_version(options.code_dir)
        self.status_file = options.phase_dir / ".workers" / f"{self.label.replace('/', '_')}.json"
        self.signals = signals or SignalFlag()  # the caller's, if it counted signals while starting
        self._prepared: dict[int, TrialJob] = {}  # trial id -> job, for slots created complete

    # -- the loop ---------------------------------------------------------------------------
    def run(self) -> WorkerResult:
        """Serve the phase until its budget is met, its failure budget is spent, or a signal."""
        trials_run = 0
        next_stale_check = 0.0
        with self.signals:
            while not self.signals.count:
                settings = PhaseSettings.from_attrs(with_retries(lambda: self.study.user_attrs))
                if time.monotonic() >= next_stale_check:  # trials go stale in grace periods, not ms
                    with_retries(fail_stale_trials, self.study, settings)
                    next_stale_check = time.monotonic() + self.heartbeat_s
                claimed, decision = with_retries(self._claim, settings)
                if claimed is None:
                    if decision.action in ("done", "failed"):
                        self._write_status("finished", decision.reason)
                        return WorkerResult(decision.action, decision.reason, trials_run)
                    self._write_status("waiting", decision.reason)
                    self.signals.sleep(self.options.poll_s)
                    continue
                self._run_trial(claimed, settings)
                trials_run += 1
                if self.options.on_trial_end is not None:
                    self.options.on_trial_end(with_retries(self.storage.get_trial, claimed._trial_id))
        self._write_status("stopped", "interrupted")
        return WorkerResult("interrupted", "stopped by a signal", trials_run)

    def _claim(self, settings: PhaseSettings) -> tuple[Any, Decision]:
        """Under the phase lock: check the budgets, then start a waiting retry or a new slot.

        Retries go first (they finish slots already started). The heartbeat is recorded before
        the trial turns RUNNING, so even a worker killed right after claiming leaves a trial
        that goes stale.
        """
        from optuna.trial import TrialState

        with phase_lock(self.storage, self.study.study_name):
            trials = self.study.get_trials(deepcopy=False)
            counts = count_trials(trials, self.direction)
            decision = decide(counts, settings)
            if decision.action != "start":
                return None, decision
            waiting = sorted(
                (t for t in trials if t.state == TrialState.WAITING),
                key=lambda t: (not t.user_attrs.get("attempt"), t.number),
            )
            for trial in waiting:
                if self._start(trial._trial_id):
                    return trial, decision
            if counts.slots < settings.max_trials:
                return self._new_slot(counts.next_slot), decision
        return None, Decision("wait", "another worker took the last waiting trial")

    def _new_slot(self, slot: int) -> Any:
        """Create slot ``slot``'s trial and start it, in as few storage writes as possible.

        A slot with a fixed point (quasi-random, random) is known in full before it exists:
        its parameters, run folder and bookkeeping attributes go into the one write that creates
        it (a storage write costs a few ms; a short trial used to make two dozen). The fixed
        point is also kept where Optuna's ``enqueue_trial`` keeps it. Without a fixed point
        (TPE) the sampler chooses once the trial exists, in ``_run_trial``.
        """
        from optuna.trial import TrialState, create_trial

        params = self.options.params_for_slot(slot)
        user_attrs: dict[str, Any] = {"slot": slot, "attempt": 0}
        known = bool(params) and params.keys() == self.distributions.keys()
        if known:
            try:
                run_dir = self._run_dir(slot, 0, None)
                job = self._job(params, run_dir)
                user_attrs.update(self._bookkeeping(job))
            except Exception:  # a bad point: _run_trial meets the error again and records it
                known = False
        template = create_trial(
            state=TrialState.WAITING,
            params=params if known else None,
            distributions=self.distributions if known else None,
            system_attrs={"fixed_params": params},
            user_attrs=user_attrs,
        )
        trial_id = self.study._storage.create_new_trial(self.study._study_id, template_trial=template)
        if known:
            self._prepared[trial_id] = job
        self._start(trial_id)
        return self.storage.get_trial(trial_id)

    def _start(self, trial_id: int) -> bool:
        """WAITING -> RUNNING, heartbeat first; False if another worker got there before us."""
        from optuna.exceptions import UpdateFinishedTrialError
        from optuna.trial import TrialState

        self.storage.record_heartbeat(trial_id)
        try:
            return bool(self.storage.set_trial_state_values(trial_id, state=TrialState.RUNNING))
        except UpdateFinishedTrialError:
            return False

    # -- one trial --------------------------------------------------------------------------
    def _run_dir(self, slot: int, attempt: int, resume_dir: str | None) -> Path:
        # a retry resumes in its predecessor's folder when this machine can see it (same machine
        # or a shared file system) or would have made it (a predecessor stopped before it trained);
        # elsewhere it starts over in a folder of its own
        if resume_dir and (Path(resume_dir).is_dir() or Path(resume_dir).parent == self.options.phase_dir):
            return Path(resume_dir)
        name = f"trial-{slot:04d}" if attempt == 0 else f"trial-{slot:04d}.{attempt}"
        return self.options.phase_dir / name

    def _job(self, params: dict[str, Any], run_dir: Path) -> TrialJob:
        return self.options.make_job(to_config_values(self.options.search_space, params), run_dir)

    def _bookkeeping(self, job: TrialJob) -> dict[str, Any]:
        """What the storage records about a trial before it trains (the reports read it)."""
        return {
            "run_dir": str(job.run_dir),
            "worker": self.label,
            "max_train_steps": job.spec.training.max_train_steps,
            "reproduce": job.command,
            **self.version,
        }

    def _run_trial(self, claimed: Any, settings: PhaseSettings) -> None:
        import optuna

        trial = optuna.trial.Trial(self.study, claimed._trial_id)
        slot = int(claimed.user_attrs.get("slot", claimed.number))
        attempt = int(claimed.user_attrs.get("attempt", 0))
        run_dir = self._run_dir(slot, attempt, claimed.user_attrs.get("resume_dir"))
        job = self._prepared.pop(claimed._trial_id, None)
        try:
            if job is None:  # a retry, or a point the sampler chooses now
                params = {key: _suggest(trial, key, dist) for key, dist in self.distributions.items()}
                job = self._job(params, run_dir)
                for key, value in self._bookkeeping(job).items():
                    with_retries(trial.set_user_attr, key, value)
        except Exception as error:  # a bad point of the space, or a storage failure: the trial's fault
            message = f"{type(error).__name__}: {error}".splitlines()[0]
            save_error_log(run_dir, message)
            with_retries(fail_trial, self.study, claimed, "crashed", message, settings)
            return
        if self.signals.count:  # stopped between the claim and the start: nothing trained yet
            with_retries(fail_trial, self.study, claimed, "interrupted", "interrupted", settings)
            return
        self._write_status("training", f"trial {claimed.number}", trial=claimed.number)
        try:
            outcome = self._supervise(trial, job, settings, attempt)
        except _Abandoned:
            return
        self._record(trial, claimed, outcome, run_dir, settings)

    def _supervise(self, trial: Any, job: TrialJob, settings: PhaseSettings, attempt: int) -> dict[str, Any]:
        """Fork the child and pump its messages until it ends; returns how it ended."""
        context = multiprocessing.get_context("fork")
        reader, writer = context.Pipe(duplex=False)
        sys.stdout.flush()
        sys.stderr.flush()
        child = context.Process(target=trial_main, args=(writer, job, self.options.threads), daemon=True)
        # as Python's gc docs advise before a fork: the child's collections then skip the
        # worker's objects instead of touching (and so copying) every page that holds one
        gc.freeze()
        child.start()
        writer.close()
        started = time.monotonic()
        next_heartbeat = started + self.heartbeat_s
        deadline = started + settings.trial_timeout_s if settings.trial_timeout_s else math.inf
        signals_seen = 0
        ready = False  # the child handles SIGTERM (checkpoint, then stop) once it has said "started"
        outcome: dict[str, Any] | None = None
        try:
            while outcome is None:
                now = time.monotonic()
                wait = max(0.0, min(next_heartbeat, deadline, now + 0.25) - now)
                if reader.poll(wait):
                    try:
                        message = reader.recv()
                    except (EOFError, OSError):
                        break  # the child is gone; its exit code says how
                    outcome = self._handle(trial, message, attempt, job.spec.training.max_train_steps)
                    ready = ready or message[0] == "started"
                now = time.monotonic()
                if now >= next_heartbeat:
                    with_retries(self.storage.record_heartbeat, trial._trial_id)
                    next_heartbeat = now + self.heartbeat_s
                if now >= deadline:
                    child.kill()
                    outcome = {"kind": "timeout"}
                if self.signals.count > signals_seen and (ready or self.signals.count > 1):
                    signals_seen = self.signals.count
                    if child.pid is not None and child.is_alive():
                        # first signal: a clean stop with a checkpoint; second: now
                        os.kill(child.pid, signal.SIGTERM if signals_seen == 1 else signal.SIGKILL)
        except _Abandoned:
            child.kill()
            child.join()
            raise
        finally:
            reader.close()
        child.join(timeout=30)
        if child.is_alive():
            child.kill()
            child.join()
        if outcome is None:
            outcome = {"kind": "exit", "exitcode": child.exitcode, "signals": self.signals.count}
        return outcome

    def _handle(
        self, trial: Any, message: tuple[Any, ...], attempt: int, last_step: int | None
    ) -> dict[str, Any] | None:
        """Turn a child's message into storage writes; only the ones someone reads.

        A first attempt that starts at step 0 records nothing (0 is the default); the final
        checkpoint's step is recorded with the result (``_record``).
        """
        from optuna.exceptions import UpdateFinishedTrialError

        kind = message[0]
        try:
            if kind == "started":
                if attempt or message[1]:
                    with_retries(trial.set_user_attr, "resumed_from_step", int(message[1]))
            elif kind == "healthy":
                with_retries(trial.set_user_attr, "healthy", True)
            elif kind == "eval":
                with_retries(trial.report, message[2], int(message[1]))
                self._write_status("training", f"step {message[1]}", trial=trial.number, step=message[1])
            elif kind == "checkpoint" and message[1] != last_step:
                with_retries(trial.set_user_attr, "last_checkpoint_step", int(message[1]))
            elif kind == "done":
                return {"kind": "done", **message[1]}
            elif kind == "error":
                return {"kind": "error", "reason": message[1], "message": message[2]}
        except UpdateFinishedTrialError:
            raise _Abandoned from None
        return None

    def _record(
        self, trial: Any, claimed: Any, outcome: dict[str, Any], run_dir: Path, settings: PhaseSettings
    ) -> None:
        from optuna.exceptions import UpdateFinishedTrialError
        from optuna.trial import TrialState

        kind = outcome["kind"]
        extra: dict[str, Any] = {"worker_rss_mb": resident_memory_mb()}
        if kind == "done":
            extra.update(train_s=round(outcome["train_s"], 4), best_step=outcome["best_step"])
            status = outcome["status"]
            if status == "completed" and outcome["best_value"] is not None:
                try:  # the value is the trial's best (retrospective checkpoint selection)
                    for key, value in extra.items():
                        with_retries(trial.set_user_attr, key, value)
                    with_retries(self.study.tell, trial, outcome["best_value"])
                except UpdateFinishedTrialError:
                    pass
                return
            if status == "stopped":
                with_retries(self.study.tell, trial, state=TrialState.PRUNED)
                return
            reason = status if status in ("diverged", "interrupted") else "crashed"
            message = outcome["message"] or (
                "training finished without an objective value" if status == "completed" else status
            )
            extra["final_step"] = outcome["step"]
        elif kind == "error":
            reason, message = outcome["reason"], outcome["message"]
        elif kind == "timeout":
            reason, message = "timeout", f"no result within the {settings.trial_timeout_s:g} s trial timeout"
        else:
            reason, message = describe_exit(outcome["exitcode"])
            if outcome.get("signals"):
                reason, message = "interrupted", f"stopped by a signal before it could checkpoint ({message})"
        if reason not in ("diverged", "interrupted"):
            save_error_log(run_dir, message)
        extra["last_checkpoint_step"] = latest_checkpoint_step(run_dir)
        with_retries(fail_trial, self.study, claimed, reason, message, settings, **extra)

    def _write_status(self, state: str, detail: str, **fields: Any) -> None:
        """``<phase>/.workers/<label>.json``: what this worker does, for the live display."""
        with contextlib.suppress(OSError):
            atomic_write_json(
                self.status_file,
                {
                    "label": self.label,
                    "pid": os.getpid(),
                    "state": state,
                    "detail": detail,
                    "updated_at": time.time(),
                    **fields,
                },
                durable=False,
            )


def run_worker(
    options: WorkerOptions, storage: Any = None, signals: SignalFlag | None = None
) -> WorkerResult:
    """Serve one phase from this process (see ``Worker``); ``storage``: one already open for
    ``options.storage_url`` with ``open_worker_storage``; ``signals``: a ``SignalFlag`` already
    counting (a stop received while starting up is then obeyed at once)."""
    return Worker(options, storage, signals).run()
