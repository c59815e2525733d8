"""Training batches as a pure function of the step.

The order of examples is a seeded permutation per epoch, so batch ``k`` is the same whether
the run went straight through or was resumed at step ``k`` (no sampler state to save).
Batches are read on the training thread, or by DataLoader worker processes
(``data_workers > 0``, see ``tuner.train.data_workers``) with the very same result.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from torch.utils.data import Dataset, TensorDataset

from tuner.train.batch_structure import move_pair
from tuner.train.data_workers import WorkerStream
from tuner.train.distributed import SINGLE, Ranks, batch_shard
from tuner.train.fetching import fetch, fetch_step

__all__ = ["StepBatches", "epoch_seed", "fetch"]


def epoch_seed(data_seed: int, epoch: int) -> int:
    return int(np.random.SeedSequence([data_seed, epoch]).generate_state(1)[0])


class StepBatches:
    """Batch ``step`` of an endless, seeded, shuffled stream over ``dataset``.

    ``data_workers > 0`` reads batches in that many worker processes, each preparing up to
    ``prefetch_batches`` ahead; a ``TensorDataset`` is always indexed on the training thread (in
    one go: a worker would only add the cost of shipping the batch between processes). On a
    CPU device the workers' count is taken off torch's intra-op threads while they run (at least
    one is left). Call ``close()`` when done with it: it ends the workers and gives the threads
    back (a later ``get`` starts new workers).

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
        *,
        ranks: Ranks = SINGLE,
        data_workers: int = 0,
        prefetch_batches: int = 2,
        collate: Callable[[list[Any]], Any] | None = None,
    ) -> None:
        self.dataset, self.collate = dataset, collate
        self.size = len(dataset)  # type: ignore[arg-type]
        if self.size == 0:
            raise ValueError("the training dataset is empty")
        self.batch_size = batch_size
        self.data_seed = data_seed
        self.device = torch.device(device)
        self.ranks = ranks
        self.steps_per_epoch = max(1, self.size // batch_size)  # drop the last partial batch
        self.data_workers, self.prefetch_batches = data_workers, prefetch_batches
        self.indexed_at_once = isinstance(dataset, TensorDataset) and collate is None
        self.uses_workers = data_workers > 0 and not self.indexed_at_once
        # the plain path's tensors (inputs, targets): ``get`` is then two gathers, as a hand loop's
        self._pair = (
            dataset.tensors[:2]  # type: ignore[attr-defined]
            if self.indexed_at_once and self.device.type == "cpu" and not ranks.distributed
            else None
        )
        self._stream: WorkerStream | None = None  # started by the first get(): at the run's start step
        self._threads_before: int | None = None  # torch's intra-op threads before the workers started
        self._epoch = -1
        self._order = torch.empty(0, dtype=torch.long)

    def indices(self, step: int) -> torch.Tensor:
        """The global batch of ``step`` (dataset indices)."""
        epoch, position = divmod(step, self.steps_per_epoch)
        if epoch != self._epoch:
            generator = torch.Generator().manual_seed(epoch_seed(self.data_seed, epoch))
            self._order = torch.randperm(self.size, generator=generator)
            self._epoch = epoch
        start = position * self.batch_size
        return self._order[start : start + self.batch_size]

    def step_indices(self, step: int) -> torch.Tensor:
        """The indices this process reads at ``step``, its slice of ``indices(step)`` (all of it
        with one process): every read (training thread or workers' sampler) goes through here."""
        return batch_shard(self.indices(step), self.ranks)

    def get(self, step: int) -> tuple[Any, Any]:
        """Batch ``step`` as ``(inputs, targets)`` on the device (``tuner.train.batch_structure``:
        inputs a tensor, a tuple or a dict; a dict item's targets its ``labels``)."""
        if self._pair is not None:  # a TensorDataset on the CPU, one process: two gathers, no calls
            indices = self.indices(step)
            return self._pair[0][indices], self._pair[1][indices]
        if self.uses_workers:
            if self._stream is None:
                self._start_workers()
            inputs, targets = self._stream.get(step)  # type: ignore[union-attr]
        else:
            inputs, targets = fetch_step(
                self.dataset, self.step_indices(step), self.data_seed, step, collate=self.collate
            )
        if self.device.type != "cpu":
            # Asynchronous on CUDA when the batch is pinned (workers pin it); else a plain copy.
            return move_pair(inputs, targets, self.device)
        return inputs, targets

    def _start_workers(self) -> None:
        self._stream = WorkerStream(
            self.dataset,
            self.step_indices,
            collate=self.collate,
            data_seed=self.data_seed,
            workers=self.data_workers,
            prefetch=self.prefetch_batches,
            pin_memory=self.device.type == "cuda",
        )
        if self.device.type == "cpu":
            # The workers' cores come out of the training process's intra-op threads: OpenMP's
            # threads wait for each other at every op, and one of them descheduled by a worker
            # stalls them all (2 CPU-bound workers on 2 cores: steps 1.39x slower with 2 threads
            # than with 1, digits MLP, batch 32).
            self._threads_before = torch.get_num_threads()
            torch.set_num_threads(max(1, self._threads_before - self.data_workers))

    def close(self) -> None:
        """End the worker processes, if any, and give back the threads they took (idempotent)."""
        if self._stream is not None:
            self._stream.close()
            self._stream = None
        if self._threads_before is not None:
            torch.set_num_threads(self._threads_before)
            self._threads_before = None
