"""Optuna glue: storage, phases as Optuna studies, workers, budgets, heartbeats and retries.

A phase is an Optuna study ``<study>/<phase>`` holding its budget; workers (local
processes or ``tuner worker`` on other machines) start its trials, train each in a child process,
and record the outcome. Nothing here knows the playbook: ``tuner.playbook`` says what to train.
"""

from tuner.orchestrate.budget import PhaseCounts, count_trials, decide
from tuner.orchestrate.phase import PhaseSettings, open_phase, optuna_study_name, start_phase
from tuner.orchestrate.pool import LocalPool, LocalWorker, local_workers
from tuner.orchestrate.search_space import distributions, quasi_random_point, random_point
from tuner.orchestrate.storage import (
    default_storage_url,
    open_storage,
    redact_url,
    resolve_storage_url,
    with_retries,
)
from tuner.orchestrate.trial_process import TrialJob
from tuner.orchestrate.worker import WorkerOptions, WorkerResult, run_worker

__all__ = [
    "LocalPool",
    "LocalWorker",
    "PhaseCounts",
    "PhaseSettings",
    "TrialJob",
    "WorkerOptions",
    "WorkerResult",
    "count_trials",
    "decide",
    "default_storage_url",
    "distributions",
    "local_workers",
    "open_phase",
    "open_storage",
    "optuna_study_name",
    "quasi_random_point",
    "random_point",
    "redact_url",
    "resolve_storage_url",
    "run_worker",
    "start_phase",
    "with_retries",
]
