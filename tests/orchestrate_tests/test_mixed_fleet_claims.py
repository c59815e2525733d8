"""New slots in a phase served both on the database (with the phase lock) and through the gRPC
proxy (without one), and a round that ends while a dead worker's duplicate is still RUNNING.

The storage is real (SQLite); ``ThroughProxy`` shows it as a proxied worker sees it, and
``LostAck(times=0, before=...)`` lets the proxied worker act at the worst moment of the other's
claim, between its look at the trials and its write.
"""

from __future__ import annotations

from pathlib import Path

from tests.orchestrate_tests.storage_faults import (
    CountingStorage,
    LostAck,
    ThroughProxy,
    blank_slot,
    claim_phase,
)
from tuner.orchestrate._optuna_adapter import study_id
from tuner.orchestrate.budget import Action, Decision
from tuner.orchestrate.claim import Claimed, Claimer


def test_a_slot_created_under_the_lock_while_a_proxied_worker_created_it_too_yields(tmp_path: Path) -> None:
    """A proxied worker runs slot 0. A worker on the database looks at the trials and picks slot
    1; before it creates it, the proxied worker creates slot 1 too (it holds no lock to wait
    on). The database worker's copy is the later one: it must yield (failed as a duplicate), not
    train the same slot beside the other. Left unreconciled, it was waste at best, and when its
    worker died a RUNNING trial the round ended without (the fleet test: nobody reaps it)."""
    storage, study, settings = claim_phase(tmp_path, max_trials=2)
    proxied = ThroughProxy(storage)
    assert isinstance(Claimer(proxied, study, blank_slot).claim(settings), Claimed)
    raced: list[object] = []

    def proxied_worker_creates_first(*args: object, **kwargs: object) -> None:
        if not raced:
            raced.append(Claimer(proxied, study, blank_slot).claim(settings))

    on_database = LostAck(storage, "create_new_trial", times=0, before=proxied_worker_creates_first)
    result = Claimer(on_database, study, blank_slot).claim(settings)
    assert isinstance(raced[0], Claimed) and raced[0].trial.user_attrs["slot"] == 1
    assert isinstance(result, Decision) and result.action == Action.WAIT  # both slots are taken
    trials = study.get_trials()
    fates = [(t.user_attrs["slot"], t.state.name) for t in trials]
    assert fates == [(0, "RUNNING"), (1, "RUNNING"), (1, "FAIL")]
    assert trials[2].user_attrs["duplicate_of"] == trials[1].number


def test_a_slot_created_under_the_lock_with_no_proxied_worker_in_the_phase_is_not_read_again(
    tmp_path: Path,
) -> None:
    """The reconciliation costs a read of every trial; a phase served on the database alone
    never needs it, and each claim reads the trials once."""
    import optuna

    storage, phase, settings = claim_phase(tmp_path)
    counting = CountingStorage(storage)
    study = optuna.load_study(study_name=phase.study_name, storage=counting)
    for _ in range(2):
        assert isinstance(Claimer(counting, study, blank_slot).claim(settings), Claimed)
    assert counting.calls["get_all_trials"] == 2


def test_a_round_that_ends_sets_aside_a_duplicate_whose_worker_died_before_marking_it(tmp_path: Path) -> None:
    """Slot 0 completed; a second trial of slot 0 (a duplicate nobody marked: its worker died
    between creating it and reconciling) is still RUNNING. The claim that finds the round done
    fails it as the duplicate it is: otherwise it stays RUNNING after the round, for the reaper
    of a round that is over never runs (seen in the fleet test, a worker killed mid-claim)."""
    from optuna.trial import TrialState

    storage, study, settings = claim_phase(tmp_path, max_trials=1)
    first = Claimer(storage, study, blank_slot).claim(settings)
    assert isinstance(first, Claimed)
    orphan = storage.create_new_trial(study_id(storage, study), template_trial=first.trial)
    storage.set_trial_state_values(first.trial_id, state=TrialState.COMPLETE, values=[1.0])
    result = Claimer(storage, study, blank_slot).claim(settings)
    assert isinstance(result, Decision) and result.action == Action.DONE
    left = storage.get_trial(orphan)
    assert left.state == TrialState.FAIL and left.user_attrs["duplicate_of"] == first.trial.number
