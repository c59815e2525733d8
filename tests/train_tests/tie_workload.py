"""A workload whose validation accuracy reaches 1.0 within a few steps and stays there while its
loss keeps falling (two well-separated classes, a linear model): every later eval ties on
accuracy, and only the loss tells them apart. ``tests.train_tests.tie_workload:build``."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import torch
import yaml
from torch.utils.data import TensorDataset

from tuner.workloads import Workload, WorkloadContext

if TYPE_CHECKING:
    from tuner.train import RunResult


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


def run_tied(
    folder: Path,
    run_dir: Path,
    *,
    max_train_steps: int,
    keep_best: int,
    objective: dict[str, str] | None = None,
) -> RunResult:
    """A real run of this workload (SGD at 0.5, constant, an eval every 10 steps) in ``run_dir``,
    its study written to ``folder``; ``objective`` replaces the default (val/error_rate, minimize)."""
    from tests.train_tests.conftest import write_study
    from tuner.spec import load_study
    from tuner.train import run_training

    path = write_study(
        folder,
        max_train_steps=max_train_steps,
        eval_every=10,
        keep_best_checkpoints=keep_best,
        optimizer={"name": "sgd", "lr": 0.5},
        schedule=[{"shape": "constant"}],
    )
    document = yaml.safe_load(path.read_text())
    document["workload"] = {"name": "tests.train_tests.tie_workload:build", "options": {}}
    if objective is not None:
        document["objective"] = objective
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    loaded = load_study(path)
    return run_training(loaded.spec, run_dir, base_dir=loaded.base_dir, progress=False)
