"""A workload whose validation accuracy reaches 1.0 within a few steps and stays there while its
loss keeps falling (two well-separated classes, a linear model): every later eval ties on
accuracy, and only the loss tells them apart. ``tests.train_tests.tie_workload:build``."""

from __future__ import annotations

import torch
from torch.utils.data import TensorDataset

from tuner.workloads import Workload, WorkloadContext


def _separated(seed: int, n: int) -> TensorDataset:
    """Class 0 around x = -2, class 1 around x = +2, spread 0.3: a gap no eval misses."""
    generator = torch.Generator().manual_seed(seed)
    targets = torch.arange(n) % 2
    inputs = 0.3 * torch.randn(n, 2, generator=generator)
    inputs[:, 0] += 4.0 * targets - 2.0
    return TensorDataset(inputs, targets)


def build(ctx: WorkloadContext) -> Workload:
    return Workload(
        model=torch.nn.Linear(2, 2),
        train_data=_separated(ctx.seed, 128),
        eval_data=_separated(ctx.seed + 1, 64),
        num_classes=2,
        metrics=("loss", "accuracy", "error_rate"),
    )
