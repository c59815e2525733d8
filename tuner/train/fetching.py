"""From dataset items to one batch ``(inputs, targets)``: the same code on the training thread
and in DataLoader worker processes, so ``training.data_workers`` changes speed, not the batches
(on CPU the run then has fewer intra-op threads, which may move a large sum's last bits).

Two rules hold on both paths:

- An item is ``(inputs, targets, *metadata)``: whatever follows the pair (a file name, a dict of
  ids, ragged arrays) is dropped *before* collation, so ``default_collate`` never sees it. A dict
  item is collated whole (its ``labels`` are the targets), and a workload's own ``collate`` (a
  Hugging Face data collator) makes the batch from the items itself.
- A dataset that draws random numbers in ``__getitem__`` (a random crop, noise) draws them from
  torch's, numpy's and Python's global RNGs seeded by :func:`batch_seed` (data seed, step, the
  batch's indices), and the caller's RNG states are put back afterwards. Batch ``k`` is then the
  same whichever process builds it (the training thread, worker 0 or worker 1), on a straight run
  and after a resume, and reading data never moves the training RNG (dropout) on by a draw. Each
  DDP rank reads different indices, so each rank's shard gets its own draws with no rank number.
"""

from __future__ import annotations

import contextlib
import hashlib
import random
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np
import torch
from torch.utils.data import Dataset, TensorDataset, default_collate

from tuner.errors import WorkloadCodeError
from tuner.train.batch_structure import LABELS


def collate_pairs(items: Sequence[Any], indices: Sequence[int] = ()) -> tuple[Any, Any]:
    """``default_collate`` of the items' inputs and of their targets; anything after them is dropped.

    Items that cannot be stacked raise ``WorkloadCodeError`` naming two of different shapes (by
    their dataset ``indices`` when given): the same words on the training thread and in a
    worker, where ``default_collate`` fails differently (it stacks into shared memory there).
    A dict item (Hugging Face's ``input_ids``, ``attention_mask``, ``labels``) is collated whole:
    the batch is its dict, the targets its ``labels`` (None without).
    """
    if items and isinstance(items[0], Mapping):
        batch = _collate(list(items), "items", indices)
        return batch, batch.get(LABELS)
    inputs = _collate([item[0] for item in items], "inputs", indices)
    targets = _collate([item[1] for item in items], "targets", indices)
    return inputs, targets


def collate_with(
    collate: Callable[[list[Any]], Any] | None, items: Sequence[Any], indices: Sequence[int] = ()
) -> tuple[Any, Any]:
    """The batch of ``items`` as ``(inputs, targets)``: by the workload's own ``collate`` (a
    Hugging Face data collator returns a dict: its ``labels`` are the targets), else
    ``collate_pairs``."""
    if collate is None:
        return collate_pairs(items, indices)
    batch = collate(list(items))
    if isinstance(batch, Mapping):
        return batch, batch.get(LABELS)
    if isinstance(batch, (tuple, list)) and len(batch) >= 2:
        return batch[0], batch[1]
    raise WorkloadCodeError(
        f"the workload's collate returned {type(batch).__name__}; expected a dict (its 'labels' the "
        "targets) or an (inputs, targets) pair"
    )


def _collate(values: list[Any], what: str, indices: Sequence[int]) -> Any:
    try:
        return default_collate(values)
    except (RuntimeError, TypeError, ValueError) as error:
        shapes = [_shape_of(value) for value in values]
        odd = next((i for i, shape in enumerate(shapes) if shape != shapes[0]), None)
        if odd is None:
            detail = (str(error).strip().splitlines() or [type(error).__name__])[0]
        else:
            first, other = (indices[0], indices[odd]) if len(indices) == len(values) else (0, odd)
            detail = (
                f"item {first} has {what} of shape {shapes[0]}, item {other} of shape {shapes[odd]}; "
                f"pad or crop them to one shape in __getitem__ (or give the workload a collate)"
            )
        raise WorkloadCodeError(f"the workload's {what} do not stack into a batch: {detail}") from error


def _shape_of(value: Any) -> Any:
    """A value's shape, or a dict item's shapes by key: what differs between two items."""
    if isinstance(value, Mapping):
        return {key: tuple(getattr(item, "shape", ())) for key, item in value.items()}
    return tuple(getattr(value, "shape", ()))


def fetch(
    dataset: Dataset, indices: torch.Tensor, collate: Callable[[list[Any]], Any] | None = None
) -> tuple[Any, Any]:
    """``(inputs, targets)`` for ``indices``; TensorDatasets are indexed in one go (fast path)."""
    if isinstance(dataset, TensorDataset) and collate is None:
        inputs, targets = (tensor[indices] for tensor in dataset.tensors[:2])
        return inputs, targets
    wanted = indices.tolist()
    getitems = getattr(dataset, "__getitems__", None)
    items = getitems(wanted) if getitems else [dataset[i] for i in wanted]
    return collate_with(collate, items, wanted)


def batch_seed(data_seed: int, step: int, indices: torch.Tensor) -> int:
    """The seed of the global RNGs while the items of ``indices`` at ``step`` are read (63 bits)."""
    digest = hashlib.blake2b(digest_size=8)
    digest.update(np.array([data_seed, step], dtype=np.int64).tobytes())
    digest.update(indices.numpy().astype(np.int64, copy=False).tobytes())
    return int.from_bytes(digest.digest(), "big") & 0x7FFF_FFFF_FFFF_FFFF


def seed_global_rngs(seed: int) -> None:
    """Seed torch's CPU generator, numpy's and Python's global RNGs (CUDA's are left alone)."""
    torch.default_generator.manual_seed(seed)
    np.random.seed(seed & 0xFFFF_FFFF)
    random.seed(seed)


@contextlib.contextmanager
def seeded_global_rngs(seed: int) -> Iterator[None]:
    """The global RNGs seeded with ``seed`` inside the block and put back as they were after it.

    Costs ~0.13 ms, nearly all of it numpy's ``get_state``/``set_state``: only the training
    thread pays it (a worker's own RNG states matter to nobody, so workers only seed).
    """
    torch_state, numpy_state, python_state = torch.get_rng_state(), np.random.get_state(), random.getstate()
    seed_global_rngs(seed)
    try:
        yield
    finally:
        torch.set_rng_state(torch_state)
        np.random.set_state(numpy_state)
        random.setstate(python_state)


def fetch_step(
    dataset: Dataset,
    indices: torch.Tensor,
    data_seed: int,
    step: int,
    *,
    restore_rngs: bool = True,
    collate: Callable[[list[Any]], Any] | None = None,
) -> tuple[Any, Any]:
    """Batch ``step``: :func:`fetch` with the global RNGs seeded for it, and restored after it
    unless ``restore_rngs`` is False (a worker). A TensorDataset runs no user code: no seeding."""
    if isinstance(dataset, TensorDataset) and collate is None:
        return fetch(dataset, indices)
    seed = batch_seed(data_seed, step, indices)
    if not restore_rngs:
        seed_global_rngs(seed)
        return fetch(dataset, indices, collate)
    with seeded_global_rngs(seed):
        return fetch(dataset, indices, collate)
