"""What a trial trained by several processes (``training.processes_per_trial``) must agree on.

The playbook's multi-host rules, each a function here so the engine calls it at one place:

- data: every rank reads an equal, disjoint slice of the global batch of step ``k`` (the stream
  stays a pure function of the step, so resuming stays exact);
- evaluation: every rank scores a slice of each split and the metric *sums* are added up, so
  the metrics equal one process scoring everything (partial batches and padding included);
- batch norm: running statistics are averaged across ranks before every eval and checkpoint
  (DDP is built with ``forward_sync_buffers=False``: broadcasting rank 0's statistics at every
  forward would throw the other ranks' away);
- stopping: a stop (Ctrl-C, a pruner, a reached target, a NaN loss) takes effect on every rank
  at the same step, or the others would wait forever in the next gradient all-reduce.

With one process every function here is a no-op, and nothing imports ``torch.distributed``
state unless a process group exists.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist


@dataclass(frozen=True)
class Ranks:
    """This process's place in a multi-process run: ``rank`` of ``world_size``."""

    rank: int = 0
    world_size: int = 1

    @property
    def is_main(self) -> bool:
        """Rank 0: the one process that writes files and reports to the trial."""
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        return self.world_size > 1


SINGLE = Ranks()


def batch_shard(indices: torch.Tensor, ranks: Ranks) -> torch.Tensor:
    """This rank's equal, contiguous slice of a global batch (``batch_size % world_size == 0``)."""
    if not ranks.distributed:
        return indices
    size = len(indices) // ranks.world_size
    return indices[ranks.rank * size : (ranks.rank + 1) * size]


def eval_shard(indices: torch.Tensor, ranks: Ranks) -> torch.Tensor:
    """This rank's slice of an evaluation split; slices differ by at most one example and may be
    empty (a split smaller than the number of ranks): the summed metrics do not care."""
    if not ranks.distributed:
        return indices
    return torch.tensor_split(indices, ranks.world_size)[ranks.rank]


def sum_across_ranks_(tensors: list[torch.Tensor], ranks: Ranks) -> None:
    """Add every rank's tensors up, in place (one collective per tensor, in the same order)."""
    if ranks.distributed:
        for tensor in tensors:
            dist.all_reduce(tensor, op=dist.ReduceOp.SUM)


def batch_norm_modules(model: torch.nn.Module) -> list[torch.nn.modules.batchnorm._BatchNorm]:
    """Every batch-norm layer that keeps running statistics (``GhostBatchNorm`` included)."""
    return [
        module
        for module in model.modules()
        if isinstance(module, torch.nn.modules.batchnorm._BatchNorm) and module.track_running_stats
    ]


@torch.no_grad()
def average_batch_norm_stats(model: torch.nn.Module, ranks: Ranks) -> None:
    """Replace each rank's running mean and variance by their mean over the ranks.

    Each rank normalised its own slice of the batch, so each holds statistics of different
    examples; evaluating (or saving) rank 0's alone would use a fraction of the data.
    ``num_batches_tracked`` is the same on every rank and left alone.
    """
    if not ranks.distributed:
        return
    for module in batch_norm_modules(model):
        for name in ("running_mean", "running_var"):
            buffer = getattr(module, name)
            if buffer is not None:
                dist.all_reduce(buffer, op=dist.ReduceOp.SUM)
                buffer.div_(ranks.world_size)


#: What a rank asks for at a step boundary; the largest request over the ranks wins.
NO_STOP, STOP_WITH_CHECKPOINT, STOP = 0, 1, 2


def agree_on_step(loss: torch.Tensor, stop_request: int, ranks: Ranks) -> tuple[float, int]:
    """One collective per step: the global batch's mean loss, and the agreed stop request.

    The loss is each rank's mean over its equal slice, so their mean is the global batch's mean
    (and a NaN on any rank is a NaN everywhere: every rank stops as diverged, together).
    """
    wants = [stop_request == STOP_WITH_CHECKPOINT, stop_request == STOP]
    values = torch.tensor([float(loss.detach()), *wants], dtype=torch.float64)
    if not ranks.distributed:
        return float(values[0]), stop_request
    dist.all_reduce(values, op=dist.ReduceOp.SUM)
    agreed = STOP if values[2] > 0 else STOP_WITH_CHECKPOINT if values[1] > 0 else NO_STOP
    return float(values[0]) / ranks.world_size, agreed


def gather_objects(value: Any, ranks: Ranks) -> list[Any]:
    """Every rank's ``value`` (picklable), on every rank; ``[value]`` with one process."""
    if not ranks.distributed:
        return [value]
    gathered: list[Any] = [None] * ranks.world_size
    dist.all_gather_object(gathered, value)
    return gathered
