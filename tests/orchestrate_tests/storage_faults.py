"""Real storages that misbehave on cue, and a phase to claim from: the worker protocol's tests.

A fault is injected around a real storage (SQLite, or the real PostgreSQL where it is set up),
not a mock of one: a call that "loses its acknowledgement" is the real call, committed, followed
by the error a dropped connection raises, so what the protocol must survive is what a database
really does.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

from tuner.orchestrate import PhaseSettings, open_storage, start_phase
from tuner.orchestrate.claim import NewSlot


class LostAck:
    """A real storage whose chosen method commits, then raises as if the connection dropped.

    ``before``: called first (a stall); ``when``: only the calls whose arguments it accepts
    misbehave (one attribute's write, not the heartbeat's of the same method)."""

    def __init__(
        self, storage: Any, method: str, times: int = 1, before: Any = None, when: Any = None
    ) -> None:
        self._storage, self._method, self._times = storage, method, times
        self._before, self._when = before, when

    def __getattr__(self, name: str) -> Any:
        real = getattr(self._storage, name)
        if name != self._method:
            return real

        def call(*args: Any, **kwargs: Any) -> Any:
            if self._when is not None and not self._when(*args, **kwargs):
                return real(*args, **kwargs)
            if self._before is not None:
                self._before(*args, **kwargs)
            result = real(*args, **kwargs)
            if self._times > 0:
                self._times -= 1
                from sqlalchemy.exc import OperationalError

                raise OperationalError("lost acknowledgement", {}, Exception("connection dropped"))
            return result

        return call


def claim_phase(tmp_path: Path, **budget: Any) -> tuple[Any, Any, PhaseSettings]:
    """A fresh SQLite phase ``s/round-1`` of ``max_trials`` (4) slots whose failure budget never
    stops a claim: (storage, study, settings)."""
    storage = open_storage(f"sqlite:///{tmp_path / 'study.db'}", heartbeat_interval_s=1, grace_period_s=60)
    trials = budget.pop("max_trials", 4)
    settings = PhaseSettings.build(trials, max_failed=trials + 1, **budget)  # unproven trials may run
    study = start_phase(storage, "s", "round-1", settings, direction="minimize")
    return storage, study, settings


def blank_slot(slot: int) -> NewSlot:
    """Slot ``slot`` with no fixed point (the sampler would choose): what a claim creates."""
    return NewSlot(params=None, distributions=None, fixed_params={}, user_attrs={"slot": slot, "attempt": 0})


class FailsOnceWithoutLock:
    """A real storage with no phase lock (as through Optuna's gRPC proxy) whose chosen method
    fails once before it reaches the database (the connection was cut)."""

    def __init__(self, storage: Any, method: str) -> None:
        self._storage, self._method, self._failed = storage, method, False

    def __getattr__(self, name: str) -> Any:
        if name == "url":
            raise AttributeError(name)
        real = getattr(self._storage, name)
        if name != self._method or self._failed:
            return real

        def call(*args: Any, **kwargs: Any) -> Any:
            from sqlalchemy.exc import OperationalError

            self._failed = True
            raise OperationalError("connection cut", {}, Exception("terminating connection"))

        return call


class CountingStorage:
    """A real storage that counts the calls made to each of its methods."""

    def __init__(self, storage: Any) -> None:
        self._storage, self.calls = storage, Counter()

    def __getattr__(self, name: str) -> Any:
        real = getattr(self._storage, name)
        if not callable(real):
            return real

        def call(*args: Any, **kwargs: Any) -> Any:
            self.calls[name] += 1
            return real(*args, **kwargs)

        return call


class ThroughProxy:
    """A real storage as a worker through Optuna's gRPC proxy sees it: no heartbeat table, no
    phase lock (the proxy passes the storage API alone)."""

    def __init__(self, storage: object) -> None:
        self._storage = storage

    def __getattr__(self, name: str) -> object:
        if name in ("record_heartbeat", "url"):
            raise AttributeError(name)
        return getattr(self._storage, name)
