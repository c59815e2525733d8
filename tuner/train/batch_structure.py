"""A batch as the model takes it: a tensor, a tuple of tensors, or a dict of them.

A workload's items are ``(inputs, targets)`` pairs or dicts (Hugging Face's ``input_ids``,
``attention_mask``, ``labels``), and a pair's ``inputs`` may be a tensor, a tuple of tensors or a
dict. The engine moves such a structure to the device, cuts it into micro-batches and calls the
model on it without knowing its shape; a leaf that is not a tensor (a list of strings left in a
dict item) cannot go to a device, and is named before the first step.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from tuner.errors import WorkloadCodeError

#: The key of a dict item that holds the targets, as Hugging Face's models and ``Trainer`` name it.
LABELS = "labels"


def call_model(model: torch.nn.Module, inputs: Any) -> Any:
    """``model(inputs)`` for a tensor, ``model(*inputs)`` for a tuple or list, ``model(**inputs)``
    for a dict (a dict item: its ``labels`` go in too, so a Hugging Face model computes its loss)."""
    if isinstance(inputs, torch.Tensor):
        return model(inputs)
    if isinstance(inputs, Mapping):
        return model(**inputs)
    if isinstance(inputs, (tuple, list)):
        return model(*inputs)
    return model(inputs)


def to_device(value: Any, device: torch.device) -> Any:
    """``value`` with every tensor in it on ``device`` (asynchronous when pinned), the structure kept."""
    if isinstance(value, torch.Tensor):
        return value.to(device, non_blocking=True)
    if isinstance(value, Mapping):
        return {key: to_device(item, device) for key, item in value.items()}
    if isinstance(value, (tuple, list)):
        return type(value)(to_device(item, device) for item in value)
    return value


def move_pair(inputs: Any, targets: Any, device: torch.device) -> tuple[Any, Any]:
    """A batch's inputs and targets on ``device``; a dict item's targets are its ``labels``, moved
    once with the rest."""
    if isinstance(inputs, torch.Tensor):
        return inputs.to(device, non_blocking=True), _move_targets(targets, device)
    moved = to_device(inputs, device)
    if isinstance(inputs, Mapping) and targets is not None and inputs.get(LABELS) is targets:
        return moved, moved[LABELS]
    return moved, _move_targets(targets, device)


def _move_targets(targets: Any, device: torch.device) -> Any:
    return targets.to(device, non_blocking=True) if isinstance(targets, torch.Tensor) else targets


def check_movable(value: Any, where: str = "batch") -> None:
    """Every leaf of the batch is a tensor: raise ``WorkloadCodeError`` naming the first that is not
    (``batch['text'] is a list of str``). Checked on the first batch, on every device: a CPU run
    would otherwise pass it to the model, and a GPU run could not move it."""
    if isinstance(value, torch.Tensor):
        return
    if isinstance(value, Mapping):
        for key, item in value.items():
            check_movable(item, f"{where}[{key!r}]")
        return
    if (
        isinstance(value, (tuple, list))
        and value
        and all(isinstance(item, (torch.Tensor, Mapping, tuple, list)) for item in value)
    ):
        for index, item in enumerate(value):
            check_movable(item, f"{where}[{index}]")
        return
    raise WorkloadCodeError(
        f"the workload's {where} is {_describe(value)}, which tuner cannot move to a device: items "
        "must hold tensors (or numbers, which collate into tensors); drop the field from the items "
        "or turn it into a tensor (e.g. token ids) in __getitem__ or the workload's collate"
    )


def _describe(value: Any) -> str:
    if isinstance(value, (tuple, list)):
        kinds = sorted({type(item).__name__ for item in value}) or ["nothing"]
        return f"a {type(value).__name__} of {', '.join(kinds)}"
    return f"a {type(value).__name__}"


def batch_length(value: Any) -> int:
    """The number of examples in a batch: the first dimension of its first tensor."""
    if isinstance(value, torch.Tensor):
        return int(value.shape[0]) if value.dim() else 1
    items = value.values() if isinstance(value, Mapping) else value
    for item in items:
        return batch_length(item)
    return 0


def split_batch(value: Any, parts: int) -> list[Any]:
    """``value`` cut into ``parts`` equal micro-batches along the first dimension of every tensor."""
    if isinstance(value, torch.Tensor):
        return list(value.chunk(parts))
    if value is None:
        return [None] * parts
    if isinstance(value, Mapping):
        pieces = {key: split_batch(item, parts) for key, item in value.items()}
        return [{key: pieces[key][i] for key in value} for i in range(parts)]
    if isinstance(value, (tuple, list)):
        pieces_of = [split_batch(item, parts) for item in value]
        return [type(value)(piece[i] for piece in pieces_of) for i in range(parts)]
    return [value] * parts


def split_pair(inputs: Any, targets: Any, parts: int) -> list[tuple[Any, Any]]:
    """The micro-batches of ``(inputs, targets)``; a dict item's targets stay its own ``labels``."""
    split_inputs = split_batch(inputs, parts)
    if isinstance(inputs, Mapping) and targets is not None and inputs.get(LABELS) is targets:
        return [(piece, piece[LABELS]) for piece in split_inputs]
    return list(zip(split_inputs, split_batch(targets, parts), strict=True))
