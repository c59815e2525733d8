"""The step-indexed batch stream through ``torch.utils.data.DataLoader`` worker processes.

Workers build whole batches (items read, metadata dropped, collated: ``tuner.train.fetching``)
ahead of the training thread, which only receives them. What keeps this exact:

- The batch sampler is a pure function of the step: started at step ``s`` it yields batch
  ``s``, ``s + 1``, ... (each a :class:`StepRequest` carrying the step, so a worker seeds the
  dataset's RNG draws for that batch). Nothing about the stream is saved in a checkpoint.
- Asked for a step other than the next one (a resume, a caller that skips), the stream restarts
  at that step: the persistent workers are kept, the batches they prepared are thrown away.
- The DataLoader's own seed comes from a private generator: creating the workers draws nothing
  from the training RNG (so dropout masks are the same with 0 or N workers).

Processes: on Linux the workers are forked, as DataLoader does by default up to Python 3.13
(3.14 defaults to ``forkserver``, which would have to pickle the dataset, and the class of a
workload loaded from a file is not importable by name in a fresh process). Forking a process
that has run torch ops is safe here because DataLoader sets one intra-op thread in each worker
(the parent's OpenMP pool is never used in the child), and the workers are forked at the first
batch, before the checkpoint writer thread ever runs. Each worker ignores SIGINT and SIGTERM
rather than keep the handlers it was forked with (a Ctrl-C reaches the whole terminal process
group, a scheduler's SIGTERM often too: Python's default would kill the worker and fail the next
batch, the run's stop handler would act on a copy of the trainer): the training process alone
decides how to stop. A worker is killed by the kernel if its parent dies, even by ``kill -9``.
``close()`` ends them; the run calls it however training ends.
"""

from __future__ import annotations

import functools
import multiprocessing
import os
import signal
import sys
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import torch
from torch.utils.data import DataLoader, Dataset

from tuner._lifetime import children_allowed, die_with_parent, release_stop_signals, stop_signals_held
from tuner.errors import WorkloadCodeError
from tuner.train.fetching import fetch_step
from tuner.train.workload_errors import blame_workload


@dataclass(frozen=True)
class StepRequest:
    """What the sampler sends a worker: the step and its indices (a list: a tensor would need a
    shared-memory file per batch)."""

    step: int
    indices: list[int]


@dataclass(frozen=True)
class WorkerFailure:
    """A worker's batch when the user's dataset raised: the blame line and the worker's traceback.

    Returned, not raised: DataLoader would re-raise the error in the training process with its
    own frames only, and the user could no longer be told which line of their code failed.
    """

    message: str
    traceback: str


class WorkerTraceback(Exception):
    """The cause of a ``WorkloadCodeError`` from a worker: its text is the worker's traceback
    (``error.log`` shows it)."""


class _StepDataset(Dataset):
    """Wraps the workload's dataset: one ``__getitems__`` call per batch, fed a StepRequest."""

    def __init__(self, dataset: Dataset, data_seed: int, collate: Callable[[list[Any]], Any] | None) -> None:
        self.dataset, self.data_seed, self.collate = dataset, data_seed, collate

    def __len__(self) -> int:
        return len(self.dataset)  # type: ignore[arg-type]

    def __getitem__(self, index: int) -> Any:
        raise TypeError("batches are read with __getitems__(StepRequest)")

    def __getitems__(self, request: StepRequest) -> tuple[Any, Any] | WorkerFailure:
        indices = torch.tensor(request.indices, dtype=torch.long)
        try:
            return fetch_step(
                self.dataset, indices, self.data_seed, request.step, restore_rngs=False, collate=self.collate
            )
        except Exception as error:
            said = error if isinstance(error, WorkloadCodeError) else blame_workload(error)
            if said is None:  # not the workload's: DataLoader re-raises it with its type (an OOM stays one)
                raise
            where = f"in DataLoader worker pid {os.getpid()}:\n"
            return WorkerFailure(str(said), where + traceback.format_exc())


