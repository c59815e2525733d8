"""Claiming a slot: under the phase lock, check the budgets, then start a retry or a new slot.

Two things make a claim safe when the storage misbehaves:

- A *claim token* (a uuid drawn once per claim, before any storage call) is written into the
  trial in the same write that creates it, or before a waiting retry turns RUNNING. If a call
  fails and the claim is tried again (``with_retries``), the trial carrying our token is looked
  for first: a write whose acknowledgement was lost is found, not repeated.
- The token alone proves nothing without a lock: two claimers of one waiting retry both write
  theirs, the last write stays, and the *other* one may win the start. So the winner of the
  start also writes ``OWNER_ATTR``; a RUNNING trial is ours if it names our token there, or, with
  no owner written yet, if it bears our token and every try of this claim held the lock (no
  rival could have overwritten it), or if this claim won its start (the compare-and-set
  returned True here; a later write of the claim, the owner's, may be what failed). Through the
  gRPC proxy a start whose own acknowledgement was lost is then left alone: it carries our beat,
  goes stale and is retried (a slot is never run twice; it may run a grace later). On
  PostgreSQL one case stays open: a rival whose lock wait ran out (``locks.lock_wait_s``,
  30 s) claims without the lock, so if it starts the trial between our token and our start,
  our start's acknowledgement is lost, and we look before it writes its owner (milliseconds),
  we take its trial too: three faults at once.
- A PostgreSQL lock can be lost mid-claim (``locks.py``), and Optuna's gRPC storage proxy has
  no lock at all. A claim whose lock was lost, or never held, may have created a trial another
  worker created too (same slot and attempt). Of those, the lowest-numbered counts, by a rule
  every reader applies (``budget.counted``); the claimer then marks the others ``duplicate_of``
  and fails them (``duplicates.py``), and claims again if its own lost. In a phase served
  both ways, a worker with the lock reconciles its new slots too (``LOCKLESS_ATTR``), and the
  claim that finds the round done fails the uncounted RUNNING trials a dead worker left.

Correctness needs no lock, only what every Optuna storage guarantees (optuna 5, paths under
``optuna/``): starting a trial is a compare-and-set (``RDBStorage.set_trial_state_values``,
``storages/_rdb/storage.py``, locks the row and returns False when RUNNING is asked of a trial
no longer WAITING; the gRPC servicer passes that False on), and finishing is first-writer-wins
(``check_trial_is_updatable``, ``storages/_base.py``, raises ``UpdateFinishedTrialError``;
through the proxy as ``FAILED_PRECONDITION``, raised again by its client). The lock, where there
is one, only keeps duplicates from being made: without it, W workers claiming at once pick among
the first free slots at random (``_spread_slot``) so that few collide.
"""

from __future__ import annotations

import random
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from tuner.orchestrate import _optuna_adapter as adapter
from tuner.orchestrate.budget import Action, Decision, count_trials, decide, slot_key
from tuner.orchestrate.duplicates import RECONCILE_ATTEMPTS, counted, yield_duplicates
from tuner.orchestrate.failures import enqueue_missing_retries
from tuner.orchestrate.heartbeat import HeartbeatThread, record_beat
from tuner.orchestrate.locks import LostLocks, has_lock, phase_lock
from tuner.orchestrate.phase import PhaseSettings, storage_clock
from tuner.orchestrate.storage_retries import with_retries

TOKEN_ATTR = "claim_token"
OWNER_ATTR = "claim_owner"  # system attribute: the token of the claim that started the trial
# system attribute of a trial created without a lock (through the gRPC proxy): in its phase, a
# worker holding the lock reconciles the new slots it creates too (``Claimer._claim``)
LOCKLESS_ATTR = "created_without_lock"
MAX_SPREAD = 1024
CREATED_TWICE = Decision(Action.WAIT, "another worker created the same slot at once")


@dataclass(frozen=True)
class Claimed:
    """A trial this worker now runs: RUNNING, its heartbeat recorded."""

    trial_id: int
    trial: Any  # its FrozenTrial as claimed
    # beating since the trial turned RUNNING (``Claimer(beat_s=...)``): the worker runs it on
    beat: HeartbeatThread | None = field(default=None, compare=False)


