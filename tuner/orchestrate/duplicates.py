"""Trials that lost a race for their slot: how they are told apart and made to yield.

Two trials can fill one (slot, attempt) when nothing serialised their creation: a PostgreSQL
lock lost mid-write (``locks.py``), or a storage with no lock at all (Optuna's gRPC proxy:
``locks.phase_lock``). The rule needs no lock: of the trials with one key, the lowest-numbered
not marked ``duplicate_of`` is the one that counts (``budget.counted``, which every reader
applies, so nothing is counted twice even before a duplicate is marked). Marking only stops the
waste: the others are marked ``duplicate_of`` and failed (a running one's worker sees its trial
finished at its next heartbeat and stops it, recording nothing). Any process may mark any
duplicate; two that mark the same one agree, since they apply the same rule.

Used both when claiming (``claim.py``) and when failing a trial enqueues its retry
(``failures.py``): it lives apart from both so that neither imports the other.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from tuner.orchestrate import _optuna_adapter as adapter
from tuner.orchestrate.budget import DUPLICATE_ATTR, counted, slot_key
from tuner.orchestrate.storage_retries import with_retries

__all__ = ["RECONCILE_ATTEMPTS", "counted", "yield_duplicates"]

RECONCILE_ATTEMPTS = 5  # claims in a row that may each find theirs a duplicate before waiting


def yield_duplicates(storage: Any, study: Any, numbers: Iterable[int]) -> list[int]:
    """After a claim or an enqueue that nothing serialised: mark every duplicate of the keys of
    trials ``numbers`` (see the module docstring). Returns those of ``numbers`` that yielded."""
    return with_retries(_yield_once, storage, study, set(numbers))


def _yield_once(storage: Any, study: Any, wanted: set[int]) -> list[int]:
    from optuna.exceptions import UpdateFinishedTrialError
    from optuna.trial import TrialState

    trials = study.get_trials(deepcopy=False)
    survivors = {slot_key(t): t.number for t in counted(trials)}
    keys = {slot_key(t) for t in trials if t.number in wanted}
    yielded = [t.number for t in trials if t.number in wanted and survivors.get(slot_key(t)) != t.number]
    for trial in trials:
        key = slot_key(trial)
        if key not in keys or survivors[key] == trial.number:
            continue
        if trial.state.is_finished():
            continue  # a finished duplicate cannot be marked; ``counted`` leaves it out all the same
        trial_id = adapter.trial_id(storage, study, trial.number)
        try:
            # two writes: a retry after a cut between them finds the mark and still owes the FAIL
            # (its worker has given the trial up: left RUNNING, nothing would ever finish it)
            if DUPLICATE_ATTR not in trial.user_attrs:
                storage.set_trial_user_attr(trial_id, DUPLICATE_ATTR, survivors[key])
            storage.set_trial_state_values(trial_id, state=TrialState.FAIL)
        except UpdateFinishedTrialError:
            pass  # it finished meanwhile: left out by ``counted`` all the same
    return sorted(yielded)
