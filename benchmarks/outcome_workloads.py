"""The outcome benchmark's workloads, written as a user writes workloads (README "Writing a
workload"), on the generated data of ``benchmarks/outcome_data.py``.

Every workload takes ``split``: ``"tune"`` (the default: ``eval_data`` is the validation split,
what every procedure tunes on) or ``"test"`` (``eval_data`` is the 100,000-example test split:
only the benchmark asks for it, to score the model a procedure delivers).

- ``teacher``: an MLP student of a fixed teacher network, a quarter of its training and
  validation labels wrong: the best step comes early, then the net memorises the noise, and
  regularisation pays.
- ``imbalanced``: an MLP on 3 classes at 90/7/3%, scored by MCC (accuracy flatters ignoring the
  rare ones).
- ``mnist1d``: a 1-D convolutional network on MNIST-1D signals.
- ``regression``: an MLP with one output on a nonlinear function of 20 inputs plus noise, scored
  by mse (a regression: float targets, the engine's regression metrics).
- ``small``: an MLP on 3 classes from 350 training and 100 validation examples (a small dataset:
  trials tie on validation accuracy, and the training set is fit within a few evals).
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn
from torch.utils.data import TensorDataset

from tuner.workloads import REGRESSION_METRICS, Workload, WorkloadContext

try:  # a trial imports this file by path, its folder on sys.path (as running it would)
    import outcome_data as data
except ImportError:  # the benchmark's own process imports it as benchmarks.outcome_workloads
    from benchmarks import outcome_data as data

SPLITS = ("tune", "test")


def _split_option(ctx: WorkloadContext) -> str:
    split = ctx.options.get("split", "tune")
    if split not in SPLITS:
        raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
    return split


def _datasets(parts: data.Splits, split: str, shape: tuple[int, ...]) -> tuple[TensorDataset, TensorDataset]:
    """``(train, eval)``: eval is validation when tuning, test when the benchmark scores."""

    def tensors(x: np.ndarray, y: np.ndarray) -> TensorDataset:
        return TensorDataset(torch.from_numpy(x).reshape(-1, *shape), torch.from_numpy(y))

    x_eval, y_eval = (parts.x_val, parts.y_val) if split == "tune" else (parts.x_test, parts.y_test)
    return tensors(parts.x_train, parts.y_train), tensors(x_eval, y_eval)


def _mlp(width_in: int, hidden: int, dropout: float, outputs: int) -> nn.Module:
    return nn.Sequential(
        nn.Linear(width_in, hidden), nn.ReLU(), nn.Dropout(dropout),
        nn.Linear(hidden, hidden), nn.ReLU(), nn.Dropout(dropout),
        nn.Linear(hidden, outputs),
    )  # fmt: skip


def teacher(ctx: WorkloadContext) -> Workload:
    """MLP student (options ``hidden``, ``dropout``) of the teacher network, on noisy labels."""
    split = _split_option(ctx)
    train, evaluation = _datasets(
        data.teacher_splits(with_test=split == "test"), split, (data.TEACHER_INPUTS,)
    )
    hidden, dropout = int(ctx.options.get("hidden", 128)), float(ctx.options.get("dropout", 0.0))
    return Workload(
        model=_mlp(data.TEACHER_INPUTS, hidden, dropout, data.TEACHER_CLASSES),
        train_data=train,
        eval_data=evaluation,
        num_classes=data.TEACHER_CLASSES,
        metrics=("loss", "accuracy", "error_rate"),
    )


def imbalanced(ctx: WorkloadContext) -> Workload:
    """MLP (options ``hidden``, ``dropout``) on 3 classes at 90/7/3%, scored by MCC."""
    train, evaluation = _datasets(data.imbalanced_splits(), _split_option(ctx), (20,))
    hidden, dropout = int(ctx.options.get("hidden", 64)), float(ctx.options.get("dropout", 0.0))
    return Workload(
        model=_mlp(20, hidden, dropout, 3),
        train_data=train,
        eval_data=evaluation,
        num_classes=3,
        metrics=("loss", "accuracy", "error_rate", "mcc"),
    )


def mnist1d(ctx: WorkloadContext) -> Workload:
    """1-D CNN (options ``channels``, ``dropout``) on MNIST-1D's 40-sample signals."""
    train, evaluation = _datasets(data.mnist1d_splits(), _split_option(ctx), (1, 40))
    channels, dropout = int(ctx.options.get("channels", 16)), float(ctx.options.get("dropout", 0.0))
    model = nn.Sequential(
        nn.Conv1d(1, channels, 5, padding=2), nn.ReLU(),
        nn.Conv1d(channels, channels, 3, stride=2, padding=1), nn.ReLU(),
        nn.Conv1d(channels, channels, 3, stride=2, padding=1), nn.ReLU(),
        nn.Flatten(), nn.Dropout(dropout),
        nn.Linear(channels * 10, 10),
    )  # fmt: skip
    return Workload(
        model=model,
        train_data=train,
        eval_data=evaluation,
        num_classes=10,
        metrics=("loss", "accuracy", "error_rate"),
    )


def regression(ctx: WorkloadContext) -> Workload:
    """MLP (options ``hidden``, ``dropout``) with one output, on the regression's standardised
    targets, scored by mse, mae and r2."""
    split = _split_option(ctx)
    train, evaluation = _datasets(
        data.regression_splits(with_test=split == "test"), split, (data.REGRESSION_INPUTS,)
    )
    hidden, dropout = int(ctx.options.get("hidden", 64)), float(ctx.options.get("dropout", 0.0))
    return Workload(
        model=_mlp(data.REGRESSION_INPUTS, hidden, dropout, 1),
        train_data=train,
        eval_data=evaluation,
        task="regression",
        metrics=REGRESSION_METRICS,
    )


def small(ctx: WorkloadContext) -> Workload:
    """MLP (options ``hidden``, ``dropout``) on the small-data task's 3 classes."""
    split = _split_option(ctx)
    train, evaluation = _datasets(data.small_splits(with_test=split == "test"), split, (data.SMALL_INPUTS,))
    hidden, dropout = int(ctx.options.get("hidden", 64)), float(ctx.options.get("dropout", 0.0))
    return Workload(
        model=_mlp(data.SMALL_INPUTS, hidden, dropout, data.SMALL_CLASSES),
        train_data=train,
        eval_data=evaluation,
        num_classes=data.SMALL_CLASSES,
        metrics=("loss", "accuracy", "error_rate"),
    )
