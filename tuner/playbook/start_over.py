"""A phase whose every trial failed before its first training step may start over under a
changed study file.

A phase's trials must all train one configuration, so a changed study file is refused once the
phase has run (``config_check``). But a phase that never trained a step holds nothing to keep: its
trials are failures of a workload that broke before training (``budget.BROKEN_ATTR``: an
objective it does not compute, inputs that do not fit its model), and the fix is often the study
file itself. Refusing it would leave the user only another ``--output-dir``. So such a phase is
deleted from the storage (Optuna's public ``delete_study``) and created again from the new file;
the old trials' run folders, with their ``error.log``, are moved under ``.started-over-N/``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

STARTED_OVER = ".started-over-"


def trained_nothing(storage: Any, name: str) -> bool:
    """Every trial of the phase ``name`` failed before its first step (none running, none that
    trained), and there was at least one: the phase holds no result."""
    import optuna
    from optuna.trial import TrialState

    from tuner.orchestrate.budget import BROKEN_ATTR
    from tuner.orchestrate.duplicates import counted

    trials = counted(optuna.load_study(study_name=name, storage=storage).get_trials(deepcopy=False))
    failed = [t for t in trials if t.state == TrialState.FAIL]
    never_started = [t for t in trials if t.state == TrialState.WAITING]
    return (
        bool(failed)
        and len(failed) + len(never_started) == len(trials)
        and all(t.user_attrs.get(BROKEN_ATTR) is not None for t in failed)
    )


def start_over(storage: Any, name: str, folder: Path) -> str:
    """Delete the phase ``name`` from ``storage`` and move its run folders (under ``folder``)
    aside; returns the line that says so."""
    import optuna

    optuna.delete_study(study_name=name, storage=storage)
    runs = sorted(folder.glob("trial-*")) if folder.is_dir() else []
    if not runs:
        return f"started over: every trial of {name} had failed before its first step"
    number = 1 + sum(1 for _ in folder.glob(f"{STARTED_OVER}*"))
    aside = folder / f"{STARTED_OVER}{number}"
    aside.mkdir()
    for run in runs:
        run.rename(aside / run.name)
    return (
        f"started over: every trial of {name} had failed before its first step under the old study "
        f"file; their folders are in {aside}"
    )
