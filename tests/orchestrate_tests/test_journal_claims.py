"""The claim protocol on Optuna's ``JournalStorage`` (a journal file), the third kind of storage
issue 20 names beside the databases and the gRPC proxy: no SQL, no lock, no heartbeat table, so
claims run lock-free (``claim.py``) and trials beat through an attribute. What must hold there
as it does elsewhere: every slot claimed, run and counted exactly once.

Optuna's journal pops a WAITING trial by replay: the first RUNNING record wins
(``storages/journal/_storage.py``, ``set_trial_state_values`` returns whether this worker owns
the trial), and a finished trial refuses writes, as on RDB. 8 processes x 200 trials here take
about 3 s (220-240 trials created: the rest lost a race for their slot and were yielded).
tuner's commands do not take a journal as ``storage`` yet: this proves the protocol, at the
level of ``Claimer``, as ``test_grpc_claims.py`` does for the proxy.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import time
from pathlib import Path
from typing import Any

from tuner.orchestrate import count_trials
from tuner.orchestrate.budget import DUPLICATE_ATTR, counted

TRIALS, PROCESSES = 200, 8


def _journal(path: Path) -> Any:
    from optuna.storages import JournalStorage
    from optuna.storages.journal import JournalFileBackend

    return JournalStorage(JournalFileBackend(str(path)))


def _slot(slot: int) -> Any:
    from tuner.orchestrate.claim import NewSlot

    return NewSlot(params=None, distributions=None, fixed_params={}, user_attrs={"slot": slot, "attempt": 0})


def _claim_until_done(path: Path, name: str) -> int:
    """One process claiming and telling trivial trials until the phase is done; how many it told."""
    import optuna
    from optuna.exceptions import UpdateFinishedTrialError

    from tuner.orchestrate.budget import Action, Decision
    from tuner.orchestrate.claim import Claimer
    from tuner.orchestrate.phase import PhaseSettings

    storage = _journal(path)
    study = optuna.load_study(study_name=name, storage=storage)
    settings = PhaseSettings.from_attrs(study.user_attrs)
    claimer, told = Claimer(storage, study, _slot), 0
    while True:
        claimed = claimer.claim(settings)
        if isinstance(claimed, Decision):
            if claimed.action in (Action.DONE, Action.FAILED):
                return told
            assert claimed.action == Action.WAIT, claimed
            time.sleep(0.01)
            continue
        with contextlib.suppress(UpdateFinishedTrialError):  # a duplicate failed meanwhile
            storage.set_trial_state_values(
                claimed.trial_id, optuna.trial.TrialState.COMPLETE, [float(claimed.trial.user_attrs["slot"])]
            )
        told += 1


def test_processes_claiming_through_a_journal_file_count_each_slot_once(tmp_path: Path) -> None:
    import optuna

    from tuner.orchestrate.locks import has_lock
    from tuner.orchestrate.phase import PhaseSettings, start_phase

    path = tmp_path / "journal.log"
    storage = _journal(path)
    assert not has_lock(storage)  # the lock-free protocol, as through the gRPC proxy
    settings = PhaseSettings.build(TRIALS, max_failed=TRIALS + 1)  # nothing here proves healthy
    start_phase(storage, "journal", "round-1", settings, direction="minimize")
    with multiprocessing.get_context("spawn").Pool(PROCESSES) as pool:
        told = pool.starmap(_claim_until_done, [(path, "journal/round-1")] * PROCESSES, chunksize=1)
    trials = optuna.load_study(study_name="journal/round-1", storage=_journal(path)).trials
    live = counted(trials)
    assert sorted(t.user_attrs["slot"] for t in live) == list(range(TRIALS))  # each slot once
    assert {t.state.name for t in live} == {"COMPLETE"}
    assert all(t.value == t.user_attrs["slot"] for t in live)
    assert not [t for t in trials if t.state.name in ("RUNNING", "WAITING")]
    for trial in (t for t in trials if t not in live):  # lost a race for its slot
        assert DUPLICATE_ATTR in trial.user_attrs or trial.state.name == "COMPLETE", trial
    counts = count_trials(trials)
    assert (counts.slots, counts.completed, counts.failed, counts.running) == (TRIALS, TRIALS, 0, 0)
    assert sum(told) >= TRIALS and min(told) > 0, told  # every process took part
