"""A workload nothing can learn: 10 classes whose labels are drawn independently of the inputs.

Validation error stays at chance (0.9) whatever the hyperparameters: what the report's "nothing
learned" verdict must recognise from a real run (end-to-end report tests only).
"""

from __future__ import annotations

import torch
from torch.utils.data import TensorDataset

from tuner.workloads import Workload, WorkloadContext

CLASSES = 10


def build(ctx: WorkloadContext) -> Workload:
    generator = torch.Generator().manual_seed(ctx.seed)
    inputs = torch.randn(600, 8, generator=generator)
    targets = torch.randint(0, CLASSES, (600,), generator=generator)  # no relation to the inputs
    return Workload(
        model=torch.nn.Linear(8, CLASSES),
        train_data=TensorDataset(inputs[:300], targets[:300]),
        eval_data=TensorDataset(inputs[300:], targets[300:]),
        num_classes=CLASSES,
    )
