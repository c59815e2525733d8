"""What a trial costs besides its training steps, and what a step costs, measured on trials that ran.

Every trial pays a fixed cost whatever its length: a process, the workload built (its data
loaded), the first steps' warm-up, a checkpoint and the records at its end. On a small model
(178 examples, a few milliseconds a step) that is seconds against hundredths of a second of
training: 187 round-1 trials of 20 steps took minutes, nearly all of it fixed cost. ``tuner tune``
weighs the two before it plans the rounds (``tune/own_settings.py``), from sweep-lr's trials:

- a **step** costs the training loop's seconds between the first and the last step its
  ``metrics.csv`` logged (``elapsed_s``), over the steps between them: the loop's own pace, evals
  and checkpoints in that span included, the first steps' warm-up left out (median over trials);
- the **fixed cost** is a trial's wall time in the storage (from its start to its end, as the
  orchestrator saw it) less its trained steps at that pace (median over trials).

Read from the storage and the trials' run folders; a trial whose folder is not on this machine
(a worker elsewhere) or that logged fewer than two steps is left out, and with none left there
is no measurement (``None``): ``tune`` then plans as if trials were long enough.
"""

from __future__ import annotations

import csv
import statistics
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class TrialCost:
    """Seconds a trial spends besides its steps (``fixed_s``) and per step (``step_s``), measured
    on ``trials`` trials."""

    fixed_s: float
    step_s: float
    trials: int

    def training_s(self, steps: int) -> float:
        """The seconds ``steps`` steps train for."""
        return steps * self.step_s

    def outweighs(self, steps: int) -> bool:
        """A trial of ``steps`` steps spends more on its fixed cost than on training."""
        return self.fixed_s > self.training_s(steps)


def measured_trial_cost(trials: Iterable[Any]) -> TrialCost | None:
    """The cost (module docstring) over the finished trials (Optuna ``FrozenTrial``s) that can be
    measured; None when none can."""
    from optuna.trial import TrialState

    from tuner.playbook.estimate.what_ran import trained_steps

    measured = []
    for trial in trials:
        if trial.state not in (TrialState.COMPLETE, TrialState.PRUNED):
            continue
        wall = _wall_s(trial)
        steps = trained_steps(trial, None)
        run_dir = trial.user_attrs.get("run_dir")
        pace = _loop_step_s(Path(run_dir)) if isinstance(run_dir, str) else None
        if wall is not None and steps > 0 and pace is not None:
            measured.append((wall, steps, pace))
    if not measured:
        return None
    step_s = statistics.median(pace for _, _, pace in measured)
    fixed_s = statistics.median(max(0.0, wall - steps * step_s) for wall, steps, _ in measured)
    return TrialCost(fixed_s, step_s, len(measured))


def _wall_s(trial: Any) -> float | None:
    if trial.datetime_start is None or trial.datetime_complete is None:
        return None
    seconds = (trial.datetime_complete - trial.datetime_start).total_seconds()
    return seconds if seconds > 0 else None


def _loop_step_s(run_dir: Path) -> float | None:
    """Seconds per step of the training loop between the first and last logged steps of the
    run's ``metrics.csv``; None without two such steps (or the file)."""
    logged: list[tuple[int, float]] = []
    try:
        with (run_dir / "metrics.csv").open(newline="") as handle:
            for row in csv.DictReader(handle):
                step, elapsed = row.get("step"), row.get("elapsed_s")
                if step and elapsed:
                    logged.append((int(step), float(elapsed)))
    except (OSError, UnicodeDecodeError, csv.Error, ValueError):
        return None
    if len(logged) < 2:
        return None
    (first_step, first_s), (last_step, last_s) = min(logged), max(logged)
    if last_step <= first_step or last_s <= first_s:
        return None
    return (last_s - first_s) / (last_step - first_step)