class _StepSampler:
    """DataLoader's batch sampler: one StepRequest per step from ``start``, without end."""

    def __init__(self, step_indices: Callable[[int], torch.Tensor]) -> None:
        self.step_indices = step_indices
        self.start = 0

    def __iter__(self) -> Iterator[StepRequest]:
        step = self.start
        while True:
            yield StepRequest(step, self.step_indices(step).tolist())
            step += 1


def _as_collated(batch: Any) -> Any:
    """The DataLoader's ``collate_fn``: the worker's ``__getitems__`` already collated the batch."""
    return batch


def _worker_started(worker_id: int, parent_pid: int) -> None:
    """``worker_init_fn``: ignore terminal and stop signals; die with the training process."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    release_stop_signals()  # a stop that came while we started is dropped: the trainer got its own
    # not Linux (no prctl): DataLoader's own watchdog still ends us within seconds of our parent
    die_with_parent(signal.SIGKILL, parent_pid)


def _context() -> Any:
    """``fork`` on Linux (see the module docstring); elsewhere the platform's default."""
    if sys.platform.startswith("linux"):
        return multiprocessing.get_context("fork")
    return None


class WorkerStream:
    """Batches of the step-indexed stream, built by ``workers`` processes ahead of the caller.

    ``prefetch`` is per worker (DataLoader's ``prefetch_factor``): up to ``workers * prefetch``
    batches are in flight. ``step_indices(step)`` is called on the calling thread (the sampler
    runs there), never in a worker. ``pin_memory`` pins each batch (for a CUDA device) on
    DataLoader's pinning thread, so the copy to the device can be asynchronous.
    """

    def __init__(
        self,
        dataset: Dataset,
        step_indices: Callable[[int], torch.Tensor],
        *,
        data_seed: int,
        workers: int,
        prefetch: int,
        pin_memory: bool = False,
        collate: Callable[[list[Any]], Any] | None = None,
    ) -> None:
        if workers < 1:
            raise ValueError("a WorkerStream needs at least one worker")
        self._sampler = _StepSampler(step_indices)
        self._loader = DataLoader(
            _StepDataset(dataset, data_seed, collate),
            batch_sampler=self._sampler,  # type: ignore[arg-type]
            num_workers=workers,
            collate_fn=_as_collated,
            pin_memory=pin_memory,
            worker_init_fn=functools.partial(_worker_started, parent_pid=os.getpid()),
            multiprocessing_context=_context(),
            generator=torch.Generator().manual_seed(data_seed),
            prefetch_factor=prefetch,
            persistent_workers=True,
        )
        self._iterator: Any = None
        self._next_step: int | None = None
        self.restarts = 0  # how many times a step out of order restarted the stream

    def get(self, step: int) -> tuple[Any, Any]:
        if step != self._next_step:
            self._sampler.start = step
            if self._iterator is not None:
                self.restarts += 1
            # the first call starts the workers; later ones reset them (persistent_workers)
            with children_allowed(), stop_signals_held():  # none dies before it ignores them
                self._iterator = iter(self._loader)
        self._next_step = None  # if next() raises, the stream is in an unknown place
        batch = next(self._iterator)
        self._next_step = step + 1
        if isinstance(batch, WorkerFailure):
            raise WorkloadCodeError(batch.message) from WorkerTraceback(batch.traceback)
        return batch

    def worker_pids(self) -> list[int]:
        return [w.pid for w in getattr(self._iterator, "_workers", ()) if w.pid is not None]

    def close(self) -> None:
        """End the worker processes (idempotent); a later ``get`` starts new ones."""
        iterator, self._iterator, self._next_step = self._iterator, None, None
        if iterator is None:
            return
        self._loader._iterator = None  # type: ignore[attr-defined]
        # DataLoader's own shutdown: a worker finishes the batch it is on, then exits. One that
        # does not within its timeout gets SIGTERM, which ours ignore: kill what is left.
        iterator._shutdown_workers()
        for worker in getattr(iterator, "_workers", ()):
            if worker.is_alive():
                worker.kill()
                worker.join()
