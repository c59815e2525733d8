"""Tracks the objective's best value and the step it happened at (the playbook's best step).

Which of a run's evals is best is one rule (``eval_order``), used by the tracker and by the
kept checkpoints alike: the better objective; on a tie, the lower loss of the objective's split
(``tie_metric``); on a tie of both, the earlier step. A validation split of ~100 examples moves
accuracy in steps of 1%, so many evals tie on it; their loss still tells them apart, and the
earliest of the tied evals is often one the model had barely reached.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tuner.spec._metrics import metric_direction
from tuner.train.events import Callback

__all__ = [
    "ObjectiveTracker",
    "ScoredEval",
    "better_eval",
    "eval_order",
    "is_better",
    "metric_direction",
    "tie_metric",
]


def is_better(value: float, than: float | None, direction: str) -> bool:
    """NaN is never better than anything; anything finite beats no value yet."""
    if not math.isfinite(value):
        return False
    if than is None:
        return True
    return value < than if direction == "minimize" else value > than


def tie_metric(metric: str) -> str | None:
    """The metric that breaks ties on ``metric``: the loss of its split (``val/accuracy`` ->
    ``val/loss``); None when ``metric`` is that loss, which has nothing left to break ties with."""
    split, _, name = metric.rpartition("/")
    if name == "loss":
        return None
    return f"{split}/loss" if split else "loss"


@dataclass(frozen=True)
class ScoredEval:
    """One eval as the best-eval rule sees it; ``loss`` is the tie-breaking loss (None: not
    computed, or the objective is that loss)."""

    step: int
    value: float
    loss: float | None = None


def eval_order(scored: ScoredEval, direction: str) -> tuple[float, float, int]:
    """Sort key, best eval first: the objective, then the lower loss (an unknown or NaN loss
    last: it cannot win a tie), then the earlier step. ``value`` must be finite."""
    sign = 1.0 if direction == "minimize" else -1.0
    loss = scored.loss if scored.loss is not None and math.isfinite(scored.loss) else math.inf
    return (sign * scored.value, loss, scored.step)


def better_eval(scored: ScoredEval, than: ScoredEval | None, direction: str) -> bool:
    """``scored`` is a better eval than ``than`` by ``eval_order``; a NaN or infinite objective
    is never better, and any finite one beats no eval yet."""
    if not math.isfinite(scored.value):
        return False
    return than is None or eval_order(scored, direction) < eval_order(than, direction)


def tie_loss(metrics: Mapping[str, Any], metric: str) -> float | None:
    """The tie-breaking loss of ``metric`` among an eval's ``metrics``; None when the objective
    is the loss itself, its split computes no loss (a workload that asks for none), or the loss
    is NaN or infinite: unknown, it cannot win a tie."""
    name = tie_metric(metric)
    value = metrics.get(name) if name is not None else None
    loss = None if value is None else float(value)
    return loss if loss is not None and math.isfinite(loss) else None


class ObjectiveTracker(Callback):
    """Reads ``loop.last_eval[metric]`` (and its tie-breaking loss) at every eval; keeps the best
    eval by ``eval_order``: ``best_value``, ``best_step``, ``best_loss``."""

    order = -10  # before checkpoints and loggers, which read it

    def __init__(self, metric: str, direction: str) -> None:
        self.metric, self.direction = metric, direction
        self.best_value: float | None = None
        self.best_step: int | None = None
        self.best_loss: float | None = None
        self.last_value: float | None = None
        self.last_loss: float | None = None

    @property
    def best(self) -> ScoredEval | None:
        """The best eval so far, None before the first finite one."""
        if self.best_value is None or self.best_step is None:
            return None
        return ScoredEval(self.best_step, self.best_value, self.best_loss)

    def on_eval_end(self, loop: Any) -> None:
        value = float(loop.last_eval[self.metric])
        loss = tie_loss(loop.last_eval, self.metric)
        self.last_value, self.last_loss = value, loss
        if better_eval(ScoredEval(loop.step, value, loss), self.best, self.direction):
            self.best_value, self.best_step, self.best_loss = value, loop.step, loss

    def state_dict(self) -> dict[str, Any]:
        return {
            "best_value": self.best_value,
            "best_step": self.best_step,
            "best_loss": self.best_loss,
            "last_value": self.last_value,
            "last_loss": self.last_loss,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """A state saved before ties were broken by the loss has no ``best_loss``: unknown, so a
        later tie whose loss is known wins it (the kept checkpoints, restored alike, agree)."""
        self.best_value, self.best_step = state["best_value"], state["best_step"]
        self.best_loss = state.get("best_loss")
        self.last_value, self.last_loss = state.get("last_value"), state.get("last_loss")
