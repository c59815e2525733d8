"""A workload whose training costs a fixed CPU time: the "1 s objective" of the orchestration benchmark.

Each training step spins (real CPU work, not a sleep) for ``busy_s / steps`` seconds, so a
trial of ``steps`` steps costs ``busy_s`` of objective time plus whatever the engine and the
orchestrator add; evaluation does not spin.
"""

from __future__ import annotations

import time

import torch
from torch.utils.data import TensorDataset

from tuner.workloads import Workload, WorkloadContext


class _Busy(torch.nn.Module):
    def __init__(self, spin_s: float) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(4, 2)
        self.spin_s = spin_s

    def forward(self, inputs: torch.Tensor) -> torch.Tensor:
        if self.training:
            until = time.perf_counter() + self.spin_s
            while time.perf_counter() < until:
                pass
        return self.linear(inputs)


def build(ctx: WorkloadContext) -> Workload:
    busy_s, steps = float(ctx.options["busy_s"]), int(ctx.options["steps"])
    generator = torch.Generator().manual_seed(ctx.seed)
    inputs = torch.randn(64, 4, generator=generator)
    targets = (inputs[:, 0] > 0).long()
    return Workload(
        model=_Busy(busy_s / steps),
        train_data=TensorDataset(inputs[:48], targets[:48]),
        eval_data=TensorDataset(inputs[48:], targets[48:]),
        num_classes=2,
    )
