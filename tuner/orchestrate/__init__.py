"""Optuna glue: storage, phases as Optuna studies, the worker pool, budgets, retries.

Only the storage is here so far (issue 3 builds the rest on it).
"""

from tuner.orchestrate.storage import default_storage_url, open_storage, redact_url, resolve_storage_url

__all__ = ["default_storage_url", "open_storage", "redact_url", "resolve_storage_url"]
