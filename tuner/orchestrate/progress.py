"""A phase seen from outside: counts, best so far, what each local worker is doing.

Read only from the storage and the workers' status files, so the view is the same whichever
process (or machine) ran the trials.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tuner.orchestrate.budget import PhaseCounts, count_trials
from tuner.orchestrate.phase import PhaseSettings


@dataclass
class PhaseSnapshot:
    counts: PhaseCounts
    settings: PhaseSettings
    workers: list[dict[str, Any]] = field(default_factory=list)
    newly_finished: list[Any] = field(default_factory=list)  # FrozenTrials finished since the last look


class PhaseWatcher:
    def __init__(self, study: Any, phase_dir: Path) -> None:
        self.study, self.phase_dir = study, phase_dir
        self.direction = study.direction.name.lower()
        self._seen: set[int] | None = None

    def snapshot(self) -> PhaseSnapshot:
        trials = self.study.get_trials(deepcopy=False)
        finished = [t for t in trials if t.state.is_finished()]
        if self._seen is None:  # what was finished before we started watching is not news
            self._seen = {t.number for t in finished}
        news = [t for t in finished if t.number not in self._seen]
        self._seen.update(t.number for t in news)
        return PhaseSnapshot(
            count_trials(trials, self.direction),
            PhaseSettings.from_attrs(self.study.user_attrs),
            self._workers(),
            sorted(news, key=lambda t: t.number),
        )

    def _workers(self) -> list[dict[str, Any]]:
        workers = []
        for path in sorted((self.phase_dir / ".workers").glob("*.json")):
            try:
                workers.append(json.loads(path.read_text()))
            except (OSError, ValueError):
                continue
        return workers