@dataclass(frozen=True)
class NewSlot:
    """What a new slot's trial is created with (see ``Claimer.new_slot``)."""

    params: dict[str, Any] | None
    distributions: dict[str, Any] | None
    fixed_params: dict[str, Any]
    user_attrs: dict[str, Any]


class Claimer:
    """Claims trials of ``study`` for one worker; ``new_slot(slot)`` says how to create a slot."""

    def __init__(
        self,
        storage: Any,
        study: Any,
        new_slot: Callable[[int], NewSlot],
        *,
        beat_s: float | None = None,
        code: str | None = None,
    ) -> None:
        """``code``: the digest of the workload code this worker runs; final failures of other
        code are run again (``failures.missing_retries``).

        ``beat_s``: beat each trial this claimer starts, every ``beat_s``, from the moment it
        is RUNNING (the thread goes with ``Claimed``). Without it a claim whose later calls were
        retried (a lock lost, connections cut: seconds of backoff) left its trial with only the
        start's beat, and another worker declared the live trial dead (seen under chaos and load:
        a retry spent, or with ``max_retries: 0`` the slot lost)."""
        self.storage, self.study, self.new_slot = storage, study, new_slot
        self.direction = with_retries(lambda: study.direction).name.lower()
        self._spread = 1  # without a lock: how many free slots a new slot is drawn from, at least
        self.running = 0  # RUNNING trials of the phase as the last claim counted them
        self.beat_s = beat_s
        self.code = code
        self.window: float | None = None  # the run window of the last claim (``phase.WINDOW_ATTR``)
        self._beating: dict[int, HeartbeatThread] = {}  # trial id -> its beat, until handed over
        # trial ids whose start (the compare-and-set to RUNNING) this claim won: ours, whatever
        # token a rival wrote since, even with no owner written (that write may be what failed)
        self._won: set[int] = set()
        # the last claim created a new slot in a phase where workers without a lock create
        # slots too: its snapshot may predate theirs, so it is reconciled like theirs
        self._beside_lockless = False
        # the trials as the last claim read them (the snapshot its decision was made on)
        self._seen: list[Any] = []

    def claim(self, settings: PhaseSettings, window_started_at: float | None = None) -> Claimed | Decision:
        """A claimed trial, or why none was (wait, done, failed, stopped); ``window_started_at``:
        the phase's run window (``phase.window_started_at``), for ``timeout_h``."""
        self.window = window_started_at
        try:
            result = self._claim(settings, window_started_at)
            beat = self._beating.pop(result.trial_id, None) if isinstance(result, Claimed) else None
            return result if beat is None else Claimed(result.trial_id, result.trial, beat)
        finally:
            for other in self._beating.values():  # started, then found a duplicate, or lost
                other.stop()
            self._beating.clear()

    def _claim(self, settings: PhaseSettings, window_started_at: float | None) -> Claimed | Decision:
        token = uuid.uuid4().hex  # once per claim: every retry of the claim looks for it
        self._won = set()
        for _ in range(RECONCILE_ATTEMPTS):
            lost = LostLocks()  # any try of this claim may have lost the lock, not just the last
            enqueued: list[int] = []  # retries this claim enqueued for trials a crash left without
            result = with_retries(self._claim_once, settings, window_started_at, token, lost, enqueued)
            if isinstance(result, Decision) and result.action == Action.DONE:
                self._set_aside_uncounted_running()
            # a retry enqueued, or a slot created, under a good lock is reconciled all the same
            # when workers through the proxy (no lock) may have made the same one meanwhile
            if not lost and not enqueued and not self._beside_lockless:
                return result
            ours = [result.trial.number] if isinstance(result, Claimed) else []
            collided = set(yield_duplicates(self.storage, self.study, ours + enqueued)) & set(ours)
            if collided or result == CREATED_TWICE:  # spread wider next time; narrower slowly
                self._spread = min(MAX_SPREAD, self._spread * 2)
            elif ours:
                self._spread = max(1, self._spread - 1)
            if not collided:
                return result
            # ours was the duplicate: it is failed and counts for nothing; claim again
            token = uuid.uuid4().hex
        if not has_lock(self.storage):
            return Decision(Action.WAIT, "other workers kept claiming the same slots at once")
        return Decision(Action.WAIT, "the phase lock keeps being lost (the storage connection drops)")

    def _set_aside_uncounted_running(self) -> None:
        """The round is done, yet a RUNNING trial the count leaves out may remain: a duplicate
        whose worker died before marking it. Nobody reaps a finished round, so it is failed as
        the duplicate it is here (read off the claim's snapshot: no extra read when none is)."""
        from optuna.trial import TrialState

        live = {t.number for t in counted(self._seen)}
        uncounted = [t.number for t in self._seen if t.state == TrialState.RUNNING and t.number not in live]
        if uncounted:
            yield_duplicates(self.storage, self.study, uncounted)

    def would_start(self, settings: PhaseSettings, window_started_at: float | None = None) -> bool:
        """Would a claim start a trial now? Read without the lock and without writing: a hint
        (the claim decides again under the lock), which lets a worker import what a trial needs
        before it claims, and only when there is something to claim (``Worker._serve``)."""
        trials = counted(self.study.get_trials(deepcopy=False))
        now = storage_clock(self.storage) if settings.timeout_h is not None else None
        counts = count_trials(trials, self.direction)
        return decide(counts, settings, window_started_at=window_started_at, now=now).action == Action.START

    def _claim_once(
        self,
        settings: PhaseSettings,
        window_started_at: float | None,
        token: str,
        lost: LostLocks,
        enqueued: list[int],
    ) -> Claimed | Decision:
        self._beside_lockless = False
        with lost.watch(phase_lock(self.storage, self.study.study_name, bounded=True)):
            trials = self._seen = self.study.get_trials(deepcopy=False)
            mine = [t for t in trials if _is_ours(t, token, trust_token=has_lock(self.storage) and not lost)]
            mine = mine or self._started_here(trials, token)
            if mine:  # an earlier try of this claim got through: continue it, create nothing
                return self._resume(mine[0], token)
            # a crash lost them, or the code they failed in has changed since
            retries = enqueue_missing_retries(self.storage, self.study, trials, self.code, window_started_at)
            if retries:
                enqueued += retries
                trials = self._seen = self.study.get_trials(deepcopy=False)
            return self._claim_new(counted(trials), settings, window_started_at, token)

    def _started_here(self, trials: list[Any], token: str) -> list[Any]:
        """The RUNNING trial an earlier try of this claim started (won the compare-and-set)
        before a later write of it failed: without a lock its token proves nothing
        (``_is_ours``), but the won start does. Left alone, it would go stale with nobody
        training it, and the reaper would spend a retry on it (seen through the gRPC proxy with
        connections cut: the owner's write after the start failed)."""
        from optuna.trial import TrialState

        if not self._won:
            return []
        candidates = [
            t for t in trials if t.state == TrialState.RUNNING and t.user_attrs.get(TOKEN_ATTR) == token
        ]
        return [t for t in candidates if adapter.trial_id(self.storage, self.study, t.number) in self._won]

    def _resume(self, trial: Any, token: str) -> Claimed | Decision:
        from optuna.trial import TrialState

        trial_id = adapter.trial_id(self.storage, self.study, trial.number)
        if trial.state == TrialState.RUNNING:
            self._keep_beating(trial_id)  # started by an earlier try (whose beat may have gone)
            if trial_id in self._won and trial.system_attrs.get(OWNER_ATTR) != token:
                self.storage.set_trial_system_attr(trial_id, OWNER_ATTR, token)  # what failed
            return Claimed(trial_id, self.storage.get_trial(trial_id))
        if self._start(trial_id, token):
            return Claimed(trial_id, self.storage.get_trial(trial_id))
        return Decision(Action.WAIT, "another worker took the trial")

    def _claim_new(
        self, trials: list[Any], settings: PhaseSettings, window_started_at: float | None, token: str
    ) -> Claimed | Decision:
        from optuna.exceptions import UpdateFinishedTrialError
        from optuna.trial import TrialState, create_trial

        counts = count_trials(trials, self.direction)
        self.running = counts.running
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
            try:
                self.storage.set_trial_user_attr(trial_id, TOKEN_ATTR, token)
            except UpdateFinishedTrialError:  # failed as a duplicate since we read it
                continue
            if self._start(trial_id, token):
                return Claimed(trial_id, self.storage.get_trial(trial_id))
        if counts.slots >= settings.max_trials:
            return Decision(Action.WAIT, "another worker took the last waiting trial")
        spread = max(counts.running + 1, self._spread)
        locked = has_lock(self.storage)
        number = _first_free_slot(trials) if locked else _spread_slot(trials, spread, settings)
        slot = self.new_slot(number)
        self._beside_lockless = locked and any(LOCKLESS_ATTR in t.system_attrs for t in trials)
        template = create_trial(
            state=TrialState.WAITING,
            params=slot.params,
            distributions=slot.distributions,
            system_attrs={"fixed_params": slot.fixed_params, **({} if locked else {LOCKLESS_ATTR: True})},
            user_attrs={**slot.user_attrs, TOKEN_ATTR: token},
        )
        trial_id = self.storage.create_new_trial(
            adapter.study_id(self.storage, self.study), template_trial=template
        )
        if not self._start(trial_id, token):  # without a lock: failed at once as another's duplicate
            return CREATED_TWICE
        return Claimed(trial_id, self.storage.get_trial(trial_id))

    def _start(self, trial_id: int, token: str) -> bool:
        """WAITING -> RUNNING, heartbeat first (a worker killed right after claiming leaves a
        trial that goes stale), then ``OWNER_ATTR`` (the start is the one compare-and-set, and
        the token may be a rival's by now); False if another worker got there before us."""
        from optuna.exceptions import UpdateFinishedTrialError
        from optuna.trial import TrialState

        try:
            record_beat(self.storage, trial_id, first=True)  # an attribute beat: refused if finished
            if not self.storage.set_trial_state_values(trial_id, state=TrialState.RUNNING):
                return False
            self._won.add(trial_id)
            self._keep_beating(trial_id)  # before anything that may fail and be retried
            self.storage.set_trial_system_attr(trial_id, OWNER_ATTR, token)
            return True
        except UpdateFinishedTrialError:  # failed as a duplicate, or finished elsewhere
            return False

    def _keep_beating(self, trial_id: int) -> None:
        if self.beat_s is not None and trial_id not in self._beating:
            self._beating[trial_id] = HeartbeatThread(self.storage, trial_id, self.beat_s).__enter__()


