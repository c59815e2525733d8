"""``training.precision``: the forward pass and the loss under autocast, and fp16's gradient scaler.

Lightning's words (``32-true``, ``bf16-mixed``, ``16-mixed``; the spec also takes Accelerate's).
Mixed precision is ``torch.autocast(device_type, dtype)`` around the forward and the loss (the
backward runs outside, as PyTorch's AMP recipe says); evaluation runs under the same autocast, so
a model is scored as it trains. float16 has a narrow range: its gradients are scaled by
``torch.amp.GradScaler`` (unscaled before clipping; a step whose gradients overflowed is skipped
and the scale lowered), and the scaler's state goes into every checkpoint, so a resume is exact.
bfloat16 has float32's range and needs no scaler.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from tuner.errors import UsageError

_DTYPES = {"32-true": None, "bf16-mixed": torch.bfloat16, "16-mixed": torch.float16}


@dataclass(frozen=True)
class Precision:
    """How a run computes: ``autocast()`` around each forward, ``scaler()`` for float16."""

    name: str = "32-true"
    device_type: str = "cpu"

    @property
    def dtype(self) -> torch.dtype | None:
        return _DTYPES[self.name]

    @property
    def mixed(self) -> bool:
        return self.dtype is not None

    def autocast(self) -> contextlib.AbstractContextManager[Any]:
        """The context of a forward pass: autocast to ``dtype``, or nothing for float32."""
        if self.dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(self.device_type, dtype=self.dtype)

    def scaler(self) -> torch.amp.GradScaler | None:
        """float16's gradient scaler (None for the others)."""
        return torch.amp.GradScaler(self.device_type) if self.name == "16-mixed" else None


FULL = Precision()


def precision_problem(
    name: str, device_type: str, *, bf16_supported: Callable[[], bool] | None = None
) -> str | None:
    """Why ``device_type`` cannot run ``name`` (one line), or None when it can.

    bfloat16 on CUDA needs compute capability 8.0 (Ampere) or newer; autocast must exist for the
    device type at all. ``bf16_supported`` answers for CUDA (``torch.cuda.is_bf16_supported``
    without emulation by default).
    """
    dtype = _DTYPES.get(name)
    if name not in _DTYPES:
        return f"training.precision {name!r} is not one of {', '.join(_DTYPES)}"
    if dtype is None:
        return None
    if not torch.amp.is_autocast_available(device_type):
        return f"training.precision {name} needs autocast, which torch has not for {device_type} devices"
    if device_type == "cuda" and dtype == torch.bfloat16:
        supported = bf16_supported or (lambda: torch.cuda.is_bf16_supported(including_emulation=False))
        if not supported():
            return (
                "training.precision bf16-mixed needs a GPU with bfloat16 (compute capability 8.0, "
                "Ampere, or newer); this one has not: use 16-mixed (float16 with a gradient scaler)"
            )
    return None


def resolve_precision(name: str, device: torch.device) -> Precision:
    """The run's ``Precision`` on ``device``; ``UsageError`` (one line) if the device cannot run it."""
    problem = precision_problem(name, device.type)
    if problem is not None:
        raise UsageError(problem)
    return Precision(name, device.type)
