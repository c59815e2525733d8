"""Workloads: the interface a user implements, the built-ins, and loading entry points.

Write a workload as a function ``build(ctx: WorkloadContext) -> Workload`` and name it in the
study file as ``workload: {name: "my_package.my_module:build"}`` or ``"path/to/file.py:build"``.
"""

from tuner.workloads._builtins import BUILTINS
from tuner.workloads._checks import check_study
from tuner.workloads._entry_points import EntryPoint, import_entry_point, parse_entry_point
from tuner.workloads._interface import IGNORE_INDEX, KNOWN_METRICS, Workload, WorkloadContext

__all__ = [
    "BUILTINS",
    "IGNORE_INDEX",
    "KNOWN_METRICS",
    "EntryPoint",
    "Workload",
    "WorkloadContext",
    "check_study",
    "import_entry_point",
    "parse_entry_point",
]
