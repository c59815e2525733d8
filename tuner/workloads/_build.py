"""Calling a workload's entry point the way the engine promises (seeded, type-checked)."""

from __future__ import annotations

import random
from pathlib import Path

from tuner.errors import WorkloadError
from tuner.spec import StudySpec
from tuner.workloads._entry_points import import_entry_point, parse_entry_point
from tuner.workloads._interface import KNOWN_METRICS, Workload, WorkloadContext


def build_workload(spec: StudySpec, base_dir: Path, init_seed: int) -> Workload:
    """Import the entry point and call it with every RNG seeded by ``init_seed``.

    Side effect: reseeds torch's, numpy's and Python's global RNGs, so the model's initial
    weights depend on ``init_seed`` alone (identical on every DDP rank and every retry).
    """
    import numpy as np

    from tuner.train.rng import seed_torch

    function = import_entry_point(parse_entry_point(spec.workload.name, base_dir))
    random.seed(init_seed)
    np.random.seed(init_seed % 2**32)
    seed_torch(init_seed)
    workload = function(
        WorkloadContext(options=dict(spec.workload.options), seed=spec.seed, base_dir=base_dir)
    )
    if not isinstance(workload, Workload):
        raise WorkloadError(
            f"workload {spec.workload.name!r} returned {type(workload).__name__}, "
            "expected tuner.workloads.Workload"
        )
    unknown = [m for m in workload.metrics if m not in KNOWN_METRICS]
    if unknown:
        raise WorkloadError(
            f"workload {spec.workload.name!r} asks for unknown metric(s) {unknown}; "
            f"known: {', '.join(KNOWN_METRICS)}"
        )
    return workload
