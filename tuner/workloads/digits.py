"""Built-in workloads on scikit-learn's 8x8 digits: an MLP and a small batch-norm CNN.

The data ships inside scikit-learn, so these run offline in seconds on a CPU: the
smallest realistic image-classification problem to tune against.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn
from torch.utils.data import TensorDataset

from tuner.errors import WorkloadError
from tuner.workloads._builtins import DIGITS_METRICS, DigitsCnnOptions, DigitsMlpOptions
from tuner.workloads._interface import Workload, WorkloadContext
from tuner.workloads.digits_data import load_digits
from tuner.workloads.ghost_batch_norm import GhostBatchNorm
from tuner.workloads.stratified_split import stratified_split

NUM_CLASSES = 10
_METRICS = DIGITS_METRICS


def load_split(val_fraction: float, seed: int) -> tuple[TensorDataset, TensorDataset]:
    """Return ``(train, val)`` as flat float32 pixels in [0, 1] and long labels.

    The split is stratified and seeded by the *study* seed so every trial of a study is
    scored on exactly the same validation images, whatever its data-order seed.
    """
    pixels, labels = load_digits()
    x = (pixels / 16.0).astype(np.float32)  # raw pixels are 0..16
    y = labels.astype(np.int64)
    try:
        split = stratified_split(y, val_fraction, seed)
    except ValueError as exc:  # e.g. a val_fraction too small to hold one image per class
        raise WorkloadError(f"digits: cannot split with val_fraction={val_fraction}: {exc}") from exc
    x_tr, x_va, y_tr, y_va = x[split.train], x[split.held_out], y[split.train], y[split.held_out]
    return (
        TensorDataset(torch.from_numpy(x_tr), torch.from_numpy(y_tr)),
        TensorDataset(torch.from_numpy(x_va), torch.from_numpy(y_va)),
    )


def _as_images(data: TensorDataset) -> TensorDataset:
    inputs, targets = data.tensors
    return TensorDataset(inputs.reshape(-1, 1, 8, 8), targets)


def _check_sizes(name: str, sizes: list[int]) -> None:
    # pydantic only checks these are ints; a zero-width layer would fail deep inside torch.
    if any(s <= 0 for s in sizes):
        raise WorkloadError(f"{name} must all be positive, got {sizes}")


def build_mlp(ctx: WorkloadContext) -> Workload:
    """Flat 64 pixels -> ``hidden_sizes`` (ReLU, optional dropout) -> 10 logits."""
    opts = DigitsMlpOptions.model_validate(ctx.options)
    _check_sizes("hidden_sizes", opts.hidden_sizes)
    train, val = load_split(opts.val_fraction, ctx.seed)

    layers: list[nn.Module] = []
    width = 64
    for hidden in opts.hidden_sizes:
        layers += [nn.Linear(width, hidden), nn.ReLU()]
        if opts.dropout > 0:
            layers.append(nn.Dropout(opts.dropout))
        width = hidden
    layers.append(nn.Linear(width, NUM_CLASSES))
    return Workload(
        model=nn.Sequential(*layers),
        train_data=train,
        eval_data=val,
        num_classes=NUM_CLASSES,
        metrics=_METRICS,
    )


def _batch_norm(channels: int, ghost_batch_size: int | None) -> nn.Module:
    if ghost_batch_size is None:
        return nn.BatchNorm2d(channels)
    return GhostBatchNorm(channels, virtual_batch_size=ghost_batch_size)


def build_cnn(ctx: WorkloadContext) -> Workload:
    """(1, 8, 8) images -> [conv3x3, batch norm, ReLU] per channel count -> 10 logits.

    One 2x2 max-pool after the second conv keeps the net cheap; the head flattens the
    feature map instead of global-average-pooling it, because at 8x8 (4x4 after pooling)
    *where* a stroke is matters as much as what it is. With ``ghost_batch_size`` every batch
    norm is a ``GhostBatchNorm`` over virtual batches of that many examples.
    """
    opts = DigitsCnnOptions.model_validate(ctx.options)
    _check_sizes("channels", opts.channels)
    train, val = load_split(opts.val_fraction, ctx.seed)

    layers: list[nn.Module] = []
    in_ch, side = 1, 8
    for i, out_ch in enumerate(opts.channels):
        layers += [
            nn.Conv2d(in_ch, out_ch, kernel_size=3, padding=1),
            _batch_norm(out_ch, opts.ghost_batch_size),
            nn.ReLU(),
        ]
        if i == 1:
            layers.append(nn.MaxPool2d(2))
            side //= 2
        in_ch = out_ch
    layers += [nn.Flatten(), nn.Dropout(opts.dropout), nn.Linear(in_ch * side * side, NUM_CLASSES)]
    return Workload(
        model=nn.Sequential(*layers),
        train_data=_as_images(train),
        eval_data=_as_images(val),
        num_classes=NUM_CLASSES,
        metrics=_METRICS,
    )
