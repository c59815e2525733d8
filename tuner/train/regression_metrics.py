"""Regression: the default loss and the metrics (``mse``, ``mae``, ``r2``), accumulated as sums.

The same contract as ``MetricAccumulator`` (sums in float64 on the outputs' device, nothing read
back per batch, summed across processes in place), so the evaluator and distributed evaluation
treat both alike.

``r2`` is ``1 - SSE / SST`` over every target value, SST taken about the scored targets' own mean
(scikit-learn's ``r2_score`` of the flattened values): 0 for a model that predicts that mean,
negative for one that does worse, 1 for a perfect one.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
import torch.nn.functional as F

from tuner.workloads import REGRESSION_METRICS


def as_predictions(outputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """``outputs`` shaped as ``targets``: an ``nn.Linear(h, 1)`` head's ``(N, 1)`` for targets ``(N,)``
    is one prediction per target. Broadcasting them instead (what ``F.mse_loss`` would do with a
    warning) compares every prediction with every target, and the model learns the mean."""
    if outputs.dim() == targets.dim() + 1 and outputs.shape[-1] == 1:
        return outputs.squeeze(-1)
    return outputs


def squared_error_per_item(outputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Default regression loss: one squared error per target value (no reduction)."""
    predictions = as_predictions(outputs, targets)
    return F.mse_loss(predictions, targets.to(predictions.dtype), reduction="none")


class RegressionAccumulator:
    """Running sums for ``loss``, ``mse``, ``mae`` and ``r2``; ``compute()`` gives Python floats."""

    def __init__(self, names: Sequence[str]) -> None:
        unknown = [name for name in names if name not in REGRESSION_METRICS]
        if unknown:
            raise ValueError(f"unknown regression metric(s) {unknown}; known: {list(REGRESSION_METRICS)}")
        self.names: tuple[str, ...] = tuple(dict.fromkeys(names))
        self._state: dict[str, torch.Tensor] | None = None

    def output_names(self) -> list[str]:
        return list(self.names)

    def reset(self) -> None:
        self._state = None

    def _init_state(self, device: torch.device) -> dict[str, torch.Tensor]:
        keys = ("loss_sum", "squared_error", "absolute_error", "target_sum", "target_square_sum")
        state = {key: torch.zeros((), dtype=torch.float64, device=device) for key in keys}
        state["count"] = torch.zeros((), dtype=torch.int64, device=device)
        return state

    def sums(self, device: torch.device) -> list[torch.Tensor]:
        """The running sums, in a fixed order (see ``MetricAccumulator.sums``)."""
        if self._state is None:
            self._state = self._init_state(device)
        return [self._state[key] for key in sorted(self._state)]

    @torch.no_grad()
    def update(self, outputs: torch.Tensor, targets: torch.Tensor, item_losses: torch.Tensor) -> None:
        """Add one batch: ``outputs`` shaped as ``targets`` (or with a trailing 1), one loss per target."""
        predictions = as_predictions(outputs, targets)
        if predictions.shape != targets.shape:
            raise ValueError(
                f"predictions {tuple(outputs.shape)} do not match targets {tuple(targets.shape)}"
            )
        if self._state is None:
            self._state = self._init_state(outputs.device)
        state = self._state
        device = state["count"].device
        y = targets.detach().reshape(-1).to(device=device, dtype=torch.float64)
        error = predictions.detach().reshape(-1).to(device=device, dtype=torch.float64) - y
        state["loss_sum"] += item_losses.detach().to(device=device, dtype=torch.float64).sum()
        state["squared_error"] += error.square().sum()
        state["absolute_error"] += error.abs().sum()
        state["target_sum"] += y.sum()
        state["target_square_sum"] += y.square().sum()
        state["count"] += y.numel()

    def compute(self) -> dict[str, float]:
        """The metrics so far (NaN if no target was seen; ``r2`` NaN for constant targets)."""
        state = self._state or self._init_state(torch.device("cpu"))
        count = int(state["count"].item())
        if not count:
            return dict.fromkeys(self.names, math.nan)
        sse = float(state["squared_error"].item())
        total = float(state["target_sum"].item())
        sst = float(state["target_square_sum"].item()) - total * total / count
        values = {
            "loss": float(state["loss_sum"].item()) / count,
            "mse": sse / count,
            "mae": float(state["absolute_error"].item()) / count,
            "r2": 1.0 - sse / sst if sst > 0 else math.nan,
        }
        return {name: values[name] for name in self.names}


def constant_scores(
    names: Sequence[str], targets: torch.Tensor, constant: float, default_loss: bool
) -> dict[str, float]:
    """What always predicting ``constant`` scores on ``targets``: the report's chance level when
    ``constant`` is the training targets' mean. ``loss`` only for the default loss (a workload's
    own loss is not known to be a squared error)."""
    accumulator = RegressionAccumulator(names)
    values = targets.detach().reshape(-1).to(torch.float64)
    predictions = torch.full_like(values, constant)
    accumulator.update(predictions, values, (predictions - values).square())
    scores = accumulator.compute()
    if not default_loss:
        scores.pop("loss", None)
    return {name: value for name, value in scores.items() if math.isfinite(value)}
