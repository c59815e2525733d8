"""What a trial's training loop tells its worker: ``PipeReporter``, the child's callback.

Kept apart from ``trial_process`` so that the worker can import that module without the engine.
"""

from __future__ import annotations

import time
from typing import Any

from tuner.orchestrate.messages import CheckpointSaved, Evaluated, Healthy, Started
from tuner.orchestrate.stall import ProgressBeacon
from tuner.train import Callback, CheckpointCallback

#: how often rank 0 of a trial on several nodes tells its owner the step it reached
PROGRESS_EVERY_S = 1.0


class StepProgress:
    """Rank 0 on another node reached ``step`` (for the owner's stall watchdog only)."""

    def __init__(self, step: int) -> None:
        self.step = step


class PipeReporter(Callback):
    """Tells the worker what the loop did; the worker turns it into storage writes.

    A checkpoint is reported once it is on disk (the checkpoint writer works in the background),
    so the step a retry would resume from is never claimed too early. Every step, eval and
    checkpoint is a sign of life on ``beacon`` (the progress watchdog's).

    On several nodes (``tuner.train.nodes``) rank 0 runs a copy that sends through the attempt's
    events file, with a ``StepProgress`` at most every ``PROGRESS_EVERY_S`` instead of the
    shared beacon; the owner passes every other message on to the real pipe.
    """

    order = 20  # after the objective tracker (0) and the checkpoint writer (10)

    def __init__(
        self,
        connection: Any,
        metric: str,
        beacon: ProgressBeacon | None,
        progress_every_s: float | None = None,
    ) -> None:
        self.connection, self.metric, self.beacon = connection, metric, beacon
        self.progress_every_s, self.next_progress = progress_every_s, 0.0
        self.healthy = False
        self.checkpoints: Any = None
        self.reported: int | None = None

    def on_fit_start(self, loop: Any) -> None:
        self.checkpoints = next((c for c in loop.callbacks if isinstance(c, CheckpointCallback)), None)
        self.reported = self.checkpoints.saved_step if self.checkpoints else None
        self.connection.send(Started(loop.step))

    def on_train_step_end(self, loop: Any) -> None:
        if self.beacon is not None:
            self.beacon.step_done(loop.step)
        if self.progress_every_s is not None and time.monotonic() >= self.next_progress:
            self.next_progress = time.monotonic() + self.progress_every_s
            self.connection.send(StepProgress(loop.step))
        if not self.healthy:
            self.healthy = True
            self.connection.send(Healthy(loop.step))
        self._report_saved_checkpoint()

    def on_fit_end(self, loop: Any) -> None:  # after the writer's flush (order 10 < 20)
        self._mark()
        self._report_saved_checkpoint()

    def on_eval_start(self, loop: Any) -> None:
        self._mark()

    def on_checkpoint(self, loop: Any) -> None:
        self._mark()

    def on_eval_end(self, loop: Any) -> None:
        self._mark()
        value = loop.last_eval.get(self.metric)
        if value is not None:
            self.connection.send(Evaluated(loop.step, float(value)))

    def _mark(self) -> None:
        if self.beacon is not None:
            self.beacon.mark()

    def _report_saved_checkpoint(self) -> None:
        if self.checkpoints is not None and self.checkpoints.saved_step != self.reported:
            self.reported = self.checkpoints.saved_step
            self.connection.send(CheckpointSaved(self.reported))

    # -- a trial on several nodes -----------------------------------------------------------------
    def for_rank_zero(self, attempt: Any) -> PipeReporter:
        from tuner.train.node_files import EventSender

        return PipeReporter(EventSender(attempt.events), self.metric, None, PROGRESS_EVERY_S)

    def on_owner_poll(self, attempt: Any, messages: list[Any]) -> None:
        for message in messages:
            if isinstance(message, StepProgress):
                if self.beacon is not None:
                    self.beacon.step_done(message.step)
                continue
            self._mark()
            self.connection.send(message)
