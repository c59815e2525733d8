"""Regression: the default loss and the metrics (``mse``, ``mae``, ``r2``), accumulated as sums.

The same contract as ``MetricAccumulator`` (sums in float64 on the outputs' device, nothing read
back per batch, summed across processes in place), so the evaluator and distributed evaluation
treat both alike.

``r2`` is ``1 - SSE / SST``, SST taken about the scored targets' own mean (scikit-learn's
``r2_score``; with several outputs, each output's averaged): 0 for a model that predicts that
mean, negative for one that does worse, 1 for a perfect one.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
import torch.nn.functional as F

from tuner.errors import WorkloadCodeError
from tuner.workloads import REGRESSION_METRICS


def as_predictions(outputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """``outputs`` shaped as ``targets``: an ``nn.Linear(h, 1)`` head's ``(N, 1)`` for targets ``(N,)``
    is one prediction per target. Broadcasting them instead (what ``F.mse_loss`` would do with a
    warning) compares every prediction with every target, and the model learns the mean."""
    if outputs.dim() == targets.dim() + 1 and outputs.shape[-1] == 1:
        return outputs.squeeze(-1)
    return outputs


def by_output(targets: torch.Tensor) -> torch.Tensor:
    """``targets`` as rows of outputs: ``(N, K)`` for targets of two or more dimensions (the last
    is the outputs), ``(N, 1)`` for one value per example."""
    return targets.reshape(-1, targets.shape[-1] if targets.dim() >= 2 else 1)


def squared_error_per_item(outputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Default regression loss: one squared error per target value (no reduction)."""
    predictions = as_predictions(outputs, targets)
    return F.mse_loss(predictions, targets.to(predictions.dtype), reduction="none")


