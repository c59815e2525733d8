"""Recording a trial in Optuna: what its child reports while it trains, then how it ended.

Every write tolerates a trial that another worker already finished (it declared us dead while
we were cut off): an intermediate write raises ``TrialAbandoned`` (the supervisor then kills the
child), and the final ``tell`` uses ``skip_if_finished``, so a retried tell whose acknowledgement
was lost is harmless too.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tuner.orchestrate import _optuna_adapter as adapter
from tuner.orchestrate._process import resident_memory_mb
from tuner.orchestrate.budget import BROKEN_ATTR
from tuner.orchestrate.failures import (
    FailureReason,
    describe_exit,
    fail_trial,
    latest_checkpoint_step,
    save_error_log,
    settle_folder_status,
)
from tuner.orchestrate.messages import (
    Abandoned,
    CheckpointSaved,
    ChildMessage,
    Errored,
    Evaluated,
    Exited,
    Finished,
    Healthy,
    Outcome,
    Stalled,
    Started,
    TimedOut,
)
from tuner.orchestrate.phase import PhaseSettings
from tuner.orchestrate.storage_retries import with_retries
from tuner.orchestrate.supervise import TrialAbandoned

# a run that ended by itself with a value: it trained to the end, or a callback's goal was met
STOPPED_WITH_A_VALUE = ("completed", "target_reached")


class Recorder:
    """The storage writes of one trial (``trial_id``, number ``number``) of ``study``."""

    def __init__(
        self,
        storage: Any,
        study: Any,
        trial_id: int,
        number: int,
        *,
        attempt: int,
        last_step: int | None,
        on_eval: Callable[[int], None] = lambda step: None,
        frozen: Any = None,
        window: float | None = None,
    ) -> None:
        """``frozen``: the trial's ``FrozenTrial`` as claimed, for the sampler's ``after_trial``;
        ``window``: the run window it was claimed in (a broken workload holds only that one)."""
        self.storage, self.study, self.trial_id, self.number = storage, study, trial_id, number
        self.attempt, self.last_step, self.on_eval, self.frozen = attempt, last_step, on_eval, frozen
        self.window = window
        self.trained = False  # a training step finished (``Healthy``), or it resumed past one
        self.extra_attrs: dict[str, Any] = {}  # the worker's own, recorded with the result (``pruned_at``)

    def _set(self, key: str, value: Any) -> None:
        self._set_all({key: value})

    def _set_all(self, attrs: dict[str, Any]) -> None:
        """``attrs`` in one storage write where the storage allows it (``adapter.set_user_attrs``)."""
        from optuna.exceptions import UpdateFinishedTrialError

        try:
            with_retries(adapter.set_user_attrs, self.storage, self.trial_id, attrs)
        except UpdateFinishedTrialError:
            raise TrialAbandoned from None

    def on_message(self, message: ChildMessage) -> None:
        """Turn a child's message into storage writes; only the ones someone reads.

        A first attempt that starts at step 0 records nothing (0 is the default); the final
        checkpoint's step is recorded with the result (``record``).
        """
        from optuna.exceptions import UpdateFinishedTrialError

        if isinstance(message, Healthy) or (isinstance(message, Started) and message.step):
            self.trained = True
        match message:
            case Started(step=step) if self.attempt or step:
                self._set("resumed_from_step", int(step))
            case Healthy():
                self._set("healthy", True)
            case Evaluated(step=step, value=value):
                try:
                    with_retries(self.storage.set_trial_intermediate_value, self.trial_id, int(step), value)
                except UpdateFinishedTrialError:
                    raise TrialAbandoned from None
                self.on_eval(int(step))
            case CheckpointSaved(step=step) if step != self.last_step:
                self._set("last_checkpoint_step", int(step))
            case _:
                pass

    def fail(self, reason: FailureReason, message: str, settings: PhaseSettings, **attrs: Any) -> bool:
        """Record a failure (``fail_trial`` retries storage errors itself)."""
        return fail_trial(self.storage, self.study, self.trial_id, reason, message, settings, **attrs)

    def _complete(self, value: float) -> None:
        """COMPLETE with ``value``, in one storage write (``set_trial_state_values``, Optuna's
        public storage API, as a failure is written in ``fail_trial``).

        ``Study.tell(number, value)`` costs five round trips: it looks the trial's id up by its
        number and reads the whole trial twice, before (to check its state) and after (to
        return a copy that nobody here reads). What else it does is done here: a NaN is refused
        as tell refuses it, and the sampler's ``after_trial`` hook runs first (a no-op for
        tuner's TPE, quasi-random and random samplers; kept so that one that uses it works).
        Finishing is first-writer-wins (``check_trial_is_updatable``): a trial finished
        elsewhere, or by this very write whose acknowledgement was lost and is retried, raises
        ``UpdateFinishedTrialError``, which is what tell's ``skip_if_finished`` made harmless.
        """
        from optuna.trial import TrialState

        if math.isnan(value):
            raise ValueError(f"The value {value} is not acceptable")
        values = [float(value)]
        try:  # as tell: the result is written even if the hook raises
            if self.frozen is not None:
                self.study.sampler.after_trial(self.study, self.frozen, TrialState.COMPLETE, values)
        finally:
            with_retries(self.storage.set_trial_state_values, self.trial_id, TrialState.COMPLETE, values)

    def record(self, outcome: Outcome, run_dir: Path, settings: PhaseSettings) -> None:
        """The trial's end: its value (COMPLETE), a clean stop (PRUNED), or a failure."""
        from optuna.exceptions import UpdateFinishedTrialError
        from optuna.trial import TrialState

        if isinstance(outcome, Abandoned):
            return
        extra: dict[str, Any] = {"worker_rss_mb": resident_memory_mb(), **self.extra_attrs}
        child_dead = True
        if isinstance(outcome, Finished):
            extra.update(outcome.attrs)
        match outcome:
            case Finished() if outcome.status in STOPPED_WITH_A_VALUE and outcome.best_value is not None:
                extra.update(train_s=round(outcome.train_s, 4), best_step=outcome.best_step)
                extra["final_step"] = outcome.step
                if outcome.status == "target_reached":
                    extra["stopped_early"] = True
                try:  # the value is the trial's best (retrospective checkpoint selection)
                    self._set_all(extra)
                except TrialAbandoned:
                    return
                # a trial failed as stale in between raises: then it is simply no longer ours
                with contextlib.suppress(UpdateFinishedTrialError):
                    self._complete(outcome.best_value)
                return
            case Finished() if outcome.status == "stopped":
                # a clean stop (e.g. a trial that can no longer change the phase's result,
                # ``outpaced.py``): what it measured up to there is kept
                extra.update(train_s=round(outcome.train_s, 4), best_step=outcome.best_step)
                extra["final_step"] = outcome.step
                try:
                    self._set_all(extra)
                except TrialAbandoned:
                    return
                # rare (a trial outpaced in sweep-lr): Study.tell, which also gives a PRUNED trial
                # its last intermediate value as its value
                with contextlib.suppress(UpdateFinishedTrialError):
                    with_retries(self.study.tell, self.number, state=TrialState.PRUNED, skip_if_finished=True)
                return
            case Finished():
                extra.update(train_s=round(outcome.train_s, 4), best_step=outcome.best_step)
                reason = (
                    FailureReason(outcome.status)
                    if outcome.status in (FailureReason.DIVERGED, FailureReason.INTERRUPTED)
                    else FailureReason.CRASHED
                )
                message = outcome.message or (
                    "training finished without an objective value"
                    if outcome.status in STOPPED_WITH_A_VALUE
                    else outcome.status
                )
                extra["final_step"] = outcome.step
                child_dead = False  # it wrote its own status
            case Errored():
                reason, message = outcome.reason, outcome.message
                if outcome.workload and not self.trained:  # before any step: every trial would
                    extra[BROKEN_ATTR] = self.window if self.window is not None else True
            case TimedOut():
                reason, message = (
                    FailureReason.TIMEOUT,
                    f"no result within the {outcome.limit_s:g} s trial timeout",
                )
            case Stalled():
                reason, message = FailureReason.STALLED, outcome.message
            case Exited():
                reason, message = describe_exit(outcome.exitcode)
                if outcome.unresponsive_s is not None:
                    reason = FailureReason.INTERRUPTED
                    message = (
                        f"stopped by a signal: it showed no progress {outcome.unresponsive_s:.0f} s later "
                        "(hung in workload code?) and was killed; it resumes from its last checkpoint"
                    )
                elif outcome.signals:
                    reason = FailureReason.INTERRUPTED
                    message = f"stopped by a signal before it could checkpoint ({message})"
        if isinstance(outcome, Stalled) and outcome.stacks:  # where it hung, before the tail
            save_error_log(run_dir, f"{message}\n\nwhere it hung (every thread's stack):\n{outcome.stacks}")
        elif reason not in (FailureReason.DIVERGED, FailureReason.INTERRUPTED):
            save_error_log(run_dir, message)
        extra["last_checkpoint_step"] = latest_checkpoint_step(run_dir)
        try:
            failed_here = self.fail(reason, message, settings, **extra)
        except UpdateFinishedTrialError:
            failed_here = False
        if failed_here and child_dead and not isinstance(outcome, Errored):
            settle_folder_status(run_dir, reason, message)
