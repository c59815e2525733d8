"""Tracks the objective's best value and the step it happened at (the playbook's best step)."""

from __future__ import annotations

import math
from typing import Any

from tuner.spec._metrics import metric_direction
from tuner.train.events import Callback

__all__ = ["ObjectiveTracker", "is_better", "metric_direction"]


def is_better(value: float, than: float | None, direction: str) -> bool:
    """NaN is never better than anything; anything finite beats no value yet."""
    if not math.isfinite(value):
        return False
    if than is None:
        return True
    return value < than if direction == "minimize" else value > than


class ObjectiveTracker(Callback):
    """Reads ``loop.last_eval[metric]`` at every eval; keeps ``best_value`` and ``best_step``."""

    order = -10  # before checkpoints and loggers, which read it

    def __init__(self, metric: str, direction: str) -> None:
        self.metric, self.direction = metric, direction
        self.best_value: float | None = None
        self.best_step: int | None = None
        self.last_value: float | None = None

    def on_eval_end(self, loop: Any) -> None:
        value = float(loop.last_eval[self.metric])
        self.last_value = value
        if is_better(value, self.best_value, self.direction):
            self.best_value, self.best_step = value, loop.step

    def state_dict(self) -> dict[str, Any]:
        return {"best_value": self.best_value, "best_step": self.best_step, "last_value": self.last_value}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.best_value, self.best_step = state["best_value"], state["best_step"]
        self.last_value = state.get("last_value")
