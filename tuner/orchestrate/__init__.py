"""Optuna glue: storage, phases as Optuna studies, workers, budgets, heartbeats and retries.

A phase is an Optuna study ``<study>/<phase>`` holding its budget; workers (local
processes or ``tuner worker`` on other machines) start its trials, train each in a child process,
and record the outcome. Nothing here knows the playbook: ``tuner.playbook`` says what to train.
"""

from tuner._lazy import lazy_exports

# Imported on first use (PEP 562): the CLI's progress view needs the budget counts, not the
# worker (which pulls in the study-file models).
_EXPORTS = {
    "PhaseCounts": "tuner.orchestrate.budget",
    "count_trials": "tuner.orchestrate.budget",
    "decide": "tuner.orchestrate.budget",
    "PhaseSettings": "tuner.orchestrate.phase",
    "compare_and_set_attr": "tuner.orchestrate.phase",
    "open_phase": "tuner.orchestrate.phase",
    "optuna_study_name": "tuner.orchestrate.phase",
    "start_phase": "tuner.orchestrate.phase",
    "LocalPool": "tuner.orchestrate.pool",
    "LocalWorker": "tuner.orchestrate.pool",
    "local_workers": "tuner.orchestrate.pool",
    "distributions": "tuner.orchestrate.search_space",
    "quasi_random_point": "tuner.orchestrate.search_space",
    "random_point": "tuner.orchestrate.search_space",
    "default_storage_url": "tuner.orchestrate.storage",
    "open_storage": "tuner.orchestrate.storage",
    "redact_url": "tuner.orchestrate.storage",
    "resolve_storage_url": "tuner.orchestrate.storage",
    "with_retries": "tuner.orchestrate.storage_retries",
    "TrialJob": "tuner.orchestrate.trial_process",
    "WorkerOptions": "tuner.orchestrate.worker",
    "WorkerResult": "tuner.orchestrate.worker",
    "run_worker": "tuner.orchestrate.worker",
}


__getattr__ = lazy_exports(__name__, globals(), _EXPORTS)


__all__ = sorted(_EXPORTS)
