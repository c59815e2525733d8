"""A worker: claims trials of one phase, trains each in a child process, records the outcome.

Any number of workers, on any number of machines, can serve one phase: everything they share
goes through the storage (claims under the phase lock, heartbeats, results), nothing through
their memory. The worker itself never trains: it forks a child per trial, feeds the storage
with what the child reports, beats the trial's heartbeat, enforces the timeout, and turns any
way the child can die into a recorded failure (and, when allowed, a retry that resumes).

Its three jobs live in their own modules: ``claim.py`` (lock, budget, trial creation),
``supervise.py`` + ``heartbeat.py`` (the child), ``record.py`` (Optuna writes); which folder a
trial trains in is ``trial_folder.py``. A storage error that outlasts ``with_retries`` is
raised, not returned: a crashed worker must look different from a phase whose failure budget is
spent.
"""

from __future__ import annotations

import contextlib
import os
import socket
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

from tuner._atomic import atomic_write_json
from tuner.orchestrate import _optuna_adapter as adapter
from tuner.orchestrate._process import SignalFlag
from tuner.orchestrate.budget import Action, Decision
from tuner.orchestrate.claim import Claimed, Claimer, NewSlot
from tuner.orchestrate.code_version import code_version
from tuner.orchestrate.disk_full import DiskFull, SpaceReserve, disk_full_path, storage_place
from tuner.orchestrate.failures import (
    CODE_ATTR,
    FailureReason,
    fail_stale_trials,
    fail_trial,
    save_error_log,
    settle_folder_status,
)
from tuner.orchestrate.heartbeat import (
    BeatWatch,
    HeartbeatThread,
    StaleSuspects,
    heartbeat_settings,
    stale_check_interval_s,
)
from tuner.orchestrate.messages import Errored
from tuner.orchestrate.outage import is_storage_error, recovered_within
from tuner.orchestrate.phase import PhaseSettings, open_phase, window_started_at
from tuner.orchestrate.record import Recorder
from tuner.orchestrate.search_space import Param, distributions, sampled_point, to_config_values
from tuner.orchestrate.stall import StallRule
from tuner.orchestrate.storage import open_storage
from tuner.orchestrate.storage_retries import with_retries
from tuner.orchestrate.supervise import supervise
from tuner.orchestrate.trial_folder import folder_freed, own_dir, trial_dir
from tuner.orchestrate.trial_process import TrialJob


@dataclass
class WorkerOptions:
    storage_url: str
    study: str
    phase: str
    phase_dir: Path
    search_space: Mapping[str, Param]
    make_job: Callable[[int, dict[str, Any], Path], TrialJob]  # slot, config values, run folder -> job
    params_for_slot: Callable[[int], dict[str, Any]] = dict  # fixed points ({}: the sampler picks)
    code_dir: Path = field(default_factory=Path.cwd)
    workload_code: str | None = None  # a digest of the workload's source (``workload_code``)
    threads: int | None = None
    label: str = ""
    poll_s: float = 0.5
    sampler: Any = None
    on_trial_end: Callable[[Any], None] | None = None  # gets the finished FrozenTrial
    # the phase's trials -> the step from which a trial still training no longer matters
    # (sweep-lr: the fewest steps to fit so far); its trials stop there (``outpaced.py``)
    outpaced_from: Callable[[list[Any]], int | None] | None = None
    # an Optuna pruner asked at each of a trial's evals (``BasePruner.prune``): when it says
    # prune, the trial stops at its next eval as an outpaced one does (round 1's ``pruner``)
    pruner: Any = None
    # imports every trial needs (torch, the engine; ``trial_process.warm_up``), run once the phase
    # has a trial to start: a worker with nothing to claim never pays them (~5 CPU s, ~300 MB)
    warm_up: Callable[[], None] | None = None


class PhaseEnd(StrEnum):
    """Why a worker stopped serving its phase (compares equal to the plain string)."""

    DONE = "done"  # the budget is met
    FAILED = "failed"  # the failure budget is spent
    STOPPED = "stopped"  # a stopping budget ran out (timeout_h, stop_after_no_improvement): exit 0
    INTERRUPTED = "interrupted"  # a signal


@dataclass
class WorkerResult:
    outcome: PhaseEnd
    message: str = ""
    trials_run: int = 0


