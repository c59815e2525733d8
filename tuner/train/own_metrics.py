"""A workload's own metrics: torchmetrics-style objects and plain functions, on the whole split.

A whole-split metric (an F1, an AUROC) is not a mean of per-batch values, so neither kind is
averaged over batches:

- an object with ``update(preds, target)`` / ``compute()`` / ``reset()`` (a torchmetrics
  ``Metric``) is updated batch by batch and computed once; with several processes torchmetrics
  synchronises its states across them inside ``compute()`` (each process scored its own slice of
  the split), so the value is that of one process scoring everything;
- a function ``f(outputs, targets) -> float`` is called once with the whole split's outputs and
  targets (gathered from every process), as scikit-learn's metrics and Hugging Face's
  ``compute_metrics`` are.

What they see: a classifier's logits ``(n, num_classes)`` and class indices ``(n,)`` with padding
(``IGNORE_INDEX``) left out and a causal LM's positions shifted; a regression's predictions and
targets shaped alike. Both as float32 (a bfloat16 autocast's outputs are converted).
"""

from __future__ import annotations

import copy
from typing import Any

import torch

from tuner.errors import WorkloadCodeError
from tuner.train.distributed import SINGLE, Ranks, gather_objects
from tuner.workloads import IGNORE_INDEX


def is_stateful(metric: object) -> bool:
    """A torchmetrics-style metric: ``update``, ``compute`` and ``reset``."""
    return all(callable(getattr(metric, method, None)) for method in ("update", "compute", "reset"))


class OwnMetrics:
    """The workload's own metrics of one split (``names``: how they are reported)."""

    def __init__(
        self, metrics: dict[str, Any], device: torch.device, *, regression: bool, ranks: Ranks = SINGLE
    ) -> None:
        self.regression, self.ranks = regression, ranks
        self.stateful: dict[str, Any] = {}
        self.functions: dict[str, Any] = {}
        for name, metric in metrics.items():
            if is_stateful(metric):
                mine = copy.deepcopy(metric)  # one per split: their states must not mix
                self.stateful[name] = mine.to(device) if hasattr(mine, "to") else mine
            else:
                self.functions[name] = metric
        self._outputs: list[torch.Tensor] = []
        self._targets: list[torch.Tensor] = []

    @property
    def names(self) -> list[str]:
        return [*self.stateful, *self.functions]

    def reset(self) -> None:
        for metric in self.stateful.values():
            metric.reset()
        self._outputs, self._targets = [], []

    @torch.no_grad()
    def update(self, outputs: torch.Tensor | None, targets: torch.Tensor | None) -> None:
        if not self.names:
            return
        if outputs is None or targets is None:
            raise WorkloadCodeError(
                f"the workload's metric(s) {', '.join(self.names)} need the model's outputs and the "
                "targets; the model gave only a loss"
            )
        outputs, targets = self._prepared(outputs, targets)
        for metric in self.stateful.values():
            metric.update(outputs, targets)
        if self.functions:
            self._outputs.append(outputs.cpu())
            self._targets.append(targets.cpu())

    def _prepared(self, outputs: torch.Tensor, targets: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        outputs = outputs.detach().float()
        if self.regression:
            return outputs, targets.detach().float()
        logits = outputs.reshape(-1, outputs.shape[-1])
        flat = targets.detach().reshape(-1)
        if outputs.dim() > 2 or bool((flat == IGNORE_INDEX).any()):  # sequences, padding
            kept = flat != IGNORE_INDEX
            return logits[kept], flat[kept]
        return logits, flat

    def compute(self) -> dict[str, float]:
        """Each metric's value on everything updated since ``reset`` (across processes)."""
        values = {name: _number(name, metric.compute()) for name, metric in self.stateful.items()}
        if self.functions:
            outputs, targets = self._whole_split()
            for name, function in self.functions.items():
                values[name] = _number(name, function(outputs, targets))
        return values

    def _whole_split(self) -> tuple[torch.Tensor, torch.Tensor]:
        parts = gather_objects((self._outputs, self._targets), self.ranks)
        outputs = [o for rank_outputs, _ in parts for o in rank_outputs]
        targets = [t for _, rank_targets in parts for t in rank_targets]
        if not outputs:
            return torch.empty(0), torch.empty(0)
        return torch.cat(outputs), torch.cat(targets)


def _number(name: str, value: Any) -> float:
    """A metric's value as one float; a tensor of several (an F1 with ``average=None``) is refused."""
    if isinstance(value, torch.Tensor):
        if value.numel() != 1:
            raise WorkloadCodeError(
                f"the workload's metric {name!r} returned a tensor of shape {tuple(value.shape)}; a "
                "metric is one number (e.g. average='macro' rather than one value per class)"
            )
        return float(value.item())
    try:
        return float(value)
    except (TypeError, ValueError):
        raise WorkloadCodeError(
            f"the workload's metric {name!r} returned {type(value).__name__}; expected a number"
        ) from None
