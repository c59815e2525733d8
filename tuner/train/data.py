"""Training batches as a pure function of the step.

The order of examples is a seeded permutation per epoch, so batch ``k`` is the same whether
the run went straight through or was resumed at step ``k`` (no sampler state to save).
"""

from __future__ import annotations

import numpy as np
import torch
from torch.utils.data import Dataset, TensorDataset, default_collate

from tuner.train.distributed import SINGLE, Ranks, batch_shard


def fetch(dataset: Dataset, indices: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(inputs, targets)`` for ``indices``; TensorDatasets are indexed in one go (fast path)."""
    if isinstance(dataset, TensorDataset):
        inputs, targets = (tensor[indices] for tensor in dataset.tensors[:2])
        return inputs, targets
    getitems = getattr(dataset, "__getitems__", None)
    items = getitems(indices.tolist()) if getitems else [dataset[i] for i in indices.tolist()]
    inputs, targets = default_collate(items)[:2]
    return inputs, targets


def epoch_seed(data_seed: int, epoch: int) -> int:
    return int(np.random.SeedSequence([data_seed, epoch]).generate_state(1)[0])


class StepBatches:
    """Batch ``step`` of an endless, seeded, shuffled stream over ``dataset``.

    ``batch_size`` is the global batch; with several processes (``ranks``) each reads its equal
    slice of it (``batch_shard``), from the same seed: the ranks' slices of a step are disjoint
    and together exactly the one-process batch.
    """

    def __init__(
        self,
        dataset: Dataset,
        batch_size: int,
        data_seed: int,
        device: torch.device | str = "cpu",
        ranks: Ranks = SINGLE,
    ) -> None:
        self.dataset = dataset
        self.size = len(dataset)  # type: ignore[arg-type]
        if self.size == 0:
            raise ValueError("the training dataset is empty")
        self.batch_size = batch_size
        self.data_seed = data_seed
        self.device = torch.device(device)
        self.ranks = ranks
        self.steps_per_epoch = max(1, self.size // batch_size)  # drop the last partial batch
        self._epoch = -1
        self._order = torch.empty(0, dtype=torch.long)

    def indices(self, step: int) -> torch.Tensor:
        epoch, position = divmod(step, self.steps_per_epoch)
        if epoch != self._epoch:
            generator = torch.Generator().manual_seed(epoch_seed(self.data_seed, epoch))
            self._order = torch.randperm(self.size, generator=generator)
            self._epoch = epoch
        start = position * self.batch_size
        return self._order[start : start + self.batch_size]

    def rank_indices(self, step: int) -> torch.Tensor:
        """The examples this process trains on at ``step``: its slice of ``indices(step)``."""
        return batch_shard(self.indices(step), self.ranks)

    def get(self, step: int) -> tuple[torch.Tensor, torch.Tensor]:
        inputs, targets = fetch(self.dataset, self.rank_indices(step))
        if self.device.type != "cpu":
            # Pinned-free async copy: overlaps with the previous step's kernels on CUDA.
            inputs = inputs.to(self.device, non_blocking=True)
            targets = targets.to(self.device, non_blocking=True)
        return inputs, targets
