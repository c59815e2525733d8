"""What one ``tune`` run works with: the request, the storages, the state and its log, and what
it asks of its caller (the report's reading, a phase run) and says to it (``emit``)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tuner.playbook.budget import Budget
from tuner.playbook.decision_log import Decision, Stage, TuneState, save_state
from tuner.playbook.tune.messages import BudgetStanding, Decided, Emit, Note, silent
from tuner.playbook.tune.request import TuneRequest
from tuner.spec import LoadedStudy

if TYPE_CHECKING:
    from tuner.playbook.tune.advisor import Advisor
    from tuner.playbook.tune.phase_runner import PhaseRunner


@dataclass
class TuneContext:
    """The request, the study ``tune`` was started on (``home``: its storage holds the state),
    the storages opened so far, and the state with its decision log."""

    request: TuneRequest
    home: LoadedStudy
    home_url: str
    state: TuneState
    budget_steps: int = 0
    storages: dict[str, Any] = field(default_factory=dict)
    started: float = field(default_factory=time.monotonic)  # this run's start
    spent_before: float = 0.0  # the wall seconds earlier runs took (stored in the state)
    raised_from: Budget | None = None  # this run's --budget is larger than the stored one's
    emit: Emit = silent  # where what it decides and finds is said (``messages``)
    advisor: Advisor | None = None  # a round's report (None: a projection, which reads none)
    runner: PhaseRunner | None = None  # runs a phase (None: a projection, which runs none)

    def spent_s(self) -> float:
        """Wall seconds the runs of this ``tune`` have taken, this one included."""
        return self.spent_before + time.monotonic() - self.started

    def seconds_left(self) -> float | None:
        """What is left of a duration budget (``--budget 2h``); None for a budget in steps."""
        seconds = self.request.budget.seconds
        return None if seconds is None else seconds - self.spent_s()

    def say(self, text: str) -> None:
        """A line that decides nothing (``Note``); a decision is said by ``decide`` / ``record``."""
        self.emit(Note(text))

    def url_of(self, loaded: LoadedStudy) -> str:
        from tuner.orchestrate import resolve_storage_url

        spec = loaded.spec
        return self.request.storage or resolve_storage_url(spec.storage, self.request.output_dir, spec.name)

    def storage_of(self, loaded: LoadedStudy, *, create: bool = True) -> Any:
        """The study's storage (opened once); None if it does not exist and ``create`` is off."""
        from tuner.orchestrate import open_storage
        from tuner.playbook.study_results import open_existing_storage

        url = self.url_of(loaded)
        if url not in self.storages or self.storages[url] is None:
            self.storages[url] = open_storage(url) if create else open_existing_storage(url)
        return self.storages[url]

    def decide(self, decision: Decision) -> None:
        """Log a decision: stored before anything acts on it, then said."""
        self.state.decisions.append(decision)
        self.save()
        self.emit(Decided(decision))

    def record(self, stage: Stage, decision: Decision) -> Stage:
        """Store a stage decided now with its decision, in one write (a re-run finds the stage
        and runs it as decided), then say the decision."""
        self.state.stages.append(stage)
        self.state.decisions.append(decision)
        self.save()
        self.emit(Decided(decision))
        return stage

    def save(self) -> None:
        """Store the state with the study ``tune`` started on; a copy goes to the storage of each
        next study it searched (when that is another storage), so that ``tuner report`` on the
        study that delivers the model shows the log too."""
        from tuner.spec import load_study

        self.state.spent_s = self.spent_s()
        home = self.storage_of(self.home)
        save_state(home, self.home.spec.name, self.state)
        others = {s.study: s for s in self.state.stages if s.study != self.home.spec.name}
        for stage in others.values():
            storage = self.storage_of(load_study(Path(stage.study_file), stage.sets))
            if storage is not home:
                save_state(storage, self.home.spec.name, self.state)

    def steps_of(self, stage: Stage) -> int:
        """Training steps the stage's phase has trained so far (read from its storage)."""
        from tuner.playbook.estimate import load_stored_phase, what_ran
        from tuner.spec import load_study

        storage = self.storage_of(load_study(Path(stage.study_file), stage.sets), create=False)
        return what_ran(load_stored_phase(storage, stage.study, stage.phase)).steps

    def slots_of(self, stage: Stage) -> int:
        """Slots the stage's phase has started so far (another command may have added some)."""
        from tuner.orchestrate.budget import counted, slot_key
        from tuner.playbook.estimate import load_stored_phase
        from tuner.spec import load_study

        storage = self.storage_of(load_study(Path(stage.study_file), stage.sets), create=False)
        stored = load_stored_phase(storage, stage.study, stage.phase)
        return len({slot_key(t)[0] for t in counted(stored.trials)}) if stored is not None else 0

    def budget_standing(self) -> BudgetStanding | None:
        """Where the whole budget stands, said before each phase; None before any step was
        trained: nothing to say yet. The time left is an upper bound, at the pace of every run
        so far."""
        spent = sum(self.steps_of(stage) for stage in self.state.stages)
        if not spent:
            return None
        left = max(0, self.budget_steps - spent) * self.spent_s() / spent  # the pace so far
        return BudgetStanding(spent, self.budget_steps, left)

    def committed(self) -> int:
        """Steps spent or promised: a finished stage's trained steps, else its share."""
        total = 0
        for stage in self.state.stages:
            ran = self.steps_of(stage)
            total += ran if stage.done else max(ran, stage.planned_steps)
        return total

    def left(self) -> int:
        return self.budget_steps - self.committed()
