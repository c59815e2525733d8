"""A phase seen from outside: counts, best so far, what each local worker is doing.

Read only from the storage and the workers' status files, so the view is the same whichever
process (or machine) ran the trials. A display must never take the work down: ``refresh``
never raises; when the storage cannot be read it hands back the last view, marked stale.
"""

from __future__ import annotations

import dataclasses
import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tuner.orchestrate.budget import Decision, PhaseCounts, count_trials, decide
from tuner.orchestrate.phase import PhaseSettings, window_started_at
from tuner.orchestrate.storage import with_retries

REFRESH_ATTEMPTS = 2  # a refresh comes again within a second: no need to wait out a long backoff


@dataclass
class PhaseSnapshot:
    counts: PhaseCounts
    settings: PhaseSettings
    workers: list[dict[str, Any]] = field(default_factory=list)
    newly_finished: list[Any] = field(default_factory=list)  # FrozenTrials finished since the last look
    trials: list[Any] = field(default_factory=list)  # every FrozenTrial of the phase
    stale_since: float | None = None  # wall-clock time since which the storage could not be read
    window_started_at: float | None = None  # the phase's run window began (timeout_h counts from it)

    @property
    def best(self) -> Any | None:
        """The best trial (a FrozenTrial), if any has completed with a finite value."""
        number = self.counts.best_number
        return next((t for t in self.trials if t.number == number), None) if number is not None else None

    def decision(self, metric: str | None = None, now: float | None = None) -> Decision:
        """What a worker would decide now: the workers' own rule, so a summary says what they did
        (``stopped`` with the budget that ran out, ``failed``, ``done``...)."""
        return decide(
            self.counts, self.settings, window_started_at=self.window_started_at, now=now, metric=metric
        )


class PhaseWatcher:
    def __init__(self, study: Any, phase_dir: Path) -> None:
        self.study, self.phase_dir = study, phase_dir
        self.direction = study.direction.name.lower()
        self._seen: set[int] | None = None
        self._last: PhaseSnapshot | None = None
        self.unreachable_since: float | None = None  # time.time() of the first failed refresh

    def snapshot(self) -> PhaseSnapshot:
        """The phase as the storage has it now; storage errors (after ``with_retries``) propagate."""
        snapshot = self._read(with_retries)
        self.unreachable_since = None
        return snapshot

    def refresh(self) -> PhaseSnapshot | None:
        """Like ``snapshot`` but never raises: on an error, the last view with ``stale_since`` set
        (None if there never was one). Retries briefly: the next refresh is a tick away."""

        def briefly(call: Any, *args: Any) -> Any:
            return with_retries(call, *args, attempts=REFRESH_ATTEMPTS, first_wait_s=0.25)

        try:
            snapshot = self._read(briefly)
        except Exception:  # whatever it is, the workers must go on
            if self.unreachable_since is None:
                self.unreachable_since = time.time()
            if self._last is None:
                return None
            return dataclasses.replace(
                self._last, newly_finished=[], workers=self._workers(), stale_since=self.unreachable_since
            )
        self.unreachable_since = None
        return snapshot

    def _read(self, retrying: Any) -> PhaseSnapshot:
        trials = retrying(self.study.get_trials, False)
        attrs = retrying(lambda: self.study.user_attrs)
        finished = [t for t in trials if t.state.is_finished()]
        if self._seen is None:  # what was finished before we started watching is not news
            self._seen = {t.number for t in finished}
        news = [t for t in finished if t.number not in self._seen]
        self._seen.update(t.number for t in news)
        self._last = PhaseSnapshot(
            count_trials(trials, self.direction),
            PhaseSettings.from_attrs(attrs),
            self._workers(),
            sorted(news, key=lambda t: t.number),
            list(trials),
            window_started_at=window_started_at(attrs),
        )
        return self._last

    def _workers(self) -> list[dict[str, Any]]:
        workers = []
        for path in sorted((self.phase_dir / ".workers").glob("*.json")):
            try:
                workers.append(json.loads(path.read_text()))
            except (OSError, ValueError):
                continue
        return workers
