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
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # torch stays out of `tuner validate` and `tuner --help`
    import torch
    from torch.utils.data import Dataset

#: Targets equal to this weigh zero in the loss and in every metric (padding).
IGNORE_INDEX = -100

#: Metric names a workload may ask for; ``per_class`` adds ``class_<k>_correct`` / ``class_<k>_recall``.
KNOWN_METRICS = ("loss", "accuracy", "error_rate", "top5_accuracy", "mcc", "perplexity", "per_class")


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

    Items of ``train_data`` / ``eval_data`` are ``(inputs, targets)``. The model maps a batch of
    inputs to logits ``(..., num_classes)``; targets are class indices ``(...)``; sequence
    workloads score every position, with ``IGNORE_INDEX`` marking padding.
    ``loss_fn(logits, targets)`` returns one loss per target item (no reduction); the default is
    cross-entropy with ``IGNORE_INDEX`` ignored.
    """

    model: torch.nn.Module
    train_data: Dataset
    eval_data: Dataset
    num_classes: int
    metrics: Sequence[str] = ("loss", "accuracy", "error_rate")
    loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] | None = None
    #: Optional ``augment(inputs, generator) -> inputs`` applied to training batches only.
    augment: Callable[[torch.Tensor, torch.Generator], torch.Tensor] | None = None
