"""Calling a workload's entry point the way the engine promises (seeded, type-checked).

This is the engine's job, not the workloads layer's: the seeding contract (every global RNG
seeded from the model-init seed right before the call) belongs with the rest of the RNG handling
in ``tuner.train.rng``, and ``tuner.workloads`` must not import a layer above it.
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from tuner.errors import WorkloadError
from tuner.spec import StudySpec, key_to_path
from tuner.train.own_metrics import is_stateful
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


def build_workload(
    spec: StudySpec,
    base_dir: Path,
    init_seed: int,
    function: Callable[..., Any] | None = None,
    *,
    check_options: bool = True,
) -> Workload:
    """Import the entry point (or take ``function``, a build function the caller names) and call
    it with every RNG seeded by ``init_seed``.

    Every option it is given, and every option the search space sets, must be read by the call
    (``check_options_read``): one it never reads would do nothing, silently. ``check_options``
    False leaves that out, for a model built again to load a checkpoint into (the code that
    trained it may have read an option today's no longer does).

    Side effect: reseeds torch's, numpy's and Python's global RNGs, so the model's initial
    weights depend on ``init_seed`` alone (identical on every DDP rank and every retry).
    """
    import numpy as np

    if function is None:
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
    if check_options:
        check_options_read(spec.workload.name, options, searched_options(spec))
    return workload


def searched_options(spec: StudySpec) -> list[str]:
    """The workload options the search space sets (``workload.dropout`` -> ``dropout``)."""
    paths = (key_to_path(key) for key in spec.search_space)
    return [str(path[2]) for path in paths if len(path) == 3 and path[:2] == ("workload", "options")]


def check_task(name: str, workload: Workload) -> None:
    """The task is known, a classifier has classes, every built-in metric exists and fits the
    task, and every metric of the workload's own has a usable name and is something to score."""
    if workload.task not in TASKS:
        raise WorkloadError(
            f"workload {name!r} has task {workload.task!r}; expected one of: {', '.join(TASKS)}"
        )
    entries = workload.metrics if not isinstance(workload.metrics, (str, Mapping)) else [workload.metrics]
    odd = [e for e in entries if not isinstance(e, (str, Mapping))]
    if odd:
        raise WorkloadError(
            f"workload {name!r} lists a metric of type {type(odd[0]).__name__}; name a built-in "
            '("accuracy") or give your own by name: metrics=("loss", {"f1": MulticlassF1Score(...)})'
        )
    builtin = workload.builtin_metrics
    unknown = [m for m in builtin if m not in KNOWN_METRICS]
    if unknown:
        raise WorkloadError(
            f"workload {name!r} asks for unknown metric(s) {unknown}; known: {', '.join(KNOWN_METRICS)} "
            '(a metric of your own goes in a mapping: metrics=("loss", {"f1": ...}))'
        )
    fitting = task_metrics(workload.task)
    misfits = [m for m in builtin if m not in fitting]
    if misfits:
        raise WorkloadError(
            f"workload {name!r} is a {workload.task} workload and asks for {', '.join(misfits)}, "
            f"which a {workload.task} model does not have; its metrics: {', '.join(fitting)}"
        )
    _check_own_metrics(name, workload)
    if not workload.regression and (isinstance(workload.num_classes, bool) or workload.num_classes < 1):
        raise WorkloadError(
            f"workload {name!r} returned num_classes={workload.num_classes!r}; a classifier needs "
            "its class count (a regression workload sets task='regression' instead)"
        )


def _check_own_metrics(name: str, workload: Workload) -> None:
    """A metric of the workload's own: a plain name (it becomes ``val/<name>``) that no built-in
    uses, and an object with ``update``/``compute``/``reset`` (torchmetrics) or a function."""
    for metric, value in workload.own_metrics.items():
        if not isinstance(metric, str) or not re.fullmatch(r"[A-Za-z0-9_]+", metric):
            raise WorkloadError(
                f"workload {name!r} names a metric {metric!r}: use letters, digits and _ (it is "
                "reported as val/<name>)"
            )
        if metric in KNOWN_METRICS:
            raise WorkloadError(
                f"workload {name!r} gives its own metric {metric!r}, the name of a built-in one: "
                f"name it otherwise (e.g. {metric}_own) or name the built-in alone"
            )
        if isinstance(value, str):
            raise WorkloadError(
                f"workload {name!r} maps metric {metric!r} to the string {value!r}: a built-in is "
                f"named on its own, metrics=({value!r}, ...), under its own name"
            )
        if not is_stateful(value) and not callable(value):
            raise WorkloadError(
                f"workload {name!r} gives metric {metric!r} as {type(value).__name__}: expected an "
                "object with update/compute/reset (a torchmetrics Metric) or a function "
                "f(outputs, targets) -> float"
            )
