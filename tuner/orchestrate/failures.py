"""Failed trials: why they failed, what the run folder keeps, and whether to retry.

Reasons: ``crashed`` (an exception or a fatal signal), ``diverged`` (NaN/inf loss), ``timeout``
(past the per-trial limit), ``killed`` (SIGKILL, or a worker that stopped sending heartbeats),
``oom`` (out of memory), and ``interrupted`` (Ctrl-C or SIGTERM: a clean stop, always
continued). A retry is a new trial for the same slot with the same parameters and run folder,
so it resumes from the last checkpoint. ``diverged`` is never retried (it would diverge again);
a retry that raises the very same exception is not retried again; other reasons get at most
``max_retries`` retries. Interruptions do not count against ``max_retries``.
"""

from __future__ import annotations

import contextlib
import json
import signal
from pathlib import Path
from typing import Any

from tuner._atomic import atomic_write_text
from tuner.orchestrate.locks import phase_lock
from tuner.orchestrate.phase import PhaseSettings

RETRYABLE = frozenset({"crashed", "timeout", "killed", "oom", "interrupted"})
ERROR_LOG = "error.log"


def describe_exit(exitcode: int | None) -> tuple[str, str]:
    """(reason, message) for a child that died without telling us why."""
    if exitcode is not None and exitcode < 0:
        number = -exitcode
        name = signal.Signals(number).name if number in signal.Signals._value2member_map_ else str(number)
        if number == signal.SIGKILL:
            return "killed", "the trial process was killed by SIGKILL (the kernel's OOM killer does this too)"
        return "crashed", f"the trial process died of signal {name}"
    return "crashed", f"the trial process exited with code {exitcode} without a result"


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


def _retry_allowed(trial: Any, reason: str, error: str, settings: PhaseSettings) -> bool:
    if reason not in RETRYABLE:
        return False
    if reason == "interrupted":
        return True
    if reason in ("crashed", "oom") and trial.user_attrs.get("previous_error") == error:
        return False  # the same exception twice: deterministic, another retry would only repeat it
    return int(trial.user_attrs.get("retries_used", 0)) < settings.max_retries


def fail_trial(
    study: Any, trial: Any, reason: str, error: str, settings: PhaseSettings, **attrs: Any
) -> bool:
    """Record a failure of ``trial`` (a ``FrozenTrial``) and enqueue its retry if allowed.

    Runs under the phase lock, so two workers failing the same stale trial cannot both retry it.
    Returns whether a retry was enqueued. Side effects: user attrs on the trial, a new WAITING trial.
    """
    from optuna.exceptions import UpdateFinishedTrialError
    from optuna.trial import TrialState

    storage, trial_id = study._storage, trial._trial_id
    with phase_lock(storage, study.study_name):
        current = storage.get_trial(trial_id)
        if current.state.is_finished():
            return False
        retry = _retry_allowed(current, reason, error, settings)
        already = any(
            t.user_attrs.get("retry_of") == current.number for t in study.get_trials(deepcopy=False)
        )
        for key, value in {"failure_reason": reason, "error": error, "retried": retry, **attrs}.items():
            storage.set_trial_user_attr(trial_id, key, value)
        if retry and not already:
            params = current.system_attrs.get("fixed_params") or current.params
            study.enqueue_trial(
                dict(params),
                user_attrs={
                    "slot": current.user_attrs.get("slot", current.number),
                    "attempt": int(current.user_attrs.get("attempt", 0)) + 1,
                    "retry_of": current.number,
                    "retries_used": int(current.user_attrs.get("retries_used", 0))
                    + (reason != "interrupted"),
                    "previous_error": error
                    if reason != "interrupted"
                    else current.user_attrs.get("previous_error"),
                    **(
                        {"resume_dir": current.user_attrs["run_dir"]}
                        if "run_dir" in current.user_attrs
                        else {}
                    ),
                },
            )
        try:
            storage.set_trial_state_values(trial_id, state=TrialState.FAIL)
        except UpdateFinishedTrialError:
            return False
    return retry


def fail_stale_trials(study: Any, settings: PhaseSettings) -> list[int]:
    """Trials whose worker stopped sending heartbeats: mark them ``killed`` and retry them.

    Returns the numbers of the trials failed here.
    """
    storage = study._storage
    failed = []
    for trial_id in storage._get_stale_trial_ids(study._study_id):
        trial = storage.get_trial(trial_id)
        run_dir = trial.user_attrs.get("run_dir")
        message = "its worker stopped sending heartbeats (the process was killed, or its machine was lost)"
        # both are lower bounds of what a resume will load (the index lags latest.pt by a rename)
        known = [trial.user_attrs.get("last_checkpoint_step"), latest_checkpoint_step(run_dir)]
        step = max((s for s in known if s is not None), default=None)
        fail_trial(study, trial, "killed", message, settings, last_checkpoint_step=step)
        save_error_log(Path(run_dir) if run_dir else None, message)
        failed.append(trial.number)
    return failed
