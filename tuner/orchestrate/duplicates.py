"""Trials that lost a race for their slot: how they are told apart and made to yield.

A PostgreSQL lock can be lost mid-write (``locks.py``); the side that lost it may have created a
trial another worker created too (same slot, same attempt). Such a trial is marked
``duplicate_of`` and failed: it fills nothing and counts for nothing. Used both when claiming
(``claim.py``) and when failing a trial enqueues its retry (``failures.py``): it lives apart from
both so that neither imports the other.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from tuner.orchestrate import _optuna_adapter as adapter
from tuner.orchestrate.budget import DUPLICATE_ATTR
from tuner.orchestrate.locks import LostLocks, phase_lock
from tuner.orchestrate.storage import with_retries

RECONCILE_ATTEMPTS = 5


def counted(trials: list[Any]) -> list[Any]:
    """The trials that count: those that lost a race for their slot are left out."""
    return [t for t in trials if DUPLICATE_ATTR not in t.user_attrs]


def _key(trial: Any) -> tuple[int, int]:
    return int(trial.user_attrs.get("slot", trial.number)), int(trial.user_attrs.get("attempt", 0))


def yield_duplicates(storage: Any, study: Any, numbers: Iterable[int]) -> list[int]:
    """After a lost lock: fail each of our trials ``numbers`` that another counted trial
    duplicates (same slot and attempt), marking it ``duplicate_of``. Returns those yielded."""
    wanted = set(numbers)
    yielded: list[int] = []
    for _ in range(RECONCILE_ATTEMPTS):
        lost = LostLocks()
        yielded = with_retries(_yield_once, storage, study, wanted, lost)
        if not lost:
            break
    return yielded


def _yield_once(storage: Any, study: Any, wanted: set[int], lost: LostLocks) -> list[int]:
    from optuna.exceptions import UpdateFinishedTrialError
    from optuna.trial import TrialState

    yielded = []
    with lost.watch(phase_lock(storage, study.study_name)):
        trials = study.get_trials(deepcopy=False)
        live = counted(trials)
        for ours in (t for t in trials if t.number in wanted):
            if DUPLICATE_ATTR in ours.user_attrs:
                yielded.append(ours.number)  # an earlier try of this call got through
                continue
            others = [t.number for t in live if t.number != ours.number and _key(t) == _key(ours)]
            if not others:
                continue
            trial_id = adapter.trial_id(storage, study, ours.number)
            try:
                storage.set_trial_user_attr(trial_id, DUPLICATE_ATTR, min(others))
                storage.set_trial_state_values(trial_id, state=TrialState.FAIL)
            except UpdateFinishedTrialError:
                pass
            yielded.append(ours.number)
    return yielded
