"""The proxy validation split: a seeded part of the training split held out for evaluation.

The playbook's round 1 must not look at the real validation set (tuning on it many times
over-fits the choice to it), so it validates on a piece of the training data instead. The piece
depends on the study seed alone: every trial of a study, and every ``seed_index``, is scored on
the same examples and trains on the same rest.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch.utils.data import Dataset, Subset, TensorDataset

from tuner.errors import UsageError


@dataclass(frozen=True)
class ProxySplit:
    """``train`` and ``held_out`` are disjoint and together the whole training split.

    ``train_indices`` / ``held_out_indices`` are sorted positions in the original training split.
    """

    train: Dataset
    held_out: Dataset
    train_indices: torch.Tensor
    held_out_indices: torch.Tensor

    def describe(self, fraction: float) -> str:
        """``proxy (10% of the training split, 144 examples)``: what the run validated on."""
        return f"proxy ({100 * fraction:.4g}% of the training split, {len(self.held_out_indices)} examples)"


def proxy_split(dataset: Dataset, fraction: float, seed: int) -> ProxySplit:
    """Hold out ``ceil(fraction * n)`` seeded, shuffled examples of ``dataset``.

    A ``TensorDataset`` stays a ``TensorDataset`` (its tensors indexed once), so batching keeps
    its one-gather fast path; any other dataset becomes ``torch.utils.data.Subset``s.
    Raises ``UsageError`` when either side would be empty.
    """
    size = len(dataset)  # type: ignore[arg-type]
    held = math.ceil(fraction * size)
    if held < 1 or held > size - 1:
        raise UsageError(
            f"training.proxy_fraction {fraction:g} of the {size} training examples leaves "
            f"{held} to validate on and {size - held} to train on; each needs at least 1"
        )
    order = torch.randperm(size, generator=torch.Generator().manual_seed(seed))
    held_out_indices = order[:held].sort().values
    train_indices = order[held:].sort().values
    return ProxySplit(
        _take(dataset, train_indices), _take(dataset, held_out_indices), train_indices, held_out_indices
    )


def _take(dataset: Dataset, indices: torch.Tensor) -> Dataset:
    if isinstance(dataset, TensorDataset):
        return TensorDataset(*(tensor[indices] for tensor in dataset.tensors))
    return Subset(dataset, indices.tolist())
