"""Stopping a trial that can no longer change its phase's result.

sweep-lr is the case: once one learning rate has fit the training set at step ``s``, another
still training past ``s`` without having fit can no longer be the fewest-steps winner, and every
step it trains after that is spent on nothing. The phase (the playbook) says, from the phase's
trials, the step from which a trial still training no longer matters
(``WorkerOptions.outpaced_from``); the worker keeps that step in memory shared with its trial's
child (``StepLimit``: set before the fork, refreshed at each of the child's evaluations and every
``REFRESH_S``), and the child (``OutpacedCheck``) stops at its first evaluation at or after it.

The stop is clean (``StopReason.STOPPED``, recorded as Optuna ``PRUNED``, never retried), with
``outpaced_at`` (the step the trial could not beat) among the trial's attributes. A trial whose
goal is met at that same evaluation keeps its result: the fit criterion runs first, and the
first stop requested wins. The child never reads the storage; only its worker does.
"""

from __future__ import annotations

from typing import Any

from tuner.train.events import Callback, StopReason, StopTraining
from tuner.train.node_files import FileStepLimit

REFRESH_S = 2.0  # the worker re-reads the limit this often, besides at each of its child's evals
_NONE = -1


class StepLimit:
    """The step from which the trial no longer matters (None: no such step yet).

    Created by the supervisor before the fork (shared memory); the supervisor writes, the child
    reads at each evaluation.
    """

    def __init__(self, context: Any) -> None:
        self._value = context.RawValue("q", _NONE)

    def set(self, step: int | None) -> None:
        self._value.value = _NONE if step is None else int(step)

    @property
    def step(self) -> int | None:
        value = int(self._value.value)
        return None if value == _NONE else value


class OutpacedCheck(Callback):
    """At every evaluation: has the trial reached the step from which it no longer matters?"""

    order = 5  # after the fit criterion (0): a goal met at this evaluation is a result, not a stop

    def __init__(self, limit: StepLimit) -> None:
        self.limit = limit
        self.outpaced_at: int | None = None  # the limit the trial stopped at
        self._written: int | None = None  # on several nodes: the limit last given to rank 0
        self.stopped = False

    # -- a trial on several nodes (tuner.train.nodes): rank 0 reads the limit from a file --------
    def for_rank_zero(self, attempt: Any) -> OutpacedCheck:
        self._written = self.limit.step
        FileStepLimit(attempt.limit).set(self._written)
        return OutpacedCheck(FileStepLimit(attempt.limit))  # type: ignore[arg-type]

    def on_owner_poll(self, attempt: Any, messages: list[Any]) -> None:
        step = self.limit.step
        if step != self._written:  # the worker moved it: rank 0 reads it at its next eval
            FileStepLimit(attempt.limit).set(step)
            self._written = step

    def on_eval_end(self, loop: Any) -> None:
        limit = self.limit.step
        if limit is not None and loop.step >= limit:
            self.outpaced_at = limit
            raise StopTraining(
                StopReason.STOPPED,
                f"stopped at step {loop.step}: its phase needs no more of it from step {limit} "
                "(another trial reached the goal by then, or the round's pruner stopped it)",
            )

    def on_fit_end(self, loop: Any) -> None:
        # another stop (the goal met at the same eval, the last step) may have won
        self.stopped = self.outpaced_at is not None and loop.stop_reason == StopReason.STOPPED

    def trial_attrs(self) -> dict[str, Any]:
        """``{"outpaced_at": step}`` when the trial stopped here, else nothing."""
        return {"outpaced_at": self.outpaced_at} if self.stopped else {}

    def state_dict(self) -> dict[str, Any]:
        return {"outpaced_at": self.outpaced_at, "stopped": self.stopped}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.outpaced_at, self.stopped = state.get("outpaced_at"), bool(state.get("stopped"))
