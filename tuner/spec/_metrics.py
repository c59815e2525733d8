"""Which way each metric tuner computes is better: the one table every layer reads.

In the spec layer (the lowest) because the study file's ``objective.direction`` defaults to its
metric's own direction: a study that names ``val/r2`` or ``val/accuracy`` and no direction
would otherwise search for the worst model.
"""

from __future__ import annotations

import re
from typing import Literal

#: Metrics (the part after ``val/`` or ``train/``) for which lower is better; every other metric
#: (accuracy, top5_accuracy, mcc, per-class correct / recall, r2) is better higher.
LOWER_IS_BETTER = ("loss", "error_rate", "perplexity", "mse", "mae")
#: Better higher: the rest of tuner's built-in metrics (``class_<k>_correct`` / ``_recall`` too).
HIGHER_IS_BETTER = ("accuracy", "top5_accuracy", "mcc", "r2")
_PER_CLASS = re.compile(r"class_\d+_(correct|recall)")


def known_direction(name: str) -> Literal["minimize", "maximize"] | None:
    """A built-in metric's direction; None for a workload's own metric (``val/f1``), whose
    direction only its author knows."""
    base = name.rsplit("/", 1)[-1]
    if base in LOWER_IS_BETTER:
        return "minimize"
    if base in HIGHER_IS_BETTER or _PER_CLASS.fullmatch(base):
        return "maximize"
    return None


def metric_direction(name: str) -> Literal["minimize", "maximize"]:
    """``"minimize"`` or ``"maximize"`` for a metric name such as ``"train/accuracy"``."""
    base = name.rsplit("/", 1)[-1]
    return "minimize" if base in LOWER_IS_BETTER else "maximize"
