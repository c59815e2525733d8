"""The worker protocol under storage faults, once a trial ends: results told twice or too late,
failures whose acknowledgement was lost, retries a crash lost; each trial still ends once, and
each failed slot gets exactly the retry it is owed (the claims themselves: ``test_protocol.py``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.orchestrate_tests.storage_faults import CountingStorage, LostAck, blank_slot, claim_phase
from tuner.orchestrate.budget import Decision
from tuner.orchestrate.claim import Claimed, Claimer
from tuner.orchestrate.failures import FailureReason, fail_trial
from tuner.orchestrate.messages import Finished
from tuner.orchestrate.record import Recorder


def test_a_result_told_for_a_trial_another_worker_failed_is_ignored(tmp_path: Path) -> None:
    storage, study, settings = claim_phase(tmp_path)
    claimed = Claimer(storage, study, blank_slot).claim(settings)
    assert isinstance(claimed, Claimed)
    fail_trial(storage, study, claimed.trial_id, FailureReason.KILLED, "stale", settings)
    done = Finished("completed", "", 40, 0.5, 40, None, 1.0)
    Recorder(storage, study, claimed.trial_id, claimed.trial.number, attempt=0, last_step=40).record(
        done, tmp_path, settings
    )  # no exception: the worker that was cut off moves on
    assert study.get_trials()[0].state.name == "FAIL"
    # a retried tell whose acknowledgement was lost is harmless too
    study.tell(claimed.trial.number, 0.5, skip_if_finished=True)


def test_no_retry_is_queued_when_the_owner_completed_the_trial_first(tmp_path: Path) -> None:
    storage, study, settings = claim_phase(tmp_path)
    claimed = Claimer(storage, study, blank_slot).claim(settings)
    assert isinstance(claimed, Claimed)

    def owner_completes(trial_id: int, key: str, value: Any) -> None:
        if key == "retried":  # while the stale-checker writes why it fails the trial
            study.tell(claimed.trial.number, 0.25)

    racing = LostAck(storage, "set_trial_user_attr", times=0, before=owner_completes)
    assert not fail_trial(racing, study, claimed.trial_id, FailureReason.KILLED, "stale", settings)
    states = [t.state.name for t in study.get_trials()]
    assert states == ["COMPLETE"]  # no WAITING retry for a slot that completed


def test_a_retry_lost_by_a_crash_is_enqueued_by_the_next_claim(tmp_path: Path) -> None:
    from optuna.trial import TrialState

    storage, study, settings = claim_phase(tmp_path, max_trials=1)
    claimed = Claimer(storage, study, blank_slot).claim(settings)
    assert isinstance(claimed, Claimed)
    # what fail_trial had done when its worker died: why, "retried", FAIL; no retry yet
    for key, value in {"failure_reason": "crashed", "error": "boom", "retried": True}.items():
        storage.set_trial_user_attr(claimed.trial_id, key, value)
    storage.set_trial_state_values(claimed.trial_id, state=TrialState.FAIL)
    retry = Claimer(storage, study, blank_slot).claim(settings)
    assert isinstance(retry, Claimed)
    assert retry.trial.user_attrs["retry_of"] == claimed.trial.number
    assert retry.trial.user_attrs["attempt"] == 1 and retry.trial.user_attrs["slot"] == 0
    assert isinstance(Claimer(storage, study, blank_slot).claim(settings), Decision)  # only one retry


def test_a_phase_with_a_lost_retry_is_not_finished_for_a_rerun(tmp_path: Path) -> None:
    """``run_phase`` starts no worker on a re-run of a finished phase: "finished" must not miss a
    slot whose retry a crash lost (only a worker's claim enqueues it)."""
    from optuna.trial import TrialState

    from tuner.orchestrate.progress import PhaseWatcher

    storage, study, settings = claim_phase(tmp_path, max_trials=1)
    watcher = PhaseWatcher(study, tmp_path)
    assert not watcher.snapshot().nothing_to_run  # a slot never started
    claimed = Claimer(storage, study, blank_slot).claim(settings)
    assert isinstance(claimed, Claimed) and not watcher.snapshot().nothing_to_run  # running
    for key, value in {"failure_reason": "crashed", "error": "boom", "retried": True}.items():
        storage.set_trial_user_attr(claimed.trial_id, key, value)
    storage.set_trial_state_values(claimed.trial_id, state=TrialState.FAIL)
    lost = watcher.snapshot()
    assert lost.decision().action == "done"  # the budget rule alone would call it finished
    assert not lost.nothing_to_run  # but its retry is owed
    retry = Claimer(storage, study, blank_slot).claim(settings)
    assert isinstance(retry, Claimed)
    storage.set_trial_state_values(retry.trial_id, state=TrialState.COMPLETE, values=[0.5])
    assert watcher.snapshot().nothing_to_run


def test_a_lost_fail_acknowledgement_still_queues_exactly_one_retry(tmp_path: Path) -> None:
    from tuner.orchestrate.storage_retries import with_retries

    storage, study, settings = claim_phase(tmp_path)
    claimed = Claimer(storage, study, blank_slot).claim(settings)
    assert isinstance(claimed, Claimed)
    lossy = LostAck(storage, "set_trial_state_values")
    with_retries(fail_trial, lossy, study, claimed.trial_id, FailureReason.CRASHED, "boom", settings)
    waiting = [t for t in study.get_trials() if t.state.name == "WAITING"]
    assert [t.user_attrs["retry_of"] for t in waiting] == [claimed.trial.number]


def test_a_result_whose_acknowledgement_was_lost_is_told_again_harmlessly(tmp_path: Path) -> None:
    storage, study, settings = claim_phase(tmp_path)
    claimed = Claimer(storage, study, blank_slot).claim(settings)
    assert isinstance(claimed, Claimed)
    lossy = LostAck(storage, "set_trial_state_values")
    done = Finished("completed", "", 40, 0.5, 40, None, 1.0)
    Recorder(
        lossy, study, claimed.trial_id, claimed.trial.number, attempt=0, last_step=40, frozen=claimed.trial
    ).record(done, tmp_path, settings)
    (trial,) = study.get_trials()
    assert trial.state.name == "COMPLETE" and trial.value == 0.5


def test_a_completed_trial_is_finished_in_one_write_after_its_sampler_hook(tmp_path: Path) -> None:
    """``Study.tell(number, value)`` cost five storage round trips per trial (the trial's id
    looked up by its number, the whole trial read, the write, then both reads again for a copy
    nobody read); the result is now one write, with what tell did besides: the sampler's
    ``after_trial`` hook first, and the attributes written before the trial is finished."""
    import optuna

    storage, study, settings = claim_phase(tmp_path)
    claimed = Claimer(storage, study, blank_slot).claim(settings)
    assert isinstance(claimed, Claimed)
    hooked: list[tuple[int, str, list[float] | None]] = []

    class Hooked(optuna.samplers.RandomSampler):
        def after_trial(self, study: Any, trial: Any, state: Any, values: Any) -> None:
            hooked.append((trial.number, state.name, values))

    counting = CountingStorage(storage)
    study = optuna.load_study(study_name="s/round-1", storage=counting, sampler=Hooked())
    counting.calls.clear()
    done = Finished("completed", "", 40, 0.5, 40, None, 1.0)
    Recorder(
        counting, study, claimed.trial_id, claimed.trial.number, attempt=0, last_step=40, frozen=claimed.trial
    ).record(done, tmp_path, settings)
    assert hooked == [(claimed.trial.number, "COMPLETE", [0.5])]
    attrs = counting.calls.pop("set_trial_user_attr")
    assert dict(counting.calls) == {"set_trial_state_values": 1}, counting.calls  # nothing read
    (trial,) = study.get_trials()
    assert trial.state.name == "COMPLETE" and trial.value == 0.5
    assert attrs == len({"worker_rss_mb", "train_s", "best_step", "final_step"})
    assert trial.user_attrs["best_step"] == 40  # written before the trial was finished
