"""Stop a run once a metric reaches a threshold: the learning-rate sweep's "can it fit?" test.

The playbook's sweep asks how soon each learning rate fits the training data (say, training
accuracy 1.0); once it does, more steps only cost time, so the run ends there as a normal,
finished run (``StopReason.TARGET_REACHED``) that keeps its best objective value.
"""

from __future__ import annotations

import math
from typing import Any

from tuner.errors import WorkloadError
from tuner.train.events import Callback, StopReason, StopTraining
from tuner.train.objective import is_better, metric_direction


class FitCriterion(Callback):
    """At every eval: has ``metric`` reached ``threshold`` (>= when maximizing, <= when minimizing)?

    The first eval that meets it sets ``fit_step`` and stops training with
    ``StopTraining(StopReason.TARGET_REACHED)``; ``best_value`` is the metric's best so far.
    ``direction`` defaults to ``metric_direction(metric)``. Both survive a resume (``state_dict``).
    Raises ``WorkloadError`` at the start of training if the evaluator does not compute ``metric``.
    """

    def __init__(self, metric: str, threshold: float, direction: str | None = None) -> None:
        if direction not in (None, "minimize", "maximize"):
            raise ValueError(f"direction must be 'minimize' or 'maximize', got {direction!r}")
        self.metric, self.threshold = metric, float(threshold)
        self.direction: str = direction or metric_direction(metric)
        self.fit_step: int | None = None
        self.best_value: float | None = None

    def met(self, value: float) -> bool:
        """Whether ``value`` meets the threshold (NaN never does)."""
        if math.isnan(value):
            return False
        return value >= self.threshold if self.direction == "maximize" else value <= self.threshold

    def on_fit_start(self, loop: Any) -> None:
        check_fit_metric(self.metric, loop.evaluator.output_names() if loop.evaluator is not None else [])

    def on_eval_end(self, loop: Any) -> None:
        value = float(loop.last_eval[self.metric])
        if is_better(value, self.best_value, self.direction):
            self.best_value = value
        if self.fit_step is None and self.met(value):
            self.fit_step = loop.step
            sign = ">=" if self.direction == "maximize" else "<="
            raise StopTraining(
                StopReason.TARGET_REACHED,
                f"{self.metric} = {value:.6g} {sign} {self.threshold:g}",
            )

    def trial_attrs(self) -> dict[str, Any]:
        """What a trial records of the fit: ``{"fit_step": int | None, "best_fit_value": float | None}``."""
        return {"fit_step": self.fit_step, "best_fit_value": self.best_value}

    def state_dict(self) -> dict[str, Any]:
        return {"fit_step": self.fit_step, "best_value": self.best_value}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.fit_step, self.best_value = state.get("fit_step"), state.get("best_value")


def check_fit_metric(metric: str, computed: list[str]) -> None:
    """Raise ``WorkloadError`` unless ``metric`` is one of the ``computed`` outputs: at a sweep
    trial's start, and in ``tuner validate`` (``tuner.train.first_batch``)."""
    if metric not in computed:
        hint = (
            "; a regression fits on train/r2: set sweep_lr.fit_metric: train/r2 and "
            "sweep_lr.fit_threshold (0.95, say)"
            if "train/r2" in computed
            else ""
        )
        raise WorkloadError(
            f"fit metric {metric!r} is not computed by this workload; "
            f"it computes: {', '.join(computed) or 'nothing (no evaluation)'}{hint}"
        )
