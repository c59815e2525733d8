"""Calling a workload's entry point the way the engine promises (seeded, type-checked).

This is the engine's job, not the workloads layer's: the seeding contract (every global RNG
seeded from the model-init seed right before the call) belongs with the rest of the RNG handling
in ``tuner.train.rng``, and ``tuner.workloads`` must not import a layer above it.
"""

from __future__ import annotations

import random
from pathlib import Path

from tuner.errors import WorkloadError
from tuner.spec import StudySpec, key_to_path
from tuner.train.rng import seed_torch
from tuner.workloads import (
    KNOWN_METRICS,
    TASKS,
    RecordedOptions,
    Workload,
    WorkloadContext,
    check_options_read,
    import_entry_point,
    parse_entry_point,
    task_metrics,
)


def build_workload(spec: StudySpec, base_dir: Path, init_seed: int) -> Workload:
    """Import the entry point and call it with every RNG seeded by ``init_seed``.

    Every option it is given, and every option the search space sets, must be read by the call
    (``check_options_read``): one it never reads would do nothing, silently.

    Side effect: reseeds torch's, numpy's and Python's global RNGs, so the model's initial
    weights depend on ``init_seed`` alone (identical on every DDP rank and every retry).
    """
    import numpy as np

    function = import_entry_point(parse_entry_point(spec.workload.name, base_dir))
    random.seed(init_seed)
    np.random.seed(init_seed % 2**32)
    seed_torch(init_seed)
    options = RecordedOptions(spec.workload.options)
    workload = function(WorkloadContext(options=options, seed=spec.seed, base_dir=base_dir))
    if not isinstance(workload, Workload):
        raise WorkloadError(
            f"workload {spec.workload.name!r} returned {type(workload).__name__}, "
            "expected tuner.workloads.Workload"
        )
    check_task(spec.workload.name, workload)
    check_options_read(spec.workload.name, options, searched_options(spec))
    return workload


def searched_options(spec: StudySpec) -> list[str]:
    """The workload options the search space sets (``workload.dropout`` -> ``dropout``)."""
    paths = (key_to_path(key) for key in spec.search_space)
    return [str(path[2]) for path in paths if len(path) == 3 and path[:2] == ("workload", "options")]


def check_task(name: str, workload: Workload) -> None:
    """The task is known, a classifier has classes, and every metric exists and fits the task."""
    if workload.task not in TASKS:
        raise WorkloadError(
            f"workload {name!r} has task {workload.task!r}; expected one of: {', '.join(TASKS)}"
        )
    unknown = [m for m in workload.metrics if m not in KNOWN_METRICS]
    if unknown:
        raise WorkloadError(
            f"workload {name!r} asks for unknown metric(s) {unknown}; known: {', '.join(KNOWN_METRICS)}"
        )
    fitting = task_metrics(workload.task)
    misfits = [m for m in workload.metrics if m not in fitting]
    if misfits:
        raise WorkloadError(
            f"workload {name!r} is a {workload.task} workload and asks for {', '.join(misfits)}, "
            f"which a {workload.task} model does not have; its metrics: {', '.join(fitting)}"
        )
    if not workload.regression and (isinstance(workload.num_classes, bool) or workload.num_classes < 1):
        raise WorkloadError(
            f"workload {name!r} returned num_classes={workload.num_classes!r}; a classifier needs "
            "its class count (a regression workload sets task='regression' instead)"
        )
