"""The training loop: forward, loss, backward, step, schedule — and events around them.

Steps are the unit (never epochs, never wall time). Everything optional (logging, checkpoints,
progress, pruning) is a callback; the loop itself stays short enough to read in one sitting.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch.utils.data import TensorDataset

from tuner.train.batch_structure import split_pair
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
from tuner.train.precision import FULL, Precision
from tuner.train.rng import rng_state, set_rng_state
from tuner.train.schedules import Schedule
from tuner.train.scoring import Scored, Scorer, counted
from tuner.workloads import IGNORE_INDEX

LossFn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


def may_contain_padding(dataset: Any, collate: Any = None) -> bool:
    """False only when we can see every target: a TensorDataset with no ``IGNORE_INDEX`` (and no
    collate of the workload's own, which could make any batch)."""
    if isinstance(dataset, TensorDataset) and len(dataset.tensors) >= 2 and collate is None:
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
        loss_fn: LossFn | None = None,
        optimizer: torch.optim.Optimizer,
        schedule: Schedule,
        base_lr: float,
        max_train_steps: int,
        eval_every: int,
        evaluator: Evaluator | None = None,
        callbacks: Sequence[Callback] = (),
        grad_clip_norm: float | None = None,
        augment: Callable[[Any, torch.Generator], Any] | None = None,
        num_classes: int | None = None,
        ranks: Ranks = SINGLE,
        train_model: torch.nn.Module | None = None,
        regression: bool = False,
        scorer: Scorer | None = None,
        precision: Precision = FULL,
        micro_batches: int = 1,
        eval_model: torch.nn.Module | None = None,
    ) -> None:
        """``scorer`` scores a batch (``tuner.train.scoring``); without one, ``loss_fn`` on the
        model's logits, and ``num_classes``, when given, checks the first batch's logits and
        targets against it (for a ``regression``, predictions against real-valued targets).

        ``precision`` runs the forward under autocast (with float16's gradient scaler);
        ``micro_batches`` > 1 trains each batch in that many equal parts, their gradients added
        up with each part's loss weighted by its share of the batch's targets.

        With several processes, ``ranks`` is this one's place and ``train_model`` the
        ``DistributedDataParallel`` wrapper the training forward goes through; ``model`` stays
        the plain module (evaluation, checkpoints and callbacks see it, so a checkpoint of a
        2-process run loads into 1 process and back). ``train_model`` and ``eval_model`` (default:
        ``model``) are where a compiled model goes (``training.compile``).
        """
        self.model, self.batches, self.optimizer = model, batches, optimizer
        self.train_model = train_model if train_model is not None else model
        self.eval_model = eval_model if eval_model is not None else model
        self.ranks = ranks
        self._rank_rngs: list[dict[str, Any]] | None = None
        self._agreed_stop = NO_STOP
        self.schedule, self.base_lr = schedule, base_lr
        self.max_train_steps, self.eval_every = max_train_steps, eval_every
        self.evaluator, self.grad_clip_norm, self.augment = evaluator, grad_clip_norm, augment
        self.callbacks = sorted(callbacks, key=lambda cb: cb.order)
        self.num_classes, self.regression = num_classes, regression
        if scorer is None:
            assert loss_fn is not None, "a Trainer needs a scorer or a loss_fn"
            scorer = Scorer(
                loss_fn,
                model_loss=False,
                regression=regression,
                num_classes=num_classes,
                may_pad=not regression and may_contain_padding(batches.dataset),
            )
        self.scorer = scorer
        self.precision, self.micro_batches = precision, micro_batches
        self.scaler = precision.scaler()
        # float32, one pass a batch: the step's forward and backward with no context to enter
        self._plain = micro_batches == 1 and not precision.mixed
        # each group's multiple of the scheduled LR (Workload.param_groups' lr_scale)
        self._lr_scales = [float(group.get("lr_scale", 1.0)) for group in optimizer.param_groups]
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
                if self.evaluator is not None and (
                    self.step % self.eval_every == 0 or self.step == self.max_train_steps
                ):  # should_eval, inlined: the loop's own cost per step is what a hand loop has not
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
        if self._handlers[Event.TRAIN_STEP_START]:
            self.emit(Event.TRAIN_STEP_START)
        inputs, targets = self.batches.get(self.step)
        if self.augment is not None:
            generator = torch.Generator(device=self.batches.device)
            # each rank augments its own slice of the batch: its own stream (rank 0's is 1 process's)
            seed = self.batches.data_seed * 1_000_003 + self.step
            generator.manual_seed(seed * self.ranks.world_size + self.ranks.rank)
            inputs = self.augment(inputs, generator)
        lr = self.base_lr * self.schedule(self.step)
        if lr != self.lr or self.step == self.start_step:  # constant phases cost nothing
            for group, scale in zip(self.optimizer.param_groups, self._lr_scales, strict=True):
                group["lr"] = lr * scale
        self.lr = lr
        self.optimizer.zero_grad(set_to_none=True)
        if self._plain:
            loss = self.scorer(self.train_model, inputs, targets).loss
            loss.backward()
        elif self.micro_batches == 1:
            loss = self._forward_backward(inputs, targets, weight=None)
        else:
            loss = self._accumulate(inputs, targets)
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
        if self.scaler is not None:
            self.scaler.unscale_(self.optimizer)  # clipping reads the true gradients
        if self.grad_clip_norm is not None:
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.grad_clip_norm)
        if self.scaler is not None:
            self.scaler.step(self.optimizer)  # skipped when the gradients overflowed float16
            self.scaler.update()
        else:
            self.optimizer.step()
        self.step += 1
        self.emit(Event.TRAIN_STEP_END)

    def _forward_backward(self, inputs: Any, targets: Any, weight: Any) -> torch.Tensor:
        """One forward (under the run's precision) and its backward; the loss, detached for a
        micro-batch (``weight``: its share of the batch's targets)."""
        with self.precision.autocast():
            scored: Scored = self.scorer(self.train_model, inputs, targets)
        loss = scored.loss if weight is None else scored.loss * weight
        (self.scaler.scale(loss) if self.scaler is not None else loss).backward()
        return loss if weight is None else loss.detach()

    def _accumulate(self, inputs: Any, targets: Any) -> torch.Tensor:
        """The batch in ``micro_batches`` equal parts, gradients added up: each part's mean loss
        weighted by its share of the batch's counted targets, so the sum is the batch's mean (the
        same update as one pass, but for batch norm's statistics, which each part computes on its
        own). Only the last part synchronises gradients across processes (DDP's ``no_sync``)."""
        parts = split_pair(inputs, targets, self.micro_batches)
        if self.scorer.step is None:
            counts = [counted(self._aligned(t), self.regression, i) for i, t in parts]
            total = sum(counts)
            weights = [c / total if float(total) else 1.0 / len(parts) for c in counts]
        else:  # a workload's own step: its targets are its business; parts weigh by their examples
            weights = [1.0 / len(parts)] * len(parts)
        total_loss: torch.Tensor | None = None
        for index, ((part_inputs, part_targets), weight) in enumerate(zip(parts, weights, strict=True)):
            last = index == len(parts) - 1
            syncing = last or not self.ranks.distributed or not hasattr(self.train_model, "no_sync")
            with contextlib.nullcontext() if syncing else self.train_model.no_sync():
                part = self._forward_backward(part_inputs, part_targets, weight).float()
            total_loss = part if total_loss is None else total_loss + part
        assert total_loss is not None
        return total_loss

    def _aligned(self, targets: Any) -> Any:
        """The targets a loss is counted over: a causal LM's shifted by one."""
        if targets is not None and self.scorer.shift_labels:
            return targets[..., 1:]
        return targets

    def _stop_request_code(self) -> int:
        if self._stop_requested is None:
            return NO_STOP
        return STOP_WITH_CHECKPOINT if self._stop_requested == StopReason.INTERRUPTED else STOP

    def evaluate(self) -> dict[str, float]:
        assert self.evaluator is not None
        average_batch_norm_stats(self.model, self.ranks)  # evaluate every rank's statistics
        self.emit(Event.EVAL_START)
        self.last_eval, self.last_predictions = self.evaluator.run(self.eval_model)
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
            **({"scaler": self.scaler.state_dict()} if self.scaler is not None else {}),
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
        if self.scaler is not None and "scaler" in state:
            self.scaler.load_state_dict(state["scaler"])
        finished = state.get("finished")
        if finished:
            self._stop_requested, self.stop_message = StopReason(finished["reason"]), finished["message"]
        saved = state.get("callbacks", {})
        for cb in self.callbacks:
            if cb.state_key in saved:
                cb.load_state_dict(saved[cb.state_key])
