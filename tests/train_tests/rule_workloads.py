"""Workloads for tests/train_tests/test_rules.py, importable as ``tests.train_tests.rule_workloads:...``."""

from __future__ import annotations

import torch
from torch.utils.data import TensorDataset

from tuner.workloads import Workload, WorkloadContext

#: ``(is_generator, grad_enabled, first input row)`` per call of ``augment``.
AUGMENT_CALLS: list[tuple[bool, bool, torch.Tensor]] = []


def _data(seed: int, n: int = 96) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    inputs = torch.randn(n, 4, generator=generator)
    return inputs, (inputs[:, 0] > 0).long()


def _augment(inputs: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    AUGMENT_CALLS.append((isinstance(generator, torch.Generator), torch.is_grad_enabled(), inputs[0].clone()))
    return inputs + 0.5 * torch.randn(inputs.shape, generator=generator)


def build_augmented(ctx: WorkloadContext) -> Workload:
    inputs, targets = _data(ctx.seed)
    data = TensorDataset(inputs, targets)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Dropout(0.1), torch.nn.Linear(8, 2))
    return Workload(
        model=model,
        train_data=data,
        eval_data=TensorDataset(*_data(ctx.seed + 1, 48)),
        num_classes=2,
        augment=_augment if ctx.options.get("augment", True) else None,
    )


class _AlwaysClassZero(torch.nn.Module):
    """Predicts class 0 for every input, whatever training does to its (unused) weight."""

    def __init__(self) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.zeros(1))

    def forward(self, inputs: torch.Tensor) -> torch.Tensor:
        logits = torch.tensor([1.0, 0.0]).expand(len(inputs), 2)
        return logits + 0 * self.weight


def build_class_zero(ctx: WorkloadContext) -> Workload:
    """Train targets: the first 40 of 100 are class 0; train accuracy = share of class 0 scored."""
    targets = (torch.arange(100) >= 40).long()
    data = TensorDataset(torch.zeros(100, 4), targets)
    return Workload(model=_AlwaysClassZero(), train_data=data, eval_data=data, num_classes=2)
