"""The playbook's formulas (product.md section 6): ``search cost = trials x average trial cost``
and ``days = (trials / parallel trials) x (hours per trial / 24)``."""

from __future__ import annotations


def search_cost_hours(trials: int, hours_per_trial: float) -> float:
    """``trials x average trial cost``: device-hours (GPU-hours, or CPU-worker-hours)."""
    return trials * hours_per_trial


def search_days(trials: int, parallel: int, hours_per_trial: float) -> float:
    """``(trials / parallel trials) x (hours per trial / 24)``: wall-clock days."""
    if parallel < 1:
        raise ValueError(f"parallel trials must be at least 1, got {parallel}")
    return trials / parallel * hours_per_trial / 24
