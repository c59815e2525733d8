"""What one ``tuner tune`` run works with: the request, the storages, the state and its log."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.markup import escape

from tuner.cli._console import err, out
from tuner.playbook.budget import Budget
from tuner.playbook.decision_log import Decision, Stage, TuneState, save_state
from tuner.playbook.tune_plan import Switches
from tuner.spec import LoadedStudy

if TYPE_CHECKING:
    from tuner.orchestrate.warm_start import SharedWarmStart

LABEL = "tune         "


@dataclass
class TuneRequest:
    """The command line."""

    path: Path
    budget: Budget
    sets: list[str] = field(default_factory=list)
    output_dir: Path = Path("runs")
    storage: str | None = None
    workers: int | None = None
    devices: str | None = None
    switches: Switches = field(default_factory=Switches)
    dry_run: bool = False
    as_json: bool = False
    progress: bool = True
    search_seed: int | None = None  # --search-seed: a fresh search, studied under its own name
    max_failed: int | None = None  # --max-failed: every phase's failure budget (else its own)


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
    warm_start: SharedWarmStart | None = None  # every phase's workers forked from one zygote
    started: float = field(default_factory=time.monotonic)  # this run's start
    spent_before: float = 0.0  # the wall seconds earlier runs took (stored in the state)
    raised_from: Budget | None = None  # this run's --budget is larger than the stored one's

    def spent_s(self) -> float:
        """Wall seconds the runs of this ``tune`` have taken, this one included."""
        return self.spent_before + time.monotonic() - self.started

    def seconds_left(self) -> float | None:
        """What is left of a duration budget (``--budget 2h``); None for a budget in steps."""
        seconds = self.request.budget.seconds
        return None if seconds is None else seconds - self.spent_s()

    @property
    def console(self) -> Any:
        return err if self.request.as_json else out

    def say(self, text: str) -> None:
        self.console.print(escape(f"{LABEL}{text}"), highlight=False)

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
        """Log a decision: printed, and stored before anything acts on it."""
        self.state.decisions.append(decision)
        self.save()
        self.say(decision.line)

    def record(self, stage: Stage, decision: Decision) -> Stage:
        """Store a stage decided now with its decision, in one write (a re-run finds the stage
        and runs it as decided), then print the decision."""
        self.state.stages.append(stage)
        self.state.decisions.append(decision)
        self.save()
        self.say(decision.line)
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

    def budget_line(self) -> str | None:
        """``budget: 2,760 of 8,000 steps spent (34%), at most about 1m 20s left at this pace``:
        where the whole budget stands, said before each phase (the phases' own bars show only
        theirs); the time is an upper bound, at the pace of every run so far. None before any
        step was trained: nothing to say yet."""
        from tuner._format import duration

        spent = sum(self.steps_of(stage) for stage in self.state.stages)
        if not spent:
            return None
        left = max(0, self.budget_steps - spent) * self.spent_s() / spent  # the pace so far
        share = spent / max(1, self.budget_steps)
        return (
            f"budget: {spent:,} of {self.budget_steps:,} steps spent ({share:.0%}), "
            f"at most about {duration(left)} left at this pace"
        )

    def committed(self) -> int:
        """Steps spent or promised: a finished stage's trained steps, else its share."""
        total = 0
        for stage in self.state.stages:
            ran = self.steps_of(stage)
            total += ran if stage.done else max(ran, stage.planned_steps)
        return total

    def left(self) -> int:
        return self.budget_steps - self.committed()
