"""Which way each metric tuner computes is better: the one table every layer reads.

In the spec layer (the lowest) because the study file's ``objective.direction`` defaults to its
metric's own direction: a study that names ``val/r2`` or ``val/accuracy`` and no direction
would otherwise search for the worst model.
"""

from __future__ import annotations

from typing import Literal

#: Metrics (the part after ``val/`` or ``train/``) for which lower is better; every other metric
#: (accuracy, top5_accuracy, mcc, per-class correct / recall, r2) is better higher.
LOWER_IS_BETTER = ("loss", "error_rate", "perplexity", "mse", "mae")


def metric_direction(name: str) -> Literal["minimize", "maximize"]:
    """``"minimize"`` or ``"maximize"`` for a metric name such as ``"train/accuracy"``."""
    base = name.rsplit("/", 1)[-1]
    return "minimize" if base in LOWER_IS_BETTER else "maximize"
