"""Built-in workload: an MLP regression on Friedman's synthetic benchmark ("friedman1").

Why this data: it is generated offline from the study seed (scikit-learn's ``make_friedman1``),
it is nonlinear enough that the learning rate and the network's width matter, and its noise
level is known, so the best possible score is too: with the default ``noise: 1.0`` about 4% of
the target's variance is noise, so ``r2`` tops out near 0.96 on the validation split.

The targets are standardised with the training split's mean and standard deviation, so the
scores read the same at any scale: an ``mse`` of 1.0 is what predicting the training mean scores.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn
from torch.utils.data import TensorDataset

from tuner.workloads._builtins import REGRESSION_METRICS, RegressionOptions
from tuner.workloads._interface import Workload, WorkloadContext

#: Friedman's function reads the first 5 inputs; the other 5 are distractors the model must ignore.
N_FEATURES = 10


def make_data(n_examples: int, noise: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """``(x float32 (N, 10) uniform on [0, 1], y float64 (N,))``, the same for a given seed."""
    from sklearn.datasets import make_friedman1

    x, y = make_friedman1(n_samples=n_examples, n_features=N_FEATURES, noise=noise, random_state=seed)
    return x.astype(np.float32), y


def build(ctx: WorkloadContext) -> Workload:
    """MLP with ``hidden_sizes`` ReLU layers and one output; a seeded train/validation split."""
    opts = RegressionOptions.model_validate(ctx.options)
    x, y = make_data(opts.n_examples, opts.noise, ctx.seed)
    order = np.random.default_rng(ctx.seed).permutation(len(y))
    n_val = max(1, round(opts.val_fraction * len(y)))
    val, train = order[:n_val], order[n_val:]
    mean, std = y[train].mean(), y[train].std() or 1.0
    targets = ((y - mean) / std).astype(np.float32)

    layers: list[nn.Module] = []
    width = N_FEATURES
    for size in opts.hidden_sizes:
        layers += [nn.Linear(width, size), nn.ReLU(), nn.Dropout(opts.dropout)]
        width = size
    layers.append(nn.Linear(width, 1))
    return Workload(
        model=nn.Sequential(*layers),
        train_data=TensorDataset(torch.from_numpy(x[train]), torch.from_numpy(targets[train])),
        eval_data=TensorDataset(torch.from_numpy(x[val]), torch.from_numpy(targets[val])),
        task="regression",
        metrics=REGRESSION_METRICS,
    )
