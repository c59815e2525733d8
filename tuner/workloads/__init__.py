"""Workloads: the interface a user implements, the built-ins, and loading entry points.

Write a workload as a function ``build(ctx: WorkloadContext) -> Workload`` and name it in the
study file as ``workload: {name: "my_package.my_module:build"}`` or ``"path/to/file.py:build"``.

Layers for a user's own model live here too (``from tuner.workloads import GhostBatchNorm``);
they need torch, so they are imported on first use: ``tuner validate`` imports this package and
must stay fast (no torch).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tuner.workloads._builtins import BUILTINS, regularisation_off
from tuner.workloads._checks import check_study, sweep_reads_fit_metric
from tuner.workloads._entry_points import (
    PRELOAD_ENV,
    EntryPoint,
    import_entry_point,
    parse_entry_point,
    preload_module,
    workload_code,
)
from tuner.workloads._interface import (
    IGNORE_INDEX,
    KNOWN_METRICS,
    REGRESSION_METRICS,
    TASKS,
    MetricLike,
    Step,
    Task,
    Workload,
    WorkloadContext,
    task_metrics,
)
from tuner.workloads._options_read import RecordedOptions, check_options_read

if TYPE_CHECKING:
    from tuner.workloads.ghost_batch_norm import GhostBatchNorm, convert_sync_batch_norm

#: Exported names whose module imports torch: loaded by ``__getattr__`` when first asked for.
_LAZY = {
    "GhostBatchNorm": "tuner.workloads.ghost_batch_norm",
    "convert_sync_batch_norm": "tuner.workloads.ghost_batch_norm",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "BUILTINS",
    "IGNORE_INDEX",
    "KNOWN_METRICS",
    "PRELOAD_ENV",
    "REGRESSION_METRICS",
    "TASKS",
    "EntryPoint",
    "GhostBatchNorm",
    "MetricLike",
    "RecordedOptions",
    "Step",
    "Task",
    "Workload",
    "WorkloadContext",
    "check_options_read",
    "check_study",
    "convert_sync_batch_norm",
    "import_entry_point",
    "parse_entry_point",
    "preload_module",
    "regularisation_off",
    "sweep_reads_fit_metric",
    "task_metrics",
    "workload_code",
]
