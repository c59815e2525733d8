"""Failed trials: why they failed, what the run folder keeps, and whether to retry.

Reasons: ``crashed`` (an exception or a fatal signal), ``diverged`` (NaN/inf loss), ``timeout``
(past the per-trial limit), ``stalled`` (no progress for a long multiple of its own step time,
``stall.py``), ``killed`` (SIGKILL, or a worker that stopped sending heartbeats),
``oom`` (out of memory), ``interrupted`` (Ctrl-C or SIGTERM: a clean stop, always continued)
and ``disk_full`` (the machine's fault, not the trial's: continued like an interruption,
``disk_full.py``). A retry is a new trial for the same slot with the same parameters and run folder,
so it resumes from the last checkpoint. ``diverged`` is never retried (it would diverge again);
a retry that raises the very same exception is not retried again; other reasons get at most
``max_retries`` retries. Interruptions and full disks do not count against ``max_retries``.

A failure of workload code that has since changed (its ``workload_code`` digest is not the one
the workers run now) no longer stands: its slot is run again with a fresh set of retries, so a
phase whose failure budget a bug spent goes on once the bug is fixed (``missing_retries``), once
in each code the slot has not run yet (``codes_by_slot``). So
does a broken workload's failure (``budget.BROKEN_ATTR``: its own error before the first step,
never retried in the run that saw it) once a command opens another run window: the same command
again tries it once more, as a user who thinks the error was passing expects.
"""

from __future__ import annotations

import contextlib
import json
import signal
from enum import StrEnum
from pathlib import Path
from typing import Any

from tuner._atomic import atomic_write_text
from tuner.orchestrate import _optuna_adapter as adapter
from tuner.orchestrate.budget import BROKEN_ATTR, final_failure, slot_key, superseded
from tuner.orchestrate.duplicates import counted, yield_duplicates
from tuner.orchestrate.heartbeat import BeatWatch, StaleSuspects, has_heartbeat_table
from tuner.orchestrate.locks import LostLocks, phase_lock
from tuner.orchestrate.phase import PhaseSettings

ERROR_LOG = "error.log"
CODE_ATTR = "workload_code"  # the digest of the workload's source a trial ran (``workload_code``)


class FailureReason(StrEnum):
    """Why a trial failed; stored as the plain string in the trial's ``failure_reason``."""

    CRASHED = "crashed"
    DIVERGED = "diverged"
    TIMEOUT = "timeout"
    STALLED = "stalled"
    KILLED = "killed"
    OOM = "oom"
    INTERRUPTED = "interrupted"
    DISK_FULL = "disk_full"


# not the trial's fault: always continued, and no retry is spent on them
FREE_RETRY = frozenset({FailureReason.INTERRUPTED, FailureReason.DISK_FULL})
RETRYABLE = frozenset(
    {
        FailureReason.CRASHED,
        FailureReason.TIMEOUT,
        FailureReason.STALLED,
        FailureReason.KILLED,
        FailureReason.OOM,
        FailureReason.INTERRUPTED,
        FailureReason.DISK_FULL,
    }
)


def describe_exit(exitcode: int | None) -> tuple[FailureReason, str]:
    """(reason, message) for a child that died without telling us why."""
    if exitcode is not None and exitcode < 0:
        number = -exitcode
        if number == signal.SIGKILL:
            return (
                FailureReason.KILLED,
                "the trial process was killed by SIGKILL (the kernel's OOM killer does this too)",
            )
        try:
            name = signal.Signals(number).name
        except ValueError:  # a real-time signal has no name
            name = str(number)
        described = signal.strsignal(number)
        detail = f" ({described})" if described else ""
        return FailureReason.CRASHED, f"the trial process died of signal {name}{detail}"
    return FailureReason.CRASHED, f"the trial process exited with code {exitcode} without a result"


def tail(path: Path, lines: int = 20) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


def save_error_log(run_dir: Path | None, message: str) -> None:
    """Keep the error's last lines in the run folder (the child writes a full traceback itself)."""
    if run_dir is None:
        return
    log = run_dir / ERROR_LOG
    if log.exists():
        return
    output = tail(run_dir / "trial.log")
    text = message + ("\n\nlast lines of trial.log:\n" + output if output else "") + "\n"
    with contextlib.suppress(OSError):
        atomic_write_text(log, text, durable=False)