class RegressionAccumulator:
    """Running sums for ``loss``, ``mse``, ``mae`` and ``r2``; ``compute()`` gives Python floats.

    Targets of two or more dimensions have one output per entry of their last (a model that
    predicts ``(N, K)`` values): ``r2`` is each output's, averaged, as scikit-learn's default
    ``multioutput="uniform_average"``, so an output whose scale dwarfs the others does not make
    the rest look learned.

    The targets are summed less ``shift`` (one value per output; by default the first batch's
    first row): the total sum of squares is then a difference of two sums the size of the
    targets' spread rather than of their square, exact for targets far from 0 (around 1e8 with a
    spread of 1, unshifted sums lose every digit). Each process must use the same ``shift``, and
    its length fixes the output count even for a process that scores no batch (its slice of a
    small split empty): the evaluator gives every process the split's first target.
    """

    def __init__(self, names: Sequence[str], shift: Sequence[float] | None = None) -> None:
        self.shift = None if shift is None else torch.tensor(list(shift), dtype=torch.float64)
        unknown = [name for name in names if name not in REGRESSION_METRICS]
        if unknown:
            raise ValueError(f"unknown regression metric(s) {unknown}; known: {list(REGRESSION_METRICS)}")
        self.names: tuple[str, ...] = tuple(dict.fromkeys(names))
        self._state: dict[str, torch.Tensor] | None = None

    def output_names(self) -> list[str]:
        return list(self.names)

    def reset(self) -> None:
        self._state = None

    def _init_state(self, device: torch.device, outputs: int = 1) -> dict[str, torch.Tensor]:
        state = {
            key: torch.zeros((), dtype=torch.float64, device=device)
            for key in ("loss_sum", "squared_error", "absolute_error")
        }
        for key in ("output_squared_error", "target_sum", "target_square_sum"):
            state[key] = torch.zeros(outputs, dtype=torch.float64, device=device)
        state["count"] = torch.zeros((), dtype=torch.int64, device=device)
        return state

    def sums(self, device: torch.device) -> list[torch.Tensor]:
        """The running sums, in a fixed order (see ``MetricAccumulator.sums``)."""
        if self._state is None:
            self._state = self._init_state(device, 1 if self.shift is None else self.shift.numel())
        return [self._state[key] for key in sorted(self._state)]

    @torch.no_grad()
    def update(
        self,
        outputs: torch.Tensor | None,
        targets: torch.Tensor | None,
        item_losses: torch.Tensor | None = None,
        *,
        mean_loss: torch.Tensor | None = None,
        count: torch.Tensor | int | None = None,
    ) -> None:
        """Add one batch: ``outputs`` shaped as ``targets`` (or with a trailing 1), one loss per
        target; or a loss the model computed itself, its ``mean_loss`` over ``count`` targets."""
        if outputs is None or targets is None:
            raise WorkloadCodeError(
                "a regression's metrics need the model's predictions and the targets; the model gave "
                "only a loss"
            )
        predictions = as_predictions(outputs, targets)
        if predictions.shape != targets.shape:
            shapes = f"{tuple(outputs.shape)} and {tuple(targets.shape)}"
            raise ValueError(f"predictions and targets do not match: {shapes}")
        y = by_output(targets.detach().to(dtype=torch.float64))
        if self._state is None:
            self._state = self._init_state(outputs.device, y.shape[1])
        state = self._state
        device = state["count"].device
        y = y.to(device)
        error = predictions.detach().to(device=device, dtype=torch.float64).reshape(y.shape) - y
        if self.shift is None and len(y):
            self.shift = y[0].cpu()
        if self.shift is not None:
            y = y - self.shift.to(device)
        if item_losses is not None:
            state["loss_sum"] += item_losses.detach().to(device=device, dtype=torch.float64).sum()
        else:
            assert mean_loss is not None and count is not None
            state["loss_sum"] += mean_loss.detach().to(device=device, dtype=torch.float64) * float(count)
        state["squared_error"] += error.square().sum()
        state["absolute_error"] += error.abs().sum()
        state["output_squared_error"] += error.square().sum(dim=0)
        state["target_sum"] += y.sum(dim=0)
        state["target_square_sum"] += y.square().sum(dim=0)
        state["count"] += y.numel()

    def compute(self) -> dict[str, float]:
        """The metrics so far (NaN if no target was seen; ``r2`` NaN when every output is constant)."""
        state = self._state or self._init_state(torch.device("cpu"))
        count = int(state["count"].item())
        if not count:
            return dict.fromkeys(self.names, math.nan)
        rows = count // state["target_sum"].numel()
        sums, squares = state["target_sum"].tolist(), state["target_square_sum"].tolist()
        explained = [
            1.0 - sse / sst
            for sse, total, square in zip(state["output_squared_error"].tolist(), sums, squares, strict=True)
            if (sst := square - total * total / rows) > 0
        ]
        values = {
            "loss": float(state["loss_sum"].item()) / count,
            "mse": float(state["squared_error"].item()) / count,
            "mae": float(state["absolute_error"].item()) / count,
            "r2": sum(explained) / len(explained) if explained else math.nan,
        }
        return {name: values[name] for name in self.names}


def constant_scores(
    names: Sequence[str], targets: torch.Tensor, train_targets: torch.Tensor, default_loss: bool
) -> dict[str, float]:
    """What a model that learned nothing scores on ``targets``: always the training targets' mean
    (per output), or for ``mae`` their median, the constant that minimises an absolute error (on
    skewed targets the mean's ``mae`` would set chance too high, and a model that only learned the
    median would pass as learned). The report's chance level. ``loss`` only for the default loss (a
    workload's own is not known to be a squared error)."""
    values = by_output(targets.detach().to(torch.float64))
    train = train_targets.detach().to(torch.float64).reshape(-1, values.shape[1])
    scores: dict[str, float] = {}
    constants = ((train.mean(dim=0), ("loss", "mse", "r2")), (train.median(dim=0).values, ("mae",)))
    for constant, metrics in constants:
        wanted = [name for name in names if name in metrics and (name != "loss" or default_loss)]
        if not wanted:
            continue
        accumulator = RegressionAccumulator(wanted)
        predictions = constant.expand_as(values)
        accumulator.update(predictions, values, (predictions - values).square())
        scores.update(accumulator.compute())
    return {name: value for name, value in scores.items() if math.isfinite(value)}
