"""From a batch to a loss and what the metrics score: the model's side of a step, one place for
training, evaluation and ``validate``'s one-batch check.

Three ways a workload's model is scored, chosen once per run:

- a plain model returns logits (or a regression's predictions); the engine's loss (the
  workload's ``loss_fn``, else the task's) gives one loss per target, averaged over real targets;
- a model that returns a dict or a ``ModelOutput`` with a ``loss`` (a Hugging Face model given
  ``labels``) trains on its own loss; its ``logits`` are scored, shifted one position when the
  workload is a causal language model (``shift_labels``), as the model shifts inside its loss;
- a workload's own ``step(model, batch) -> Step`` does the forward and the loss itself.

The first batch is checked against the contract before any weight changes (``checked``): a
wrong class count or a loss reduced to a scalar would otherwise surface at the first eval, or
never.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import torch

from tuner.errors import WorkloadCodeError
from tuner.train.batch_structure import batch_length, call_model, check_movable
from tuner.train.metrics import masked_mean_loss
from tuner.train.regression_metrics import as_predictions
from tuner.train.workload_errors import (
    blame_model,
    check_batch,
    check_inputs,
    check_item_losses,
    check_prediction_shape,
)
from tuner.workloads import IGNORE_INDEX, Step

LossFn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
_NOT_CALLED = object()  # ``Scorer._general``: the model has not run on the batch yet


@dataclass
class Scored:
    """One batch scored: ``loss`` (its mean over ``count`` targets) and what the metrics read.

    ``item_losses`` (one per target) when the engine computed the loss, so a split's loss sums
    exactly; else ``count`` weighs the batch's mean (a model's own loss, a workload's step).
    ``outputs`` / ``targets`` are aligned (a causal LM's shifted); None where a model gave only
    its loss.
    """

    loss: torch.Tensor
    outputs: torch.Tensor | None
    targets: torch.Tensor | None
    item_losses: torch.Tensor | None = None
    count: torch.Tensor | int | None = None


def read_output(output: Any) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """``(loss, logits)`` of a model's output: a tensor is logits; a dict or a ``ModelOutput``
    (a dict with attributes) gives its ``loss`` and ``logits`` (either may be missing)."""
    if isinstance(output, torch.Tensor):
        return None, output
    if isinstance(output, (tuple, list)):
        raise WorkloadCodeError(
            f"the workload's model returned a {type(output).__name__} of {len(output)}; tuner reads a "
            "tensor of logits, or a dict / ModelOutput with 'logits' and/or 'loss': return one of "
            "those, or give the workload a step(model, batch) -> Step that says what the loss is"
        )
    if isinstance(output, Mapping):
        loss, logits = output.get("loss"), output.get("logits")
    else:
        loss, logits = getattr(output, "loss", None), getattr(output, "logits", None)
    if loss is None and logits is None:
        raise WorkloadCodeError(
            f"the workload's model returned {type(output).__name__}, with neither logits nor a loss: "
            "return a tensor of logits, or a dict / ModelOutput with 'logits' and/or 'loss'"
        )
    return loss, logits


def shifted(logits: torch.Tensor | None, targets: torch.Tensor | None) -> tuple[Any, Any]:
    """A causal LM's logits and labels aligned: position t's logits against label t+1."""
    if logits is not None:
        logits = logits[..., :-1, :]
    if targets is not None:
        targets = targets[..., 1:]
    return logits, targets


def counted(targets: torch.Tensor | None, regression: bool, inputs: Any) -> torch.Tensor | int:
    """How many targets a batch's mean loss is over: targets that are not padding (every value of
    a regression's), or the batch's examples when there are no targets."""
    if targets is None:
        return batch_length(inputs)
    if regression:
        return targets.numel()
    return (targets != IGNORE_INDEX).sum()


class Scorer:
    """Scores one batch ``(inputs, targets)`` with a model: ``Scored``.

    ``loss_fn`` is the engine's loss (the workload's own, else the task's); ``model_loss`` says the
    workload named none, so a model's own loss is taken where it gives one. ``may_pad`` masks
    padding out of the engine's mean (off where the data has none: masking costs ~7 ops forward
    and 4 backward). ``check_shapes`` checks a regression's predictions on every batch (an
    evaluation's last batch of one shows a ``.squeeze()`` the first training batch did not).
    """

    def __init__(
        self,
        loss_fn: LossFn,
        *,
        model_loss: bool = True,
        regression: bool = False,
        num_classes: int | None = None,
        may_pad: bool = True,
        shift_labels: bool = False,
        step: Callable[[torch.nn.Module, Any], Any] | None = None,
        check_shapes: bool = False,
    ) -> None:
        self.loss_fn, self.model_loss, self.regression = loss_fn, model_loss, regression
        self.num_classes, self.may_pad, self.shift_labels = num_classes, may_pad, shift_labels
        self.step, self.check_shapes = step, check_shapes
        #: whether the first batch was checked against the contract (``validate`` checks one too)
        self.checked = num_classes is None
        #: the plain path is known: a tensor in, a tensor of logits out, the engine's loss (set by
        #: the first batch, whose checks this skips thereafter: their cost is a step's, each step)
        self._tensor_logits = self._path_known = False

    def __call__(self, model: torch.nn.Module, inputs: Any, targets: Any) -> Scored:
        if self._tensor_logits:  # the plain path, once its first batch was checked: no detour
            try:
                logits = model(inputs)
            except Exception as error:
                blamed = blame_model(error, model)
                if blamed is None:
                    raise
                raise blamed from error
            if type(logits) is torch.Tensor:
                item_losses = self.loss_fn(logits, targets)
                loss = masked_mean_loss(item_losses, targets) if self.may_pad else item_losses.mean()
                return Scored(loss, logits, targets, item_losses)
            self._tensor_logits = False  # a model whose output changes type: the general path
            return self._general(model, inputs, targets, output=logits)
        return self._general(model, inputs, targets)

    def _general(
        self, model: torch.nn.Module, inputs: Any, targets: Any, output: Any = _NOT_CALLED
    ) -> Scored:
        """Every way a batch is scored, and the first batch's checks; ``output``: the model's, when
        ``__call__`` ran it already."""
        if not self.checked:  # the first batch: what the model is given must fit it
            check_movable(inputs)
            check_inputs(inputs, model)
        if self.step is not None:
            return self._own_step(model, inputs, targets)
        try:
            if output is _NOT_CALLED:
                output = call_model(model, inputs)
        except Exception as error:
            blamed = blame_model(error, model)
            if blamed is None:
                raise
            raise blamed from error
        own_loss, logits = read_output(output)
        if self.shift_labels:
            logits, targets = shifted(logits, targets)
        if own_loss is not None and self.model_loss:
            return self._model_loss(own_loss, logits, targets, inputs)
        if logits is None:
            raise WorkloadCodeError(
                "the workload's model returned a loss but no logits, and the workload has a loss_fn "
                "of its own, which needs them"
            )
        if targets is None:
            raise WorkloadCodeError(
                "the workload's batch has no targets (a dict item needs 'labels'); give the items "
                "labels, or a step(model, batch) -> Step that computes the loss"
            )
        self._check(logits, targets)
        if self.regression:  # every loss sees one prediction per target, never a broadcast
            logits = as_predictions(logits, targets)
        item_losses = self.loss_fn(logits, targets)
        if not self.checked:
            check_item_losses(item_losses, targets)
            self.checked = True
        if not self._path_known:
            # a tensor in, logits out, the engine's loss: later batches take ``__call__``'s short way
            self._path_known = True
            self._tensor_logits = (
                type(inputs) is torch.Tensor
                and type(output) is torch.Tensor
                and not (self.regression or self.shift_labels or self.check_shapes)
            )
        loss = masked_mean_loss(item_losses, targets) if self.may_pad else item_losses.mean()
        return Scored(loss, logits, targets, item_losses)

    def _check(self, outputs: torch.Tensor, targets: torch.Tensor) -> None:
        if not self.checked:
            check_batch(outputs, targets, self.num_classes, self.regression)  # type: ignore[arg-type]
        elif self.check_shapes and self.regression:
            check_prediction_shape(outputs, targets)

    def _model_loss(self, loss: Any, logits: Any, targets: Any, inputs: Any) -> Scored:
        """The model's own loss (a mean over its counted targets); its logits scored if given."""
        if not isinstance(loss, torch.Tensor) or loss.numel() != 1:
            got = tuple(loss.shape) if isinstance(loss, torch.Tensor) else type(loss).__name__
            raise WorkloadCodeError(f"the workload's model returned a loss of {got}; expected a scalar")
        if logits is not None and targets is not None:
            self._check(logits, targets)
            if self.regression:
                logits = as_predictions(logits, targets)
        self.checked = True
        return Scored(loss.reshape(()), logits, targets, None, counted(targets, self.regression, inputs))

    def _own_step(self, model: torch.nn.Module, inputs: Any, targets: Any) -> Scored:
        """The workload's ``step(model, batch)``: the batch as the items made it (a pair, a dict)."""
        batch = inputs if isinstance(inputs, Mapping) else (inputs, targets)
        try:
            result = self.step(model, batch)  # type: ignore[misc]
        except Exception as error:
            blamed = blame_model(error, model)
            if blamed is None:
                raise
            raise blamed from error
        if isinstance(result, torch.Tensor):
            result = Step(loss=result)
        if not isinstance(result, Step):
            raise WorkloadCodeError(
                f"the workload's step returned {type(result).__name__}; expected tuner.workloads.Step "
                "(loss, outputs, targets) or the loss tensor"
            )
        outputs, step_targets = result.outputs, result.targets
        if outputs is not None and step_targets is not None:
            self._check(outputs, step_targets)
            if self.regression:
                outputs = as_predictions(outputs, step_targets)
        if not isinstance(result.loss, torch.Tensor) or result.loss.numel() != 1:
            got = tuple(result.loss.shape) if isinstance(result.loss, torch.Tensor) else type(result.loss)
            raise WorkloadCodeError(f"the workload's step returned a loss of {got}; expected a scalar")
        self.checked = True
        count = result.count if result.count is not None else counted(step_targets, self.regression, inputs)
        return Scored(result.loss.reshape(()), outputs, step_targets, None, count)
