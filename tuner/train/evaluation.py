"""Evaluation: whole splits in large batches, weighted by real items, plus a prediction sample.

Runs under ``torch.inference_mode()`` in eval mode (dropout off, batch-norm running stats), and
draws from no global RNG, so evaluating never changes what training does next.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch
from torch.utils.data import Dataset

from tuner.train.batch_structure import move_pair
from tuner.train.data import fetch
from tuner.train.distributed import SINGLE, Ranks, eval_shard, sum_across_ranks_
from tuner.train.metrics import MetricAccumulator
from tuner.train.own_metrics import OwnMetrics
from tuner.train.precision import FULL, Precision
from tuner.train.regression_metrics import RegressionAccumulator, by_output
from tuner.train.scoring import Scored, Scorer

LossFn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


def fixed_sample(size: int, count: int, seed: int) -> torch.Tensor:
    """``count`` sorted indices out of ``size``, the same for a given seed (all if count >= size)."""
    if count >= size:
        return torch.arange(size)
    generator = torch.Generator().manual_seed(seed)
    return torch.randperm(size, generator=generator)[:count].sort().values


class Evaluator:
    """Scores the model on named splits (``{"val": ..., "train": ...}``) -> ``"val/accuracy"``...

    ``subsets`` caps a split to fixed indices (e.g. a sample of the training set);
    ``prediction_indices`` are examples of the first split whose predictions are kept.
    ``own_metrics`` are the workload's own (``tuner.train.own_metrics``), scored on whole splits.
    """

    def __init__(
        self,
        splits: Mapping[str, Dataset],
        *,
        loss_fn: LossFn | None = None,
        metrics: Sequence[str],
        num_classes: int,
        batch_size: int,
        device: torch.device | str = "cpu",
        subsets: Mapping[str, torch.Tensor] | None = None,
        prediction_indices: torch.Tensor | None = None,
        ranks: Ranks = SINGLE,
        regression: bool = False,
        scorer: Scorer | None = None,
        own_metrics: Mapping[str, Any] | None = None,
        precision: Precision = FULL,
        collate: Callable[[list[Any]], Any] | None = None,
    ) -> None:
        """With several processes (``ranks``), each scores its slice of every split in batches of
        ``batch_size / world_size`` and the metric sums are added up across them; predictions
        are rank 0's job alone (it scores the whole sample). ``scorer`` scores a batch (default:
        ``loss_fn`` on the model's logits), under ``precision``'s autocast."""
        self.splits = dict(splits)
        if scorer is None:
            assert loss_fn is not None, "an Evaluator needs a scorer or a loss_fn"
            scorer = Scorer(loss_fn, model_loss=False, regression=regression)
        scorer.check_shapes = True  # a regression's every batch (a squeeze shows on a batch of one)
        self.scorer = scorer
        self.batch_size = batch_size
        self.device = torch.device(device)
        self.subsets = dict(subsets or {})
        self.regression = regression
        self.precision, self.collate = precision, collate
        self.accumulators: dict[str, MetricAccumulator | RegressionAccumulator] = {
            name: RegressionAccumulator(metrics, _first_target(dataset, collate))
            if regression
            else MetricAccumulator(metrics, num_classes)
            for name, dataset in self.splits.items()
        }
        self.own = {
            name: OwnMetrics(dict(own_metrics or {}), self.device, regression=regression, ranks=ranks)
            for name in self.splits
        }
        self.prediction_indices = prediction_indices if prediction_indices is not None else torch.empty(0)
        self.ranks = ranks
        self.rank_batch_size = max(1, batch_size // ranks.world_size)

    def output_names(self) -> list[str]:
        return [
            f"{split}/{metric}"
            for split, acc in self.accumulators.items()
            for metric in (*acc.output_names(), *self.own[split].names)
        ]

    def _indices(self, split: str) -> torch.Tensor:
        if split in self.subsets:
            return self.subsets[split]
        return torch.arange(len(self.splits[split]))  # type: ignore[arg-type]

    def sizes(self) -> dict[str, int]:
        """Examples scored per split: how noisy an error rate on it is depends on them."""
        return {split: len(self._indices(split)) for split in self.splits}

    def _score(self, model: torch.nn.Module, dataset: Dataset, indices: torch.Tensor) -> Scored:
        inputs, targets = fetch(dataset, indices, self.collate)
        inputs, targets = move_pair(inputs, targets, self.device)
        with self.precision.autocast():
            return self.scorer(model, inputs, targets)

    def run(self, model: torch.nn.Module) -> tuple[dict[str, float], list[dict[str, Any]]]:
        """Metrics of every split, and the predictions of the sampled examples."""
        was_training = model.training
        model.eval()
        results: dict[str, float] = {}
        try:
            with torch.inference_mode():
                for split, dataset in self.splits.items():
                    accumulator, own = self.accumulators[split], self.own[split]
                    accumulator.reset()
                    own.reset()
                    for batch in eval_shard(self._indices(split), self.ranks).split(self.rank_batch_size):
                        scored = self._score(model, dataset, batch)
                        if scored.item_losses is not None:
                            accumulator.update(scored.outputs, scored.targets, scored.item_losses)
                        else:
                            accumulator.update(
                                scored.outputs, scored.targets, mean_loss=scored.loss, count=scored.count
                            )
                        own.update(scored.outputs, scored.targets)
                    if self.ranks.distributed:
                        sum_across_ranks_(accumulator.sums(self.device), self.ranks)
                    results.update({f"{split}/{k}": v for k, v in accumulator.compute().items()})
                    results.update({f"{split}/{k}": v for k, v in own.compute().items()})
                predictions = self._predictions(model) if self.ranks.is_main else []
        finally:
            model.train(was_training)
        return results, predictions

    def _predictions(self, model: torch.nn.Module) -> list[dict[str, Any]]:
        """The sample's rows, scored ``batch_size`` examples at a time like the metrics (a large
        sample of long sequences must not need more memory than an eval batch)."""
        if len(self.prediction_indices) == 0:
            return []
        split, dataset = next(iter(self.splits.items()))
        rows = []
        for batch in self.prediction_indices.split(self.batch_size):
            scored = self._score(model, dataset, batch)
            logits, targets, losses = scored.outputs, scored.targets, scored.item_losses
            if logits is None or targets is None:
                return []  # a model that gave only its loss: nothing to show per example
            if self.regression:  # a value has no confidence: the cell stays empty
                predicted, confidence = logits, None
            else:
                confidence, predicted = logits.float().softmax(dim=-1).max(dim=-1)
            for row, index in enumerate(batch.tolist()):
                rows.append(
                    {
                        "split": split,
                        "example": index,
                        "target": _flat(targets[row]),
                        "prediction": _flat(predicted[row]),
                        "confidence": None
                        if confidence is None
                        else round(float(confidence[row].float().mean()), 6),
                        # a model's own loss is the batch's mean: no loss of one example to show
                        "loss": None if losses is None else round(float(losses[row].float().mean()), 6),
                    }
                )
        return rows


def _first_target(dataset: Dataset, collate: Callable[[list[Any]], Any] | None = None) -> list[float] | None:
    """A regression split's first target (one value per output): what every process sums the
    targets less (``RegressionAccumulator``'s ``shift``); None for an empty split."""
    if not len(dataset):  # type: ignore[arg-type]
        return None
    _, targets = fetch(dataset, torch.tensor([0]), collate)
    if targets is None:
        return None
    return by_output(targets)[0].tolist()


def _flat(value: torch.Tensor) -> int | float | str:
    """A class index or a value, or a sequence's joined by spaces (one CSV cell)."""
    if value.dtype.is_floating_point:  # 6 significant digits: a target of 3e-8 is not 0
        if value.dim() == 0:
            return float(f"{float(value):.6g}")
        return " ".join(f"{v:.6g}" for v in value.reshape(-1).tolist())
    return int(value) if value.dim() == 0 else " ".join(str(v) for v in value.tolist())


def class_counts(dataset: Dataset, num_classes: int, indices: torch.Tensor | None = None) -> list[int] | None:
    """Examples per class of ``dataset`` (or of its ``indices``), padding left out; None when
    counting would mean loading every item (only a ``TensorDataset``'s targets are read at once).

    For imbalanced data: the report shows a minority class's correct count beside its recall (3
    of 4 is a recall of 0.75, and one example moves it by 0.25), and compares the class mix of a
    sampled train-split evaluation with the whole split's.
    """
    from tuner.train.workload_errors import integer_targets
    from tuner.workloads import IGNORE_INDEX

    targets = integer_targets(dataset)
    if targets is None:
        return None
    if indices is not None:
        targets = targets[indices]
    targets = targets.reshape(-1)
    targets = targets[(targets != IGNORE_INDEX) & (targets >= 0) & (targets < num_classes)]
    return [int(c) for c in torch.bincount(targets.long(), minlength=num_classes).tolist()]
