"""What a workload is: the contract between a user's code and the training engine.

A workload entry point is a plain function ``build(ctx: WorkloadContext) -> Workload``.
The engine seeds torch with the study's model-init seed right before calling it, so the
model's initial weights depend only on that seed (the same on every rank and every retry);
data *order* and augmentation are drawn by the engine from a separate data seed.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
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
class Workload:
    """A model, its data and how to score it.

    Items of ``train_data`` / ``eval_data`` are ``(inputs, targets)``.

    Classification (the default ``task``): the model maps a batch of inputs to logits
    ``(..., num_classes)``; targets are class indices ``(...)``; sequence workloads score every
    position, with ``IGNORE_INDEX`` marking padding. The default loss is cross-entropy.

    Regression (``task="regression"``, no ``num_classes``): targets are real numbers ``(...)`` and
    the model returns predictions of the same shape; an output of shape ``(..., 1)`` for targets
    ``(...)`` (an ``nn.Linear(h, 1)`` head) is read as one prediction per target, not broadcast.
    The default loss is the squared error, and "chance" (what a model that learned nothing
    scores) is predicting the training targets' mean.

    ``loss_fn(outputs, targets)`` returns one loss per target item (no reduction).
    ``metrics`` default to the task's: ``loss, accuracy, error_rate`` or ``loss, mse, mae, r2``.
    """

    model: torch.nn.Module
    train_data: Dataset
    eval_data: Dataset
    num_classes: int = 0
    metrics: Sequence[str] = ()
    loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] | None = None
    #: Optional ``augment(inputs, generator) -> inputs`` applied to training batches only.
    augment: Callable[[torch.Tensor, torch.Generator], torch.Tensor] | None = None
    task: Task = "classification"

    def __post_init__(self) -> None:
        if not self.metrics and self.task in DEFAULT_METRICS:
            self.metrics = DEFAULT_METRICS[self.task]

    @property
    def regression(self) -> bool:
        return self.task == "regression"
