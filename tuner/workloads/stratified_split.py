"""A stratified, seeded train/held-out split of row indices, in numpy alone.

Why not scikit-learn's ``train_test_split``: importing scikit-learn costs about a CPU second,
paid by every process that builds a built-in workload only to shuffle indices (see
``tuner.workloads.digits_data``). This is its algorithm for ``stratify=y, random_state=seed``,
step by step (``StratifiedShuffleSplit._iter_indices`` and ``utils.extmath._approximate_mode``
as in scikit-learn 1.9.1), so every study keeps the validation examples it had;
``tests/workloads_tests/test_stratified_split.py`` checks it against the installed
scikit-learn's own function.
Being ours, the split no longer moves if a later scikit-learn changes its algorithm.
"""

from __future__ import annotations

from dataclasses import dataclass
from math import ceil

import numpy as np


@dataclass(frozen=True)
class SplitIndices:
    """Row indices of the two sides of a split, each in its shuffled order."""

    train: np.ndarray
    held_out: np.ndarray


def _approximate_mode(class_counts: np.ndarray, n_draws: int, rng: np.random.RandomState) -> np.ndarray:
    """How many of ``n_draws`` each class gets: proportional, floored, the rest to the largest
    remainders, ties broken by ``rng`` (scikit-learn's ``_approximate_mode``)."""
    continuous = class_counts / class_counts.sum() * n_draws
    floored = np.floor(continuous)
    need_to_add = int(n_draws - floored.sum())
    if need_to_add > 0:
        remainder = continuous - floored
        for value in np.sort(np.unique(remainder))[::-1]:
            (indices,) = np.where(remainder == value)
            add_now = min(len(indices), need_to_add)
            floored[rng.choice(indices, size=add_now, replace=False)] += 1
            need_to_add -= add_now
            if need_to_add == 0:
                break
    return floored.astype(int)


def stratified_split(labels: np.ndarray, held_out_fraction: float, seed: int) -> SplitIndices:
    """Split rows so each class keeps its share on both sides; ``ceil(fraction x rows)`` held out.

    Raises ``ValueError`` (in words a user can act on) when a side could not hold every class.
    """
    n_samples = len(labels)
    if not 0 < held_out_fraction < 1:
        raise ValueError(f"the held-out fraction must be between 0 and 1, got {held_out_fraction}")
    n_held_out = ceil(held_out_fraction * n_samples)
    n_train = n_samples - n_held_out
    classes, label_indices, class_counts = np.unique(labels, return_inverse=True, return_counts=True)
    if class_counts.min() < 2:
        raise ValueError(f"classes {classes[class_counts < 2].tolist()} have 1 example: each needs 2 or more")
    for side, size in (("training", n_train), ("held-out", n_held_out)):
        if size < len(classes):
            raise ValueError(
                f"the {side} side would have {size} examples, fewer than the {len(classes)} classes"
            )
    class_indices = np.split(np.argsort(label_indices, kind="stable"), np.cumsum(class_counts)[:-1])
    rng = np.random.RandomState(seed)
    train_counts = _approximate_mode(class_counts, n_train, rng)
    held_out_counts = _approximate_mode(class_counts - train_counts, n_held_out, rng)
    train: list[int] = []
    held_out: list[int] = []
    for index, count in enumerate(class_counts):
        shuffled = class_indices[index].take(rng.permutation(count), mode="clip")
        train.extend(shuffled[: train_counts[index]])
        held_out.extend(shuffled[train_counts[index] : train_counts[index] + held_out_counts[index]])
    return SplitIndices(rng.permutation(train), rng.permutation(held_out))
