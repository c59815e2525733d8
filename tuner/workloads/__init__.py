"""Workloads: the interface a user implements, the built-ins, and loading entry points.

Write a workload as a function ``build(ctx: WorkloadContext) -> Workload`` and name it in the
study file as ``workload: {name: "my_package.my_module:build"}`` or ``"path/to/file.py:build"``.
"""

from tuner.workloads._build import build_workload
from tuner.workloads._builtins import BUILTINS
from tuner.workloads._checks import check_study
from tuner.workloads._interface import IGNORE_INDEX, KNOWN_METRICS, Workload, WorkloadContext

__all__ = [
    "BUILTINS",
    "IGNORE_INDEX",
    "KNOWN_METRICS",
    "Workload",
    "WorkloadContext",
    "build_workload",
    "check_study",
]
