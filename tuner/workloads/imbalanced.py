"""Built-in workload: synthetic, imbalanced Gaussian-blob classification.

Accuracy flatters a model that ignores rare classes; this workload exists so that MCC and
per-class recall have something to show, with data generated offline from the study seed.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from torch import nn
from torch.utils.data import TensorDataset

from tuner.errors import WorkloadError
from tuner.workloads._builtins import IMBALANCED_METRICS, ImbalancedOptions
from tuner.workloads._interface import Workload, WorkloadContext
from tuner.workloads.stratified_split import stratified_split

_METRICS = IMBALANCED_METRICS

#: Expected distance between two class means, in units of the (unit) noise standard deviation.
#: Around 2.8 the blobs overlap enough that a rare class is learnable but far from trivial;
#: scaling the means by 1/sqrt(n_features) keeps that difficulty independent of n_features.
_SEPARATION = 2.0


def _class_counts(n_examples: int, probs: np.ndarray) -> np.ndarray:
    """Exact per-class counts (largest remainder), so the imbalance is what was asked for.

    Sampling labels independently would let a 5% class come out at 3% or 7% from seed to
    seed, and could leave it too small to stratify.
    """
    raw = probs * n_examples
    counts = np.floor(raw).astype(np.int64)
    short = n_examples - int(counts.sum())
    counts[np.argsort(-(raw - counts), kind="stable")[:short]] += 1
    return counts


def make_data(
    n_examples: int, n_features: int, class_weights: list[float], seed: int
) -> tuple[np.ndarray, np.ndarray]:
    """``(x float32 (N, F), y int64 (N,))``: one unit-variance Gaussian blob per class, shuffled."""
    if len(class_weights) < 2:
        raise WorkloadError(f"imbalanced: class_weights needs at least 2 classes, got {class_weights}")
    if any(not math.isfinite(w) or w <= 0 for w in class_weights):
        raise WorkloadError(f"imbalanced: class_weights must all be positive, got {class_weights}")
    probs = np.asarray(class_weights, dtype=np.float64)
    probs /= probs.sum()
    counts = _class_counts(n_examples, probs)
    if counts.min() < 2:
        raise WorkloadError(
            f"imbalanced: n_examples={n_examples} gives class {int(counts.argmin())} only "
            f"{int(counts.min())} example(s); raise n_examples or that class's weight"
        )

    rng = np.random.default_rng(seed)
    means = rng.normal(0.0, _SEPARATION / math.sqrt(n_features), size=(len(probs), n_features))
    y = rng.permutation(np.repeat(np.arange(len(probs)), counts))
    x = means[y] + rng.normal(0.0, 1.0, size=(n_examples, n_features))
    return x.astype(np.float32), y.astype(np.int64)


def build(ctx: WorkloadContext) -> Workload:
    """Two-hidden-layer MLP on the blobs; stratified, seeded train/validation split."""
    opts = ImbalancedOptions.model_validate(ctx.options)
    x, y = make_data(opts.n_examples, opts.n_features, opts.class_weights, ctx.seed)
    try:
        split = stratified_split(y, opts.val_fraction, ctx.seed)
    except ValueError as exc:  # too few examples for every class to reach both sides
        raise WorkloadError(f"imbalanced: cannot split with val_fraction={opts.val_fraction}: {exc}") from exc
    x_tr, x_va, y_tr, y_va = x[split.train], x[split.held_out], y[split.train], y[split.held_out]

    n_classes, hidden = len(opts.class_weights), opts.hidden_size
    model = nn.Sequential(
        nn.Linear(opts.n_features, hidden),
        nn.ReLU(),
        nn.Dropout(opts.dropout),
        nn.Linear(hidden, hidden),
        nn.ReLU(),
        nn.Linear(hidden, n_classes),
    )
    return Workload(
        model=model,
        train_data=TensorDataset(torch.from_numpy(x_tr), torch.from_numpy(y_tr)),
        eval_data=TensorDataset(torch.from_numpy(x_va), torch.from_numpy(y_va)),
        num_classes=n_classes,
        metrics=_METRICS,
    )
