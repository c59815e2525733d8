"""Study-level results kept in the storage: what one phase found that later phases use.

So far one: sweep-lr's recommended ``max_train_steps``, stored on the ``sweep-lr`` phase. A
value in the study file always wins over it; the user's YAML is never rewritten.
"""

from __future__ import annotations

from typing import Any

RECOMMENDED_ATTR = "tuner:recommended_max_train_steps"


def stored_recommendation(storage: Any, study: str) -> int | None:
    """sweep-lr's recommended ``max_train_steps`` for ``study``, if it has run to a recommendation."""
    import optuna

    from tuner.orchestrate import optuna_study_name, with_retries

    try:
        phase = with_retries(
            optuna.load_study, study_name=optuna_study_name(study, "sweep-lr"), storage=storage
        )
    except KeyError:
        return None
    value = with_retries(lambda: phase.user_attrs).get(RECOMMENDED_ATTR)
    return int(value) if value is not None else None


def store_recommendation(phase_study: Any, steps: int | None) -> None:
    """Record (or, with None, withdraw) sweep-lr's recommendation on its phase."""
    from tuner.orchestrate import with_retries

    with_retries(phase_study.set_user_attr, RECOMMENDED_ATTR, steps)


def open_existing_storage(url: str) -> Any:
    """The storage at ``url``, or None for an SQLite file that does not exist (readers such as
    ``validate`` and ``estimate`` never create one). A server that does not answer is waited
    out as workers wait it out (``outage.py``: up to ``$TUNER_STORAGE_OUTAGE_S``, said once):
    ``run-round`` started while the database restarts goes on once it is back."""
    from tuner.orchestrate import open_storage
    from tuner.orchestrate.storage_url import Backend, parse_storage_url

    parsed = parse_storage_url(url)
    if parsed.backend is Backend.SQLITE and (parsed.sqlite_file is None or not parsed.sqlite_file.exists()):
        return None
    if parsed.journal_file is not None and not parsed.journal_file.exists():
        return None
    return open_storage(url, wait_out_outage=True)
