"""What a workload is: the contract between a user's code and the training engine.

A workload entry point is a plain function ``build(ctx: WorkloadContext) -> Workload``.
The engine seeds torch with the study's model-init seed right before calling it, so the
model's initial weights depend only on that seed (the same on every rank and every retry);
data *order* and augmentation are drawn by the engine from a separate data seed.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:  # torch stays out of `tuner validate` and `tuner --help`
    import torch
    from torch.utils.data import Dataset

#: Targets equal to this weigh zero in the loss and in every metric (padding).
IGNORE_INDEX = -100

#: Metrics of a classifier; ``per_class`` adds ``class_<k>_correct`` / ``class_<k>_recall``.
CLASSIFICATION_METRICS = ("loss", "accuracy", "error_rate", "top5_accuracy", "mcc", "perplexity", "per_class")
#: Metrics of a regression model: mean squared and absolute error, and the coefficient of
#: determination (1 - squared error / the squared error of predicting the targets' mean).
REGRESSION_METRICS = ("loss", "mse", "mae", "r2")
#: Metric names a workload may ask for.
KNOWN_METRICS = (*CLASSIFICATION_METRICS, *REGRESSION_METRICS[1:])

#: What a workload predicts: class indices scored by logits, or real numbers.
Task = Literal["classification", "regression"]
TASKS: tuple[Task, ...] = ("classification", "regression")
#: What a workload scores when it names no metrics.
DEFAULT_METRICS: dict[str, tuple[str, ...]] = {
    "classification": ("loss", "accuracy", "error_rate"),
    "regression": ("loss", "mse", "mae", "r2"),
}


def task_metrics(task: str) -> tuple[str, ...]:
    """The metric names that make sense for ``task`` (an accuracy has no meaning for a regression)."""
    return REGRESSION_METRICS if task == "regression" else CLASSIFICATION_METRICS


@dataclass(frozen=True)
class WorkloadContext:
    """What the engine hands an entry point.

    ``seed`` is the study's seed: use it for anything that must be identical across trials
    (dataset generation, the train/validation split), never for data order.
    ``base_dir`` is the study file's folder: resolve relative paths in ``options`` against it.
    """

    options: dict[str, Any]
    seed: int = 0
    base_dir: Path = field(default_factory=Path.cwd)


@dataclass
class Step:
    """What a workload's own ``step(model, batch)`` returns: the batch's loss, and what the
    metrics score.

    ``loss`` is the batch's mean loss (a scalar the engine calls ``backward`` on, scaled for
    micro-batches and mixed precision). ``outputs`` (logits of a classifier, predictions of a
    regression) and ``targets`` are what the workload's metrics score, shaped as for a plain model
    (``(..., num_classes)`` logits for ``(...)`` class indices); left out, only ``loss`` (and
    ``perplexity``) can be scored. ``count`` is how many targets ``loss`` averages over (default:
    the targets' count without padding, else the batch's examples), so that a split's loss is
    exact over batches of different sizes.
    """

    loss: torch.Tensor
    outputs: torch.Tensor | None = None
    targets: torch.Tensor | None = None
    count: int | None = None


#: A workload metric: a built-in name, a torchmetrics-style object (``update(preds, target)``,
#: ``compute()``, ``reset()``), or a function ``f(outputs, targets) -> float`` of the whole split.
MetricLike = Any


@dataclass
class Workload:
    """A model, its data and how to score it.

    Items of ``train_data`` / ``eval_data`` are ``(inputs, targets)`` pairs (anything after the
    pair is dropped), or dicts as Hugging Face datasets give them (``input_ids``,
    ``attention_mask``, ``labels``...). ``inputs`` may be a tensor (``model(inputs)``), a tuple of
    tensors (``model(*inputs)``) or a dict (``model(**inputs)``); a dict item is the model's
    keyword arguments, its ``labels`` the targets.

    Classification (the default ``task``): the model maps a batch of inputs to logits
    ``(..., num_classes)``; targets are class indices ``(...)``; sequence workloads score every
    position, with ``IGNORE_INDEX`` marking padding. The default loss is cross-entropy. A model
    that returns a dict or a ``ModelOutput`` with a ``loss`` (a Hugging Face model given
    ``labels``) trains on its own loss, and its ``logits`` are scored.

    Regression (``task="regression"``, no ``num_classes``): targets are real numbers ``(...)`` and
    the model returns predictions of the same shape; an output of shape ``(..., 1)`` for targets
    ``(...)`` (an ``nn.Linear(h, 1)`` head) is read as one prediction per target, not broadcast.
    The default loss is the squared error, and "chance" (what a model that learned nothing
    scores) is predicting the training targets' mean.

    ``loss_fn(outputs, targets)`` returns one loss per target item (no reduction).
    ``metrics`` are built-in names (when none is named, the task's come first: ``loss, accuracy,
    error_rate`` or ``loss, mse, mae, r2``) and mappings of the workload's own metrics by name,
    each scored on the whole split (``MetricLike``): ``("loss", "accuracy", {"f1":
    MulticlassF1Score(3, average="macro")})``.
    """

    model: torch.nn.Module
    train_data: Dataset
    eval_data: Dataset
    num_classes: int = 0
    metrics: Sequence[str | Mapping[str, MetricLike]] | Mapping[str, MetricLike] = ()
    loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] | None = None
    #: Optional ``augment(inputs, generator) -> inputs`` applied to training batches only.
    augment: Callable[[Any, torch.Generator], Any] | None = None
    task: Task = "classification"
    #: ``collate(items) -> batch``: how a list of items becomes a batch (a Hugging Face data
    #: collator, say); default: torch's ``default_collate`` of the inputs and of the targets.
    collate: Callable[[list[Any]], Any] | None = None
    #: ``step(model, batch) -> Step``: your own forward and loss, where ``loss_fn(outputs,
    #: targets)`` does not fit (two inputs, an auxiliary loss, a model that returns a tuple).
    #: ``batch`` is ``(inputs, targets)`` on the device, or the dict of a dict item. The engine
    #: still owns the optimizer, schedule, precision, evals, checkpoints and resume.
    step: Callable[[torch.nn.Module, Any], Step] | None = None
    #: A causal language model (``GPT2LMHeadModel``...): position t's logits predict label t+1, as
    #: the model shifts inside its own loss; token accuracy and perplexity shift the same way.
    shift_labels: bool = False
    #: ``param_groups(model) -> [{"params": [...], "lr_scale": 0.1, "weight_decay": 0.0}, ...]``:
    #: optimizer parameter groups; ``lr_scale`` multiplies the scheduled LR of its group, the other
    #: keys are the optimizer's own. Every trainable parameter in exactly one group.
    param_groups: Callable[[torch.nn.Module], Sequence[dict[str, Any]]] | None = None

    def __post_init__(self) -> None:
        # no built-in named: the task's come first (a workload that names only its own F1 still
        # has its loss scored, which the report's verdicts read)
        if not self.builtin_metrics and self.task in DEFAULT_METRICS:
            self.metrics = (*DEFAULT_METRICS[self.task], *_metric_entries(self.metrics))

    @property
    def regression(self) -> bool:
        return self.task == "regression"

    @property
    def builtin_metrics(self) -> tuple[str, ...]:
        """The built-in metrics asked for, by name (``loss``, ``accuracy``, ``mse``...)."""
        return tuple(dict.fromkeys(m for m in _metric_entries(self.metrics) if isinstance(m, str)))

    @property
    def own_metrics(self) -> dict[str, MetricLike]:
        """The workload's own metrics (objects and functions), by the name they are reported under."""
        own: dict[str, MetricLike] = {}
        for entry in _metric_entries(self.metrics):
            if isinstance(entry, Mapping):
                own.update(entry)
        return own


def _metric_entries(metrics: Any) -> list[Any]:
    """``metrics`` as a list of entries: a mapping alone is one entry."""
    if isinstance(metrics, Mapping):
        return [metrics]
    if isinstance(metrics, str):
        return [metrics]
    return list(metrics)
