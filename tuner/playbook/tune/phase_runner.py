"""How ``tune`` has a phase run, as a Protocol its caller implements.

A phase runs as ``sweep-lr`` and ``run-round`` run it: local workers, a live view while they
train, a summary (sweep-lr's table first) and the exit code of a failed or interrupted phase.
That is the command line's (``tuner.cli._phase_run``), above the playbook; ``tuner tune`` passes
its runner in, and the loop only says which phase, with which limits.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Protocol


@dataclass(frozen=True)
class PhaseToRun:
    """One stage's phase: the study file and ``--set`` values it was decided with, where it runs
    (as the request says), and this run's limits on it."""

    path: Path
    phase: str
    sets: list[str]
    output_dir: Path
    workers: int | None
    devices: str | None
    storage: str | None
    max_trials: int | None  # round 1: what tune decided, or the slots another command added since
    timeout_h: float | None  # what is left of a duration budget: no trial starts after it
    max_failed: int | None  # --max-failed, else the phase's own failure budget


class PhaseRunner(Protocol):
    def run(self, phase: PhaseToRun) -> None:
        """Run the phase until its workers exit. Returning means it is over (the stage is marked
        done); raising stops ``tune`` where it is (Ctrl-C, a spent failure budget: the same
        command run again continues the phase)."""
        ...