def latest_checkpoint_step(run_dir: str | Path | None) -> int | None:
    """The step of ``checkpoints/latest.pt`` as its index records it (what a resume starts from)."""
    if not run_dir:
        return None
    try:
        index = json.loads((Path(run_dir) / "checkpoints" / "index.json").read_text())
        return int(index["latest"]["step"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _retry_allowed(trial: Any, reason: FailureReason, error: str, settings: PhaseSettings) -> bool:
    if reason not in RETRYABLE:
        return False
    if reason in FREE_RETRY:
        return True
    if (
        reason in (FailureReason.CRASHED, FailureReason.OOM)
        and trial.user_attrs.get("previous_error") == error
    ):
        return False  # the same exception twice: deterministic, another retry would only repeat it
    return int(trial.user_attrs.get("retries_used", 0)) < settings.max_retries


def fail_trial(
    storage: Any,
    study: Any,
    trial_id: int,
    reason: FailureReason,
    error: str,
    settings: PhaseSettings,
    **attrs: Any,
) -> bool:
    """Record a failure of trial ``trial_id`` and enqueue its retry if allowed.

    Order matters, for every step can be cut short (a crash, a lost acknowledgement):
    1. why it failed, and whether it is retried, are written while the trial is still RUNNING
       (Optuna refuses writes to finished trials);
    2. FAIL, which only one process can do: if the trial's owner recorded a result first, this
       raises and nothing else happens (no retry for a slot that completed);
    3. only then the retry; if we die before it, ``enqueue_missing_retries`` (run under the
       lock by every claim) enqueues it: a FAIL trial marked ``retried`` without a successor.
    Runs under the phase lock, so two workers holding it cannot both retry the same stale trial;
    a retry enqueued is reconciled after (``yield_duplicates``) against workers that hold none.
    Returns whether this call failed the trial. Idempotent: ``with_retries`` may call it again.
    """
    from tuner.orchestrate.storage_retries import with_retries

    lost, enqueued = LostLocks(), []
    failed_here = with_retries(
        _fail_once, storage, study, trial_id, reason, error, settings, attrs, lost, enqueued
    )
    # another worker may have enqueued the same retry meanwhile: one without the lock (lost), or
    # one through the gRPC proxy, which holds none, while we held ours (a phase may have both:
    # seen as a second WAITING retry of a slot whose first retry had completed, run by nobody)
    if enqueued:
        yield_duplicates(storage, study, enqueued)
    return failed_here


def _fail_once(
    storage: Any,
    study: Any,
    trial_id: int,
    reason: FailureReason,
    error: str,
    settings: PhaseSettings,
    attrs: dict[str, Any],
    lost: LostLocks,
    enqueued: list[int],
) -> bool:
    from optuna.exceptions import UpdateFinishedTrialError
    from optuna.trial import TrialState

    with lost.watch(phase_lock(storage, study.study_name, bounded=True)):
        current = storage.get_trial(trial_id)
        failed_here = False
        if not current.state.is_finished():
            retry = _retry_allowed(current, reason, error, settings) and not attrs.get(BROKEN_ATTR)
            written = {"failure_reason": str(reason), "error": error, "retried": retry, **attrs}
            try:
                adapter.set_user_attrs(storage, trial_id, written)
                failed_here = bool(storage.set_trial_state_values(trial_id, state=TrialState.FAIL))
            except UpdateFinishedTrialError:
                failed_here = False  # its owner (or another worker) finished it first
        elif current.state == TrialState.FAIL and current.user_attrs.get("failure_reason") == str(reason):
            failed_here = current.user_attrs.get("error") == error  # an earlier try got through
        enqueued += enqueue_missing_retries(storage, study)
    return failed_here


def missing_retries(trials: list[Any], code: str | None = None, window: float | None = None) -> list[Any]:
    """The FAIL trials whose retry is not in ``trials``: those marked ``retried`` (a crash between
    the two writes lost it), and the final failures that no longer stand: of workload code other
    than ``code`` (``stale_code``), or a broken workload's of a run window before ``window``
    (``stale_window``); ``enqueue_missing_retries`` adds them."""
    from optuna.trial import TrialState

    trials = counted(trials)
    replaced = superseded(trials)
    ran = codes_by_slot(trials)
    return [
        t
        for t in trials
        if t.state == TrialState.FAIL
        and t.number not in replaced
        and (
            t.user_attrs.get("retried")
            or (stale_code(t, code, replaced) and code not in ran.get(slot_key(t)[0], ()))
            or stale_window(t, window, replaced)
        )
    ]


def codes_by_slot(trials: list[Any]) -> dict[int, set[str]]:
    """Slot -> the workload digests its attempts ran. A slot is run again for a code change only
    in code it has not run yet: two machines whose copies of the workload differ would otherwise
    re-run each other's failures for ever (each sees the other's code as changed)."""
    ran: dict[int, set[str]] = {}
    for trial in trials:
        digest = trial.user_attrs.get(CODE_ATTR)
        if digest is not None:
            ran.setdefault(slot_key(trial)[0], set()).add(str(digest))
    return ran


def stale_window(trial: Any, window: float | None, replaced: set[int]) -> bool:
    """A broken workload's final failure (``budget.BROKEN_ATTR``) seen in another run window."""
    seen = trial.user_attrs.get(BROKEN_ATTR)
    return window is not None and seen is not None and seen != window and final_failure(trial, replaced)


def stale_code(trial: Any, code: str | None, replaced: set[int]) -> bool:
    """A final failure (not diverged: that is the search space's) of workload code other than
    ``code``: the bug it hit may be fixed, so it does not hold the phase's failure budget."""
    ran = trial.user_attrs.get(CODE_ATTR)
    return (
        code is not None
        and ran is not None
        and ran != code
        and trial.user_attrs.get("failure_reason") != str(FailureReason.DIVERGED)
        and final_failure(trial, replaced)
    )


def enqueue_missing_retries(
    storage: Any,
    study: Any,
    trials: list[Any] | None = None,
    code: str | None = None,
    window: float | None = None,
) -> list[int]:
    """Under the phase lock: a WAITING retry for each FAIL trial ``missing_retries`` finds.

    The retry is a new trial for the same slot, same parameters, same run folder (it resumes);
    one of a failure that no longer stands (``missing_retries``) starts with no retry used.
    Returns the numbers of the trials enqueued.
    """
    from optuna.trial import TrialState, create_trial

    trials = counted(trials if trials is not None else study.get_trials(deepcopy=False))
    enqueued = []
    for failed in missing_retries(trials, code, window):
        reason = failed.user_attrs.get("failure_reason")
        interrupted = reason in FREE_RETRY
        error = failed.user_attrs.get("error")
        params = failed.system_attrs.get("fixed_params") or failed.params
        user_attrs = {
            "slot": failed.user_attrs.get("slot", failed.number),
            "attempt": int(failed.user_attrs.get("attempt", 0)) + 1,
            "retry_of": failed.number,
            "retries_used": int(failed.user_attrs.get("retries_used", 0)) + (not interrupted),
            "previous_error": failed.user_attrs.get("previous_error") if interrupted else error,
        }
        changed = False
        if not failed.user_attrs.get("retried"):  # it no longer stands: retries start over
            user_attrs |= {"retries_used": 0, "previous_error": None}
            changed = stale_code(failed, code, set())
            user_attrs["code_changed" if changed else "tried_again"] = True
        # a retry resumes from its predecessor's checkpoint; a run of changed code starts over
        # in a folder of its own: that checkpoint holds the weights the old code trained
        if "run_dir" in failed.user_attrs and not changed:
            user_attrs["resume_dir"] = failed.user_attrs["run_dir"]
        # what ``Study.enqueue_trial`` writes, in one call that tells us the new trial's id
        template = create_trial(
            state=TrialState.WAITING, system_attrs={"fixed_params": dict(params)}, user_attrs=user_attrs
        )
        new_id = storage.create_new_trial(adapter.study_id(storage, study), template_trial=template)
        enqueued.append(storage.get_trial_number_from_id(new_id))
    return enqueued


def fail_stale_trials(
    storage: Any,
    study: Any,
    settings: PhaseSettings,
    watch: BeatWatch | None = None,
    suspects: StaleSuspects | None = None,
) -> list[int]:
    """Trials whose worker stopped sending heartbeats: mark them ``killed`` and retry them.

    ``watch``: how the beat attribute is watched, kept by the caller from one call to the next
    (``heartbeat.BeatWatch``): the only beat a storage without Optuna's heartbeat (the gRPC
    proxy) has, and on the database the only beat of trials run through a proxy to it;
    ``suspects``: only trials found stale at an earlier look too are failed
    (``heartbeat.StaleSuspects``, why). Returns the numbers of the trials failed here.
    """
    from optuna.trial import TrialState

    stale_ids = adapter.stale_trial_ids(storage, study) if has_heartbeat_table(storage) else []
    if watch is not None:  # also on the database: a trial run through the proxy has no table beat
        running = study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))
        watched = [adapter.trial_id(storage, study, n) for n in watch.stale_numbers(running)]
        stale_ids += [trial_id for trial_id in watched if trial_id not in stale_ids]
    if suspects is not None:
        stale_ids = suspects.confirm(stale_ids)
    failed = []
    for trial_id in stale_ids:
        trial = storage.get_trial(trial_id)
        run_dir = trial.user_attrs.get("run_dir")
        message = "its worker stopped sending heartbeats (the process was killed, or its machine was lost)"
        # both are lower bounds of what a resume will load (the index lags latest.pt by a rename)
        known = [trial.user_attrs.get("last_checkpoint_step"), latest_checkpoint_step(run_dir)]
        step = max((s for s in known if s is not None), default=None)
        if fail_trial(
            storage, study, trial_id, FailureReason.KILLED, message, settings, last_checkpoint_step=step
        ):
            if run_dir:
                save_error_log(Path(run_dir), message)
                settle_folder_status(Path(run_dir), FailureReason.KILLED, message)
            failed.append(trial.number)
    return failed


# the engine's run statuses a failure leaves in the run folder's status.json
_FOLDER_STATUS = {FailureReason.TIMEOUT: "timeout", FailureReason.INTERRUPTED: "interrupted"}


def settle_folder_status(run_dir: Path, reason: FailureReason, message: str) -> None:
    """A child that died (timeout, kill, signal) left ``status.json`` saying ``running``: say
    what happened, unless another process holds the folder (a retry already started there)."""
    from tuner.train.run_folder import is_locked, read_status, write_status

    if not run_dir.is_dir() or not (run_dir / "status.json").exists() or is_locked(run_dir):
        return
    if read_status(run_dir).get("status") != "running":
        return
    write_status(
        run_dir, status=_FOLDER_STATUS.get(reason, "failed"), message=message, failure_reason=str(reason)
    )
