"""Ghost batch norm: batch-norm statistics over virtual batches smaller than the per-device batch.

The playbook (batch norm section, after Hoffer et al. 2017, "Train longer, generalize better")
notes that normalising over ~64 examples often works better than over a large batch, and that
decoupling the batch size from the number of examples behind the statistics is what makes batch
size comparisons fair. It also warns that implementations often get the case "per-device batch
larger than the virtual batch" wrong: here the per-device batch is always split.

Usable in any model: ``GhostBatchNorm(num_channels, virtual_batch_size=64)`` wherever
``nn.BatchNorm1d/2d/3d(num_channels)`` would go.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn
from torch.nn.modules.batchnorm import _BatchNorm


class GhostBatchNorm(_BatchNorm):
    """Batch norm whose training statistics come from virtual batches of ``virtual_batch_size``.

    Input: ``(N, C)``, ``(N, C, L)``, ``(N, C, H, W)`` or any ``(N, C, *)``: channels in dim 1, as
    for ``nn.BatchNorm*d``. One class covers every rank because the computation is the same for
    all of them (statistics over every dim but the channel one); torch's 1d/2d/3d split only
    checks the rank, and their state_dicts are identical anyway.

    Training (or no running statistics): the batch is cut, in order, into virtual batches of
    ``virtual_batch_size`` examples; when that does not divide ``N`` the remainder is its own
    smaller virtual batch (N=10, virtual 4: 4, 4, 2), and a batch of at most
    ``virtual_batch_size`` is a single virtual batch (then this is exactly ``nn.BatchNorm``).
    Each virtual batch is normalised with its own mean and biased variance (plus ``eps``); the
    affine ``weight`` and ``bias`` are shared.

    Running statistics: each virtual batch updates them in turn, in batch order, exactly as a
    ``BatchNorm`` fed the virtual batches one after the other would (unbiased variance of that
    virtual batch, ``momentum``, or the cumulative average when ``momentum`` is None), and
    ``num_batches_tracked`` counts virtual batches. This is Hoffer et al.'s Algorithm 1 and what
    their code did (the model ran on each ghost batch in turn). So with k virtual batches per
    step the running averages forget k times faster per step than a BatchNorm with the same
    momentum; the averages are over virtual-batch statistics, which is what the layer normalises
    with in training, so that is what eval should estimate.

    Eval: the running statistics, like ``nn.BatchNorm``.

    It subclasses ``_BatchNorm``: the state_dict keys are BatchNorm's (``weight``, ``bias``,
    ``running_mean``, ``running_var``, ``num_batches_tracked``), so checkpoints load into either,
    and code that finds batch norms by ``isinstance(m, _BatchNorm)`` (averaging running
    statistics across ranks before eval and checkpoints) covers it. The flip side:
    ``nn.SyncBatchNorm.convert_sync_batchnorm`` would replace it with a plain ``SyncBatchNorm``
    and silently drop the virtual batches; use :func:`convert_sync_batch_norm` instead, which
    converts the other batch norms and leaves this one as it is.
    """

    def __init__(
        self,
        num_features: int,
        virtual_batch_size: int,
        eps: float = 1e-5,
        momentum: float | None = 0.1,
        affine: bool = True,
        track_running_stats: bool = True,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        if isinstance(virtual_batch_size, bool) or not isinstance(virtual_batch_size, int):
            raise TypeError(f"virtual_batch_size must be an int, got {virtual_batch_size!r}")
        if virtual_batch_size <= 0:
            raise ValueError(f"virtual_batch_size must be positive, got {virtual_batch_size}")
        super().__init__(num_features, eps, momentum, affine, track_running_stats, device, dtype)
        self.virtual_batch_size = virtual_batch_size

    def _check_input_dim(self, input: Tensor) -> None:
        if input.dim() < 2:
            raise ValueError(f"expected an (N, C, ...) input of 2 or more dims, got {input.dim()}D")

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, virtual_batch_size={self.virtual_batch_size}"

    def forward(self, input: Tensor) -> Tensor:
        self._check_input_dim(input)
        uses_batch_stats = self.training or (self.running_mean is None and self.running_var is None)
        if not uses_batch_stats or input.shape[0] <= self.virtual_batch_size:
            return super().forward(input)  # running statistics, or a single virtual batch
        sizes = virtual_batch_sizes(input.shape[0], self.virtual_batch_size)
        if sizes[-1] * math.prod(input.shape[2:]) == 1:  # say why, not only BatchNorm's "input size [1, C]"
            raise ValueError(
                f"GhostBatchNorm: a batch of {input.shape[0]} splits into virtual batches of {sizes}; "
                "the last has 1 value per channel, whose variance is undefined"
            )
        # One native batch-norm call per virtual batch, each updating the running statistics in
        # turn: BatchNorm's semantics by construction. Measured (benchmarks/ghost_batch_norm.py),
        # close to one BatchNorm call over the whole batch for a handful of virtual batches;
        # reducing a (k, vbs, C, ...) view with var_mean instead was 2-4x slower on CPU (several
        # passes over the input where the native kernel makes one).
        batch_norm = super().forward
        return torch.cat([batch_norm(chunk) for chunk in input.split(self.virtual_batch_size)])


def virtual_batch_sizes(batch_size: int, virtual_batch_size: int) -> list[int]:
    """How a batch is cut: full virtual batches in order, then the remainder (10, 4 -> [4, 4, 2])."""
    full, remainder = divmod(batch_size, virtual_batch_size)
    return [virtual_batch_size] * full + ([remainder] if remainder else [])


def convert_sync_batch_norm(module: nn.Module, process_group: object | None = None) -> nn.Module:
    """``nn.SyncBatchNorm.convert_sync_batchnorm``, except that a ``GhostBatchNorm`` stays one.

    A ghost batch norm's statistics are defined over virtual batches inside the per-device batch;
    synchronising them across devices would undo what its ``virtual_batch_size`` asks for. Its
    running statistics are still ``_BatchNorm`` buffers, averaged across ranks like any other.
    """
    if isinstance(module, GhostBatchNorm):
        return module
    if isinstance(module, _BatchNorm):
        return nn.SyncBatchNorm.convert_sync_batchnorm(module, process_group)
    for name, child in module.named_children():
        module.add_module(name, convert_sync_batch_norm(child, process_group))
    return module
