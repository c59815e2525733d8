"""Claiming a slot: under the phase lock, check the budgets, then start a retry or a new slot.

Two things make a claim safe when the storage misbehaves:

- A *claim token* (a uuid drawn once per claim, before any storage call) is written into the
  trial in the same write that creates it, or before a waiting retry turns RUNNING. If a call
  fails and the claim is tried again (``with_retries``), the trial carrying our token is looked
  for first: a write whose acknowledgement was lost is found, not repeated.
- A PostgreSQL lock can be lost mid-claim (``locks.py``). Only the side that lost it can have
  created a duplicate (the other held a valid lock and saw everything committed before it), so
  that side *yields*: under a fresh lock, if another counted trial has the same slot and
  attempt, it marks its own trial ``duplicate_of`` (counted for nothing) and fails it. If both
  sides lost their locks, the fresh lock serialises the two checks: exactly one survives
  (``duplicates.py``).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tuner.orchestrate import _optuna_adapter as adapter
from tuner.orchestrate.budget import Action, Decision, count_trials, decide
from tuner.orchestrate.duplicates import RECONCILE_ATTEMPTS, counted, yield_duplicates
from tuner.orchestrate.failures import enqueue_missing_retries
from tuner.orchestrate.locks import LostLocks, phase_lock
from tuner.orchestrate.phase import PhaseSettings, storage_clock
from tuner.orchestrate.storage import with_retries

TOKEN_ATTR = "claim_token"


@dataclass(frozen=True)
class Claimed:
    """A trial this worker now runs: RUNNING, its heartbeat recorded."""

    trial_id: int
    trial: Any  # its FrozenTrial as claimed


@dataclass(frozen=True)
class NewSlot:
    """What a new slot's trial is created with (see ``Claimer.new_slot``)."""

    params: dict[str, Any] | None
    distributions: dict[str, Any] | None
    fixed_params: dict[str, Any]
    user_attrs: dict[str, Any]


class Claimer:
    """Claims trials of ``study`` for one worker; ``new_slot(slot)`` says how to create a slot."""

    def __init__(self, storage: Any, study: Any, new_slot: Callable[[int], NewSlot]) -> None:
        self.storage, self.study, self.new_slot = storage, study, new_slot
        self.direction = with_retries(lambda: study.direction).name.lower()

    def claim(self, settings: PhaseSettings, window_started_at: float | None = None) -> Claimed | Decision:
        """A claimed trial, or why none was (wait, done, failed, stopped); ``window_started_at``:
        the phase's run window (``phase.window_started_at``), for ``timeout_h``."""
        token = uuid.uuid4().hex  # once per claim: every retry of the claim looks for it
        for _ in range(RECONCILE_ATTEMPTS):
            lost = LostLocks()  # any try of this claim may have lost the lock, not just the last
            result = with_retries(self._claim_once, settings, window_started_at, token, lost)
            if not lost or not isinstance(result, Claimed):
                return result
            if not yield_duplicates(self.storage, self.study, [result.trial.number]):
                return result
            # ours was the duplicate: it is failed and counts for nothing; claim again
            token = uuid.uuid4().hex
        return Decision(Action.WAIT, "the phase lock keeps being lost (the storage connection drops)")

    def would_start(self, settings: PhaseSettings, window_started_at: float | None = None) -> bool:
        """Would a claim start a trial now? Read without the lock and without writing: a hint
        (the claim decides again under the lock), which lets a worker import what a trial needs
        before it claims, and only when there is something to claim (``Worker._serve``)."""
        trials = counted(self.study.get_trials(deepcopy=False))
        now = storage_clock(self.storage) if settings.timeout_h is not None else None
        counts = count_trials(trials, self.direction)
        return decide(counts, settings, window_started_at=window_started_at, now=now).action == Action.START

    def _claim_once(
        self, settings: PhaseSettings, window_started_at: float | None, token: str, lost: LostLocks
    ) -> Claimed | Decision:
        with lost.watch(phase_lock(self.storage, self.study.study_name)):
            trials = self.study.get_trials(deepcopy=False)
            mine = [t for t in trials if t.user_attrs.get(TOKEN_ATTR) == token]
            if mine:  # an earlier try of this claim got through: continue it, create nothing
                return self._resume(mine[0])
            if enqueue_missing_retries(self.storage, self.study, trials):  # a crash lost them
                trials = self.study.get_trials(deepcopy=False)
            return self._claim_new(counted(trials), settings, window_started_at, token)

    def _resume(self, trial: Any) -> Claimed | Decision:
        from optuna.trial import TrialState

        trial_id = adapter.trial_id(self.storage, self.study, trial.number)
        if trial.state == TrialState.RUNNING or self._start(trial_id):
            return Claimed(trial_id, self.storage.get_trial(trial_id))
        return Decision(Action.WAIT, "another worker took the trial")

    def _claim_new(
        self, trials: list[Any], settings: PhaseSettings, window_started_at: float | None, token: str
    ) -> Claimed | Decision:
        from optuna.trial import TrialState, create_trial

        counts = count_trials(trials, self.direction)
        now = storage_clock(self.storage) if settings.timeout_h is not None else None  # one clock
        decision = decide(counts, settings, window_started_at=window_started_at, now=now)
        if decision.action != Action.START:
            return decision
        waiting = sorted(
            (t for t in trials if t.state == TrialState.WAITING),
            key=lambda t: (not t.user_attrs.get("attempt"), t.number),
        )  # retries first: they finish slots already started
        for trial in waiting:
            trial_id = adapter.trial_id(self.storage, self.study, trial.number)
            self.storage.set_trial_user_attr(trial_id, TOKEN_ATTR, token)
            if self._start(trial_id):
                return Claimed(trial_id, self.storage.get_trial(trial_id))
        if counts.slots >= settings.max_trials:
            return Decision(Action.WAIT, "another worker took the last waiting trial")
        slot = self.new_slot(counts.next_slot)
        template = create_trial(
            state=TrialState.WAITING,
            params=slot.params,
            distributions=slot.distributions,
            system_attrs={"fixed_params": slot.fixed_params},
            user_attrs={**slot.user_attrs, TOKEN_ATTR: token},
        )
        trial_id = self.storage.create_new_trial(
            adapter.study_id(self.storage, self.study), template_trial=template
        )
        self._start(trial_id)
        return Claimed(trial_id, self.storage.get_trial(trial_id))

    def _start(self, trial_id: int) -> bool:
        """WAITING -> RUNNING, heartbeat first (a worker killed right after claiming leaves a
        trial that goes stale); False if another worker got there before us."""
        from optuna.exceptions import UpdateFinishedTrialError
        from optuna.trial import TrialState

        self.storage.record_heartbeat(trial_id)
        try:
            return bool(self.storage.set_trial_state_values(trial_id, state=TrialState.RUNNING))
        except UpdateFinishedTrialError:
            return False