def open_worker_storage(url: str) -> Any:
    """The storage as workers open it: with heartbeats, so dead workers' trials go stale."""
    interval, grace = heartbeat_settings()
    return open_storage(url, heartbeat_interval_s=interval, grace_period_s=grace, wait_out_outage=True)


class Worker:
    def __init__(
        self, options: WorkerOptions, storage: Any = None, signals: SignalFlag | None = None
    ) -> None:
        self.options = options
        self.heartbeat_s, grace = heartbeat_settings()
        self.beat_watch = BeatWatch(grace)  # for a storage without Optuna's heartbeat (gRPC)
        self.suspects = StaleSuspects(2 * self.heartbeat_s)  # a stale trial is confirmed before it is failed
        # opening a storage costs ~0.3 s of CPU (schema checks): reuse the caller's if it has one
        self.storage = storage if storage is not None else open_worker_storage(options.storage_url)
        self.study = open_phase(self.storage, options.study, options.phase, sampler=options.sampler)
        self.distributions = distributions(options.search_space)
        self.label = options.label or f"{socket.gethostname()}:{os.getpid()}"
        self.version = code_version(options.code_dir)
        if options.workload_code is not None:
            self.version[CODE_ATTR] = options.workload_code
        self.status_file = options.phase_dir / ".workers" / f"{self.label.replace('/', '_')}.json"
        self.signals = signals or SignalFlag()  # the caller's, if it counted signals while starting
        self.claimer = Claimer(
            self.storage, self.study, self._new_slot, beat_s=self.heartbeat_s, code=options.workload_code
        )
        self._prepared: dict[int, TrialJob] = {}  # slot -> job, for slots created complete
        self.reserve = SpaceReserve(self.status_file.with_suffix(".reserve"))  # see disk_full.py
        self._current: tuple[int, PhaseSettings, Path | None] | None = None  # trial being run
        self._warm_up = options.warm_up  # None once done

    # -- the loop ---------------------------------------------------------------------------
    def run(self) -> WorkerResult:
        """Serve the phase until its budget is met, its failure budget is spent, a stopping
        budget runs out, or a signal. A full disk raises ``DiskFull`` once the trial it stopped
        is recorded as such (``disk_full.py``)."""
        with self.signals, self.reserve:
            try:
                return self._serve()
            except DiskFull as full:
                self._write_status("stopped", str(full))
                raise
            except Exception as error:
                path = disk_full_path(error, storage_place(self.options.storage_url))
                if path is None:
                    raise
                self.reserve.release()  # room for the last records
                self._settle_current(path)
                full = DiskFull(path)
                self._write_status("stopped", str(full))
                raise full from None

    def _serve(self) -> WorkerResult:
        trials_run = 0
        next_stale_check = 0.0
        grace = heartbeat_settings()[1]
        while not self.signals.count:
            attrs = with_retries(lambda: self.study.user_attrs)
            settings = PhaseSettings.from_attrs(attrs)
            # trials go stale in grace periods, not ms; and none looks stale just after an outage
            # long enough to have kept every worker from beating: they get a grace to beat again
            after_outage = recovered_within(grace, longer_than=grace / 2)
            if time.monotonic() >= next_stale_check and not after_outage:
                stale_args = (self.storage, self.study, settings, self.beat_watch, self.suspects)
                with_retries(fail_stale_trials, *stale_args)
                if self.suspects.pending:  # look again once their owners could have beaten, and
                    # now: not after the trial this worker may claim next (it may last hours)
                    self.signals.sleep(self.suspects.confirm_after_s)
                    with_retries(fail_stale_trials, *stale_args)
                running = self.claimer.running  # as the last claim counted them
                next_stale_check = time.monotonic() + stale_check_interval_s(self.heartbeat_s, running)
            if self._warm_up is not None and with_retries(
                self.claimer.would_start, settings, window_started_at(attrs)
            ):  # warm before the claim: a claimed trial still importing holds back the others
                self._warm()  # (a failure budget waits for running trials to prove healthy)
            claimed = self.claimer.claim(settings, window_started_at(attrs))
            if isinstance(claimed, Decision):
                if claimed.action in (Action.DONE, Action.FAILED, Action.STOPPED):
                    self._write_status("finished", claimed.reason)
                    return WorkerResult(PhaseEnd(claimed.action), claimed.reason, trials_run)
                self._write_status("waiting", claimed.reason)
                self.signals.sleep(self.options.poll_s)
                continue
            self._run_trial(claimed, settings)
            trials_run += 1
            if self.options.on_trial_end is not None:
                self.options.on_trial_end(with_retries(self.storage.get_trial, claimed.trial_id))
        self._write_status("stopped", "interrupted")
        return WorkerResult(PhaseEnd.INTERRUPTED, "stopped by a signal", trials_run)

    def _new_slot(self, slot: int) -> NewSlot:
        """How slot ``slot``'s trial is created, in as few storage writes as possible.

        A slot with a fixed point (quasi-random, random) is known in full before it exists:
        its parameters, run folder and bookkeeping attributes go into the one write that creates
        it (a storage write costs a few ms; a short trial used to make two dozen). The fixed
        point is also kept where Optuna's ``enqueue_trial`` keeps it. Without a fixed point
        (TPE) the sampler chooses once the trial exists, in ``_run_trial``.
        """
        params = self.options.params_for_slot(slot)
        user_attrs: dict[str, Any] = {"slot": slot, "attempt": 0}
        known = bool(params) and params.keys() == self.distributions.keys()
        if known:
            try:
                job = self._job(slot, params, own_dir(self.options.phase_dir, slot, 0))
                user_attrs.update(self._bookkeeping(job))
                self._prepared[slot] = job
            except Exception:  # a bad point: _run_trial meets the error again and records it
                known = False
        return NewSlot(
            params=params if known else None,
            distributions=self.distributions if known else None,
            fixed_params=params,
            user_attrs=user_attrs,
        )

    def _warm(self) -> None:  # ``WorkerOptions.warm_up``, once
        if self._warm_up is not None:
            self._warm_up()
            self._warm_up = None

    # -- one trial --------------------------------------------------------------------------
    def _job(self, slot: int, params: dict[str, Any], run_dir: Path) -> TrialJob:
        return self.options.make_job(slot, to_config_values(self.options.search_space, params), run_dir)

    def _bookkeeping(self, job: TrialJob) -> dict[str, Any]:
        """What the storage records about a trial before it trains (the reports read it)."""
        return {
            "run_dir": str(job.run_dir),
            "worker": self.label,
            "max_train_steps": job.spec.training.max_train_steps,
            "reproduce": job.command,
            **self.version,
            **job.attrs,
        }

    def _run_trial(self, claimed: Claimed, settings: PhaseSettings) -> None:
        """Beat, prepare, supervise, record. The heartbeat thread runs from the claim until the
        outcome is recorded: preparing and recording may wait out storage retries too."""
        run_dir = claimed.trial.user_attrs.get("run_dir")
        self._current = (claimed.trial_id, settings, Path(run_dir) if run_dir else None)
        with claimed.beat or HeartbeatThread(self.storage, claimed.trial_id, self.heartbeat_s) as beat:
            self._prepare_and_run(claimed, settings, beat)
        self._current = None  # kept on an error: ``run`` may still have to record it

    def _settle_current(self, path: str) -> None:
        """The trial a full disk stopped (the child is already gone): ``disk_full``, continued
        later without spending a retry. Best effort: the disk may refuse this too."""
        if self._current is None:
            return
        trial_id, settings, run_dir = self._current
        message = f"disk full: {path}"
        with contextlib.suppress(Exception):
            fail_trial(self.storage, self.study, trial_id, FailureReason.DISK_FULL, message, settings)
            if run_dir is not None:
                settle_folder_status(run_dir, FailureReason.DISK_FULL, message)

    def _prepare_and_run(self, claimed: Claimed, settings: PhaseSettings, beat: HeartbeatThread) -> None:
        from optuna.exceptions import UpdateFinishedTrialError

        frozen = claimed.trial
        slot = int(frozen.user_attrs.get("slot", frozen.number))
        attempt = int(frozen.user_attrs.get("attempt", 0))
        run_dir = trial_dir(self.options.phase_dir, slot, attempt, frozen.user_attrs.get("resume_dir"))
        if attempt and not self._folder_freed(run_dir, beat):
            # its predecessor still holds it (a frozen machine's trial, not dead yet): never
            # write a folder another process holds; start over in one of our own
            run_dir = own_dir(self.options.phase_dir, slot, attempt)
        job = self._prepared.pop(slot, None) if attempt == 0 and "run_dir" in frozen.user_attrs else None
        status: dict[str, Any] = {"trial": frozen.number, "slot": slot, "attempt": attempt}  # live view
        recorder = Recorder(
            self.storage,
            self.study,
            claimed.trial_id,
            frozen.number,
            attempt=attempt,
            last_step=None,
            on_eval=lambda step: self._write_status("training", f"step {step}", step=step, **status),
            frozen=frozen,
            window=self.claimer.window,
        )
        try:
            if job is None:  # a retry, or a point the sampler chooses now
                # the sampler reads the storage (TPE reads every trial): retried like any read;
                # a repeated suggest returns the value already stored, so a retry is harmless
                params = with_retries(sampled_point, self.study, claimed.trial_id, self.distributions)
                job = self._job(slot, params, run_dir)
                with_retries(adapter.set_user_attrs, self.storage, claimed.trial_id, self._bookkeeping(job))
        except UpdateFinishedTrialError:
            return  # another worker ended it (we were cut off): it is theirs now
        except Exception as error:  # a bad point of the space: the trial's fault
            if is_storage_error(error):
                raise
            message = f"{type(error).__name__}: {error}".splitlines()[0]
            save_error_log(run_dir, message)
            recorder.fail(FailureReason.CRASHED, message, settings)
            return
        self._warm()  # claimed though the look before said wait (a race, a retry): not yet done
        if self.signals.count:  # stopped between the claim and the start: nothing trained yet
            recorder.fail(FailureReason.INTERRUPTED, "interrupted", settings)
            return
        recorder.last_step = job.spec.training.max_train_steps
        status.update(total=job.spec.training.max_train_steps, trial_started_at=time.time())
        self._write_status("training", f"trial {frozen.number}", **status)
        outcome = supervise(
            job,
            threads=self.options.threads,
            timeout_s=settings.trial_timeout_s,
            stall=StallRule(settings.stall_multiple, settings.stall_min_s),
            signals=self.signals,
            beat=beat,
            on_message=recorder.on_message,
            limit_of=self._limit_of(frozen.number, recorder.extra_attrs),
            on_step=lambda step: self._write_status("training", f"step {step}", step=step, **status),
        )
        self._current = (claimed.trial_id, settings, run_dir)
        full = isinstance(outcome, Errored) and outcome.reason == FailureReason.DISK_FULL
        if full:
            self.reserve.release()  # room for the records below
        recorder.record(outcome, run_dir, settings)
        if full:
            raise DiskFull(outcome.message.removeprefix("disk full: ").partition(" (")[0])

    def _limit_of(self, number: int, attrs: dict[str, Any]) -> Callable[[], int | None] | None:
        """The step from which trial ``number`` stops, over the phase's trials as they are now:
        the phase's ``outpaced_from``, or the step after its last eval once the phase's pruner
        says prune (None: the phase has neither). The child learns it after that eval, so a pruned
        trial stops at its next one; it stays pruned, and ``attrs`` (recorded with the trial) gets
        ``pruned_at``, the eval the pruner judged."""
        outpaced_from, pruner = self.options.outpaced_from, self.options.pruner
        if outpaced_from is None and pruner is None:
            return None

        def limit() -> int | None:
            trials = with_retries(self.study.get_trials, False)
            step = outpaced_from(trials) if outpaced_from is not None else None
            if pruner is not None and "pruned_at" not in attrs:
                own = next((t for t in trials if t.number == number and t.intermediate_values), None)
                if own is not None and with_retries(pruner.prune, self.study, own):  # it reads the storage
                    attrs["pruned_at"] = max(own.intermediate_values)
            if "pruned_at" in attrs:
                after = int(attrs["pruned_at"]) + 1
                step = after if step is None else min(step, after)
            return step

        return limit

    def _folder_freed(self, run_dir: Path, beat: HeartbeatThread) -> bool:
        """Wait (up to a heartbeat grace) for another process to let go of ``run_dir``; a signal,
        or another worker ending the trial, stops the wait."""
        held = f"{run_dir.name} is still held by its previous attempt"
        return folder_freed(
            run_dir,
            heartbeat_settings()[1],
            give_up=lambda: bool(self.signals.count) or beat.ended_elsewhere.is_set(),
            on_wait=lambda: self._write_status("waiting", held),
        )

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
    counting (a stop received while starting up is then obeyed at once). Returns how the phase
    ended for this worker; raises if the worker itself failed (a storage that stays down)."""
    return Worker(options, storage, signals).run()