def _is_ours(trial: Any, token: str, *, trust_token: bool) -> bool:
    """Whether an earlier try of the claim ``token`` got ``trial`` (see the module docstring):
    started and owned, or not started yet, or started with no owner written and no rival
    possible (``trust_token``: every try held the lock)."""
    from optuna.trial import TrialState

    owner = trial.system_attrs.get(OWNER_ATTR)
    if owner is not None or trial.user_attrs.get(TOKEN_ATTR) != token:
        return owner == token
    return trial.state == TrialState.WAITING or (trust_token and trial.state == TrialState.RUNNING)


def _first_free_slot(trials: list[Any]) -> int:
    """Under the lock, the lowest slot no trial has: not the highest + 1. Workers without the
    lock (through the gRPC proxy) in the same phase take free slots at random (``_spread_slot``)
    and may leave a hole below the highest; a slot past the budget's last would have no point
    in a round of fixed points (its plan holds slots 0 to N-1), and the hole none at all."""
    used = {slot_key(t)[0] for t in trials}
    return next(slot for slot in range(len(used) + 1) if slot not in used)


def _spread_slot(trials: list[Any], spread: int, settings: PhaseSettings) -> int:
    """Without a lock, one of the first ``spread`` free slots at random, not the first: W
    workers that claim at once (a phase's start) then mostly create different slots. With the
    first, all would create the same one and W - 1 would yield and claim again, W times over.

    ``spread``: the running trials + 1 (about the workers, when each runs a trial), or more
    after collisions: a claimer whose slot was taken doubles its own, one that got its slot
    narrows it by one (exponential backoff over slots instead of time, with a slow decrease so
    that it settles where collisions are rare, not at one in two). A slot may stay free a
    while: it is filled later (slots are counted, not ranged), and fixed points go by slot number.
    """
    used = {slot_key(t)[0] for t in trials}
    free = [s for s in range(min(settings.max_trials, len(used) + spread)) if s not in used][:spread]
    return random.choice(free) if free else max(used, default=-1) + 1
