"""The training loop: forward, loss, backward, step, schedule — and events around them.

Steps are the unit (never epochs, never wall time). Everything optional (logging, checkpoints,
progress, pruning) is a callback; the loop itself stays short enough to read in one sitting.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch.utils.data import TensorDataset

from tuner.train.data import StepBatches
from tuner.train.distributed import (
    NO_STOP,
    SINGLE,
    STOP,
    STOP_WITH_CHECKPOINT,
    Ranks,
    agree_on_step,
    average_batch_norm_stats,
    gather_objects,
)
from tuner.train.evaluation import Evaluator
from tuner.train.events import FINISHED, Callback, Event, StopReason, StopTraining
from tuner.train.metrics import masked_mean_loss
from tuner.train.regression_metrics import as_predictions
from tuner.train.rng import rng_state, set_rng_state
from tuner.train.schedules import Schedule
from tuner.train.workload_errors import blame_model, check_batch, check_inputs, check_item_losses
from tuner.workloads import IGNORE_INDEX

LossFn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


def may_contain_padding(dataset: Any) -> bool:
    """False only when we can see every target: a TensorDataset with no ``IGNORE_INDEX``."""
    if isinstance(dataset, TensorDataset) and len(dataset.tensors) >= 2:
        return bool((dataset.tensors[1] == IGNORE_INDEX).any())
    return True


def should_eval(step: int, eval_every: int, max_train_steps: int) -> bool:
    """Evaluate every ``eval_every`` steps and always after the last one."""
    return step > 0 and (step % eval_every == 0 or step == max_train_steps)


class Trainer:
    """Runs ``max_train_steps`` optimizer steps and emits events around each stage.

    State callbacks may read: ``step`` (optimizer steps done), ``max_train_steps``, ``model``,
    ``optimizer``, ``lr``, ``last_loss`` (float), ``last_eval`` (``{"val/accuracy": ...}``),
    ``last_predictions``, ``stop_reason``, ``start_step`` (where this process started).
    """

    def __init__(
        self,
        *,
        model: torch.nn.Module,
        batches: StepBatches,
        loss_fn: LossFn,
        optimizer: torch.optim.Optimizer,
        schedule: Schedule,
        base_lr: float,
        max_train_steps: int,
        eval_every: int,
        evaluator: Evaluator | None = None,
        callbacks: Sequence[Callback] = (),
        grad_clip_norm: float | None = None,
        augment: Callable[[torch.Tensor, torch.Generator], torch.Tensor] | None = None,
        num_classes: int | None = None,
        ranks: Ranks = SINGLE,
        train_model: torch.nn.Module | None = None,
        regression: bool = False,
    ) -> None:
        """``num_classes``, when given, checks the first batch's logits and targets against it
        (for a ``regression``, predictions against real-valued targets; nothing is padding).

        With several processes, ``ranks`` is this one's place and ``train_model`` the
        ``DistributedDataParallel`` wrapper the training forward goes through; ``model`` stays
        the plain module (evaluation, checkpoints and callbacks see it, so a checkpoint of a
        2-process run loads into 1 process and back).
        """
        self.model, self.batches, self.loss_fn, self.optimizer = model, batches, loss_fn, optimizer
        self.train_model = train_model if train_model is not None else model
        self.ranks = ranks
        self._rank_rngs: list[dict[str, Any]] | None = None
        self._agreed_stop = NO_STOP
        self.schedule, self.base_lr = schedule, base_lr
        self.max_train_steps, self.eval_every = max_train_steps, eval_every
        self.evaluator, self.grad_clip_norm, self.augment = evaluator, grad_clip_norm, augment
        self.callbacks = sorted(callbacks, key=lambda cb: cb.order)
        self.may_pad = not regression and may_contain_padding(batches.dataset)
        self.num_classes, self.regression = num_classes, regression
        self._batch_checked = num_classes is None
        self.step = 0
        self.start_step = 0
        self.lr = base_lr * schedule(0)
        self.last_loss = math.nan
        self.last_eval: dict[str, float] = {}
        self.last_eval_step = -1
        self.last_predictions: list[dict[str, Any]] = []
        self.stop_reason: StopReason | str | None = None
        self.stop_message = ""
        self._stop_requested: StopReason | str | None = None
        self._handlers = {
            event: [
                getattr(cb, f"on_{event.value}") for cb in self.callbacks if hasattr(cb, f"on_{event.value}")
            ]
            for event in Event
        }

    # -- events -------------------------------------------------------------------------------
    def emit(self, event: Event) -> None:
        for handler in self._handlers[event]:
            try:
                handler(self)
            except StopTraining as stop:
                # The event's other handlers still run (loggers, checkpoints) and the stop takes
                # effect at the step boundary: a pruned step's eval is never half-recorded.
                self.request_stop(stop.reason, stop.message)

    @property
    def stop_requested(self) -> StopReason | str | None:
        return self._stop_requested

    def request_stop(self, reason: StopReason | str = StopReason.STOPPED, message: str = "") -> None:
        """Stop at the next step boundary (safe from a signal handler); the first request wins."""
        if self._stop_requested is None:
            self._stop_requested, self.stop_message = reason, message

    # -- the loop -----------------------------------------------------------------------------
    def fit(self) -> StopReason | str:
        """Train until ``max_train_steps`` or a stop; returns why it stopped.

        Side effects: whatever the callbacks do (files, logs); the model and optimizer change.
        """
        self.start_step = self.step
        checkpointed_step = self.step  # a resumed run's latest.pt is of this step
        self.model.train()
        self.emit(Event.FIT_START)
        try:
            while self.step < self.max_train_steps:
                # several processes agree on a stop inside the step (see train_step)
                if self._stop_requested is not None and not self.ranks.distributed:
                    raise StopTraining(self._stop_requested, self.stop_message)
                if self._agreed_stop == STOP_WITH_CHECKPOINT:  # agreed in the step just finished
                    raise StopTraining(self._stop_requested or StopReason.INTERRUPTED, self.stop_message)
                self.train_step()
                if self.evaluator is not None and should_eval(
                    self.step, self.eval_every, self.max_train_steps
                ):
                    self.evaluate()
                    self.checkpoint()
                    checkpointed_step = self.step
            self.stop_reason = StopReason.COMPLETED
        except StopTraining as stop:
            self.stop_reason, self.stop_message = stop.reason, stop.message
            # every rank must take the same branch (a checkpoint is a collective): the agreed one
            interrupted = (
                self._agreed_stop == STOP_WITH_CHECKPOINT
                if self.ranks.distributed
                else stop.reason == StopReason.INTERRUPTED
            )
            if interrupted and checkpointed_step != self.step:
                self.checkpoint()  # keep every finished step
        except BaseException:
            self.emit(Event.EXCEPTION)
            raise
        self.emit(Event.FIT_END)
        return self.stop_reason

    def train_step(self) -> None:
        self.emit(Event.TRAIN_STEP_START)
        inputs, targets = self.batches.get(self.step)
        if self.augment is not None:
            generator = torch.Generator(device=inputs.device)
            # each rank augments its own slice of the batch: its own stream (rank 0's is 1 process's)
            seed = self.batches.data_seed * 1_000_003 + self.step
            generator.manual_seed(seed * self.ranks.world_size + self.ranks.rank)
            inputs = self.augment(inputs, generator)
        lr = self.base_lr * self.schedule(self.step)
        if lr != self.lr or self.step == self.start_step:  # constant phases cost nothing
            for group in self.optimizer.param_groups:
                group["lr"] = lr
        self.lr = lr
        if not self._batch_checked:
            check_inputs(inputs, self.model)
        try:
            logits = self.train_model(inputs)
        except Exception as error:
            blamed = blame_model(error, self.model)
            if blamed is None:
                raise
            raise blamed from error
        first = not self._batch_checked
        if first:  # the first step's own forward: no extra pass, no RNG drawn
            check_batch(logits, targets, self.num_classes, self.regression)  # type: ignore[arg-type]
        if self.regression:  # every loss sees one prediction per target, never a broadcast
            logits = as_predictions(logits, targets)
        item_losses = self.loss_fn(logits, targets)
        if first:
            check_item_losses(item_losses, targets)
            self._batch_checked = True
        # Masking costs ~7 ops forward and 4 backward per step: only pay for it where padding exists.
        loss = masked_mean_loss(item_losses, targets) if self.may_pad else item_losses.mean()
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        # A CPU-GPU sync point, on purpose: a NaN must stop the run before it reaches the weights.
        if self.ranks.distributed:
            self.last_loss, self._agreed_stop = agree_on_step(loss, self._stop_request_code(), self.ranks)
        else:
            self.last_loss = loss.item()
        if not math.isfinite(self.last_loss):
            raise StopTraining(StopReason.DIVERGED, f"loss is {self.last_loss} at step {self.step + 1}")
        if self._agreed_stop == STOP:  # before the optimizer step: this step is not taken
            raise StopTraining(self._stop_requested or StopReason.STOPPED, self.stop_message)
        # A stop with a checkpoint (a Ctrl-C, a preemption) finishes this step first: its forward
        # already drew from the RNGs and moved the batch-norm statistics, so a checkpoint taken
        # without the step would hold a state no uninterrupted run passes through, and the resume
        # would not be exact. The loop stops at its next turn, after this step's eval if one is due.
        if self.grad_clip_norm is not None:
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.grad_clip_norm)
        self.optimizer.step()
        self.step += 1
        self.emit(Event.TRAIN_STEP_END)

    def _stop_request_code(self) -> int:
        if self._stop_requested is None:
            return NO_STOP
        return STOP_WITH_CHECKPOINT if self._stop_requested == StopReason.INTERRUPTED else STOP

    def evaluate(self) -> dict[str, float]:
        assert self.evaluator is not None
        average_batch_norm_stats(self.model, self.ranks)  # evaluate every rank's statistics
        self.emit(Event.EVAL_START)
        self.last_eval, self.last_predictions = self.evaluator.run(self.model)
        self.last_eval_step = self.step
        self.emit(Event.EVAL_END)
        return self.last_eval

    def checkpoint(self) -> None:
        """The ``checkpoint`` event; with several processes, every rank takes part first: the
        batch-norm statistics are averaged and every rank's RNG state goes into the file."""
        if self.ranks.distributed:
            if self.last_eval_step != self.step:  # an eval at this step averaged them already
                average_batch_norm_stats(self.model, self.ranks)
            self._rank_rngs = gather_objects(rng_state(), self.ranks)
        self.emit(Event.CHECKPOINT)

    # -- resume -------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """Everything needed to continue bit-for-bit: weights, optimizer, RNGs, callbacks."""
        return {
            "step": self.step,
            "model": self.model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "rng": rng_state(),
            # every rank's RNGs (dropout draws differ per rank), for an exact multi-process resume
            **({"rank_rng": self._rank_rngs} if self.ranks.distributed and self._rank_rngs else {}),
            "last_eval": dict(self.last_eval),
            "last_eval_step": self.last_eval_step,
            "callbacks": {cb.state_key: cb.state_dict() for cb in self.callbacks},
            # a goal met at this step (TARGET_REACHED) is final: the checkpoint says so, and a
            # resume from it stops before training a step
            "finished": (
                {"reason": str(self._stop_requested.value), "message": self.stop_message}
                if self._stop_requested in FINISHED and isinstance(self._stop_requested, StopReason)
                else None
            ),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.step = int(state["step"])
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        rank_rngs = state.get("rank_rng")
        if self.ranks.distributed and rank_rngs and len(rank_rngs) == self.ranks.world_size:
            set_rng_state(rank_rngs[self.ranks.rank])
        elif not self.ranks.distributed or self.ranks.is_main:
            set_rng_state(state["rng"])
        self.last_eval = dict(state.get("last_eval", {}))
        self.last_eval_step = int(state.get("last_eval_step", -1))
        finished = state.get("finished")
        if finished:
            self._stop_requested, self.stop_message = StopReason(finished["reason"]), finished["message"]
        saved = state.get("callbacks", {})
        for cb in self.callbacks:
            if cb.state_key in saved:
                cb.load_state_dict(saved[cb.state_key])
