"""Run in a fresh process (``python -m tests.train_tests.ddp_checks OUT``): two gloo ranks apply the
engine's collective rules to known inputs; rank 0 writes what they saw to OUT (a torch file).

A fresh process, because ranks are forked (fast) and a fork is only safe before any torch op.
"""

from __future__ import annotations

import sys
from typing import Any

import torch

from tuner.train import Ranks, launch
from tuner.train.distributed import average_batch_norm_stats, gather_objects
from tuner.train.evaluation import Evaluator
from tuner.train.regression_metrics import squared_error_per_item
from tuner.train.run_parts import cross_entropy_per_item
from tuner.workloads import IGNORE_INDEX

METRICS = ("loss", "accuracy", "top5_accuracy", "mcc", "per_class")


def eval_case() -> tuple[torch.nn.Module, torch.utils.data.TensorDataset]:
    """23 sequences of 3 tokens (7 classes), some targets padding; batches of 4 leave a partial one."""
    generator = torch.Generator().manual_seed(7)
    inputs = torch.randn(23, 3, 5, generator=generator)
    targets = torch.randint(0, 7, (23, 3), generator=generator)
    targets[::4, 2] = IGNORE_INDEX
    targets[5] = IGNORE_INDEX  # one example all padding
    torch.manual_seed(3)
    return torch.nn.Linear(5, 7), torch.utils.data.TensorDataset(inputs, targets)


def evaluator(dataset: Any, ranks: Ranks) -> Evaluator:
    return Evaluator(
        {"val": dataset},
        loss_fn=cross_entropy_per_item,
        metrics=METRICS,
        num_classes=7,
        batch_size=4,
        ranks=ranks,
    )


def regression_case() -> tuple[torch.nn.Module, torch.utils.data.TensorDataset]:
    """23 real-valued targets and a one-wide head: batches of 4 leave a partial one."""
    generator = torch.Generator().manual_seed(8)
    inputs, targets = torch.randn(23, 5, generator=generator), torch.randn(23, generator=generator) * 3 + 1
    torch.manual_seed(4)
    return torch.nn.Linear(5, 1), torch.utils.data.TensorDataset(inputs, targets)


def regression_evaluator(dataset: Any, ranks: Ranks) -> Evaluator:
    return Evaluator(
        {"val": dataset},
        loss_fn=squared_error_per_item,
        metrics=("loss", "mse", "mae", "r2"),
        num_classes=0,
        batch_size=4,
        ranks=ranks,
        regression=True,
    )


def check(ranks: Ranks) -> dict[str, Any] | None:
    model, dataset = eval_case()
    metrics, _ = evaluator(dataset, ranks).run(model)
    regression_model, regression_data = regression_case()
    regression_metrics, _ = regression_evaluator(regression_data, ranks).run(regression_model)

    norm = torch.nn.BatchNorm1d(4)
    norm.running_mean.fill_(float(ranks.rank + 1))  # rank 0: 1.0, rank 1: 2.0
    norm.running_var.copy_(torch.arange(4.0) * (ranks.rank + 1) + 1)
    before = gather_objects({k: v.clone() for k, v in norm.state_dict().items()}, ranks)
    average_batch_norm_stats(norm, ranks)
    after = gather_objects({k: v.clone() for k, v in norm.state_dict().items()}, ranks)
    if not ranks.is_main:
        return None
    return {"metrics": metrics, "regression": regression_metrics, "bn_before": before, "bn_after": after}


if __name__ == "__main__":
    torch.save(launch(check, 2, start_method="fork"), sys.argv[1])
