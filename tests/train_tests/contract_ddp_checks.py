"""Run in a fresh process (``python -m tests.train_tests.contract_ddp_checks OUT``): two gloo ranks
score known data with the workload contracts that sum across processes in their own way (a model's
own shifted loss over dict items; torchmetrics objects and whole-split functions); rank 0 writes
the metrics to OUT. The test compares them with one process scoring everything.

A fresh process, because ranks are forked (fast) and a fork is only safe before any torch op.
"""

from __future__ import annotations

import sys
from typing import Any

import torch

from tuner.train import Ranks, launch
from tuner.train.evaluation import Evaluator
from tuner.train.run_parts import build_scorer
from tuner.workloads import WorkloadContext


def own_loss_case(ranks: Ranks) -> dict[str, float]:
    """The own-loss language model on 17 dict items, batches of 4 per process."""
    from tests.train_tests.contract_workloads import own_loss_lm

    torch.manual_seed(5)
    workload = own_loss_lm(WorkloadContext(options={}, seed=3))
    evaluator = Evaluator(
        {"val": workload.eval_data},
        metrics=workload.builtin_metrics,
        num_classes=workload.num_classes,
        batch_size=4 * ranks.world_size,
        ranks=ranks,
        scorer=build_scorer(workload, num_classes=workload.num_classes),
    )
    return evaluator.run(workload.model)[0]


def own_metrics_case(ranks: Ranks) -> dict[str, float]:
    """31 examples of 3 classes scored by torchmetrics' macro F1 and AUROC and by a function."""
    from torchmetrics.classification import MulticlassAUROC, MulticlassF1Score

    generator = torch.Generator().manual_seed(11)
    data = torch.utils.data.TensorDataset(
        torch.randn(31, 5, generator=generator), torch.randint(0, 3, (31,), generator=generator)
    )
    torch.manual_seed(2)
    model = torch.nn.Linear(5, 3)
    from tuner.train.run_parts import cross_entropy_per_item

    evaluator = Evaluator(
        {"val": data},
        loss_fn=cross_entropy_per_item,
        metrics=("loss", "accuracy"),
        num_classes=3,
        batch_size=4 * ranks.world_size,
        ranks=ranks,
        own_metrics={
            "f1": MulticlassF1Score(num_classes=3, average="macro"),
            "auroc": MulticlassAUROC(num_classes=3),
            "examples": lambda outputs, targets: float(len(targets)),
        },
    )
    return evaluator.run(model)[0]


def check(ranks: Ranks) -> dict[str, Any] | None:
    results = {"own_loss": own_loss_case(ranks), "own_metrics": own_metrics_case(ranks)}
    return results if ranks.is_main else None


if __name__ == "__main__":
    torch.save(launch(check, 2, start_method="fork"), sys.argv[1])
