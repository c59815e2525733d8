"""The best trial of a phase: what it trained, where its checkpoint is, how to reproduce it.

Shared by the report (per phase) and ``tuner list`` (per study, with the split it was scored on).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tuner.report.run_folders import Unreadable, best_checkpoint
from tuner.report.study_data import PhaseData, TrialSlot
from tuner.train.checksums import checkpoint_problem


@dataclass
class BestTrial:
    phase: str
    trial: int
    metric: str
    direction: str
    value: float
    best_step: int | None
    max_train_steps: int | None
    params: dict[str, Any]
    run_dir: str | None
    checkpoint: str | None  # the best checkpoint's file (None: the trial recorded no folder or best step)
    checkpoint_on_this_machine: bool
    checkpoint_problem: str | None  # why it is not usable here: not on this machine, or damaged
    reproduce: str | None
    attempts: int
    train_s: float
    git_commit: str | None
    git_dirty: bool | None
    unreadable: list[Unreadable] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "phase": self.phase,
            "trial": self.trial,
            "metric": self.metric,
            "direction": self.direction,
            "value": self.value,
            "best_step": self.best_step,
            "max_train_steps": self.max_train_steps,
            "params": self.params,
            "run_dir": self.run_dir,
            "checkpoint": self.checkpoint,
            "checkpoint_on_this_machine": self.checkpoint_on_this_machine,
            "checkpoint_problem": self.checkpoint_problem,
            "reproduce": self.reproduce,
            "attempts": self.attempts,
            "train_s": self.train_s,
            "git_commit": self.git_commit,
            "git_dirty": self.git_dirty,
        }


def best_trial(phase: PhaseData, slot: TrialSlot | None = None) -> BestTrial | None:
    """The phase's best completed trial (or ``slot``), with its checkpoint looked for here."""
    best = slot if slot is not None else phase.best
    if best is None or best.value is None:
        return None
    unreadable: list[Unreadable] = []
    checkpoint, here, problem = None, False, None
    if best.run_dir is not None and best.best_step is not None:
        checkpoint = str(Path(best.run_dir) / "checkpoints" / f"best-step{best.best_step:08d}.pt")
        found = best_checkpoint(best.run_dir, best.best_step)
        here = isinstance(found, Path)
        if isinstance(found, Path):  # here, but is it the file that was written?
            problem = checkpoint_problem(found)
            here = problem is None
        else:
            unreadable.append(found)
            problem = (
                "not on this machine: no run folder here"
                if found.path == best.run_dir
                else "not on this machine: deleted, or not among the kept best checkpoints"
            )
    commit = best.attrs.get("git_commit")
    dirty = best.attrs.get("git_dirty")
    return BestTrial(
        phase=phase.phase,
        trial=best.slot,
        metric=phase.metric,
        direction=phase.direction,
        value=best.value,
        best_step=best.best_step,
        max_train_steps=best.max_train_steps,
        params=dict(best.params),
        run_dir=best.run_dir,
        checkpoint=checkpoint,
        checkpoint_on_this_machine=here,
        checkpoint_problem=problem,
        reproduce=best.reproduce,
        attempts=len(best.attempts),
        train_s=best.train_s,
        git_commit=str(commit) if commit else None,
        git_dirty=bool(dirty) if isinstance(dirty, bool) else None,
        unreadable=unreadable,
    )
