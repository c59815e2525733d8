"""The few things tuner needs from Optuna that its public API does not offer, in one place.

Everything else goes through public API: ``RDBStorage`` methods (``create_new_trial``,
``set_trial_state_values``, ``record_heartbeat``, ``get_trial_id_from_study_id_trial_number``…)
and ``Study.tell``. Optuna is pinned to the majors this was written against (pyproject.toml);
when it moves, this module is the one to check.
"""

from __future__ import annotations

from typing import Any

_study_ids: dict[tuple[int, str], int] = {}


def study_id(storage: Any, study: Any) -> int:
    """Public: the id of ``study`` (an ``optuna.Study``) in ``storage`` (asked once: it never changes)."""
    key = (id(storage), study.study_name)
    if key not in _study_ids:
        _study_ids[key] = int(storage.get_study_id_from_name(study.study_name))
    return _study_ids[key]


def trial_id(storage: Any, study: Any, number: int) -> int:
    """Public: the storage id of trial ``number`` of ``study`` (``FrozenTrial`` keeps it privately)."""
    return int(storage.get_trial_id_from_study_id_trial_number(study_id(storage, study), number))


def stale_trial_ids(storage: Any, study: Any) -> list[int]:
    """RUNNING trials whose heartbeat is older than the grace period.

    Private: Optuna's public ``fail_stale_trials`` turns them FAIL *before* telling anyone,
    while tuner must write why (``failure_reason``, ``retried``) before the trial is finished
    (Optuna refuses writes to finished trials) and decide on a retry under the phase lock.
    """
    return list(storage._get_stale_trial_ids(study_id(storage, study)))


def trial_for_sampling(study: Any, trial_id_: int) -> Any:
    """An ``optuna.trial.Trial`` for a trial we created ourselves, so the sampler can suggest.

    ``Trial(study, trial_id)`` is how ``Study.ask`` builds one; ``ask`` itself cannot be used:
    it would create (or pop a WAITING) trial outside the phase lock.
    """
    import optuna

    return optuna.trial.Trial(study, trial_id_)
