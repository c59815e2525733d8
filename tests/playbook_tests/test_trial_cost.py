"""A trial's fixed cost and a step's, measured on finished trials as the storage and their run
folders hold them: constructed trials whose times are known."""

from __future__ import annotations

import datetime
from pathlib import Path
from typing import Any

from optuna.trial import TrialState, create_trial

from tuner.playbook.trial_cost import TrialCost, measured_trial_cost

STARTED = datetime.datetime(2026, 1, 1, 12, 0, 0)


def _trial(
    folder: Path | None, wall_s: float, steps: int, elapsed: dict[int, float], state: str = "COMPLETE"
) -> Any:
    """A finished trial that ran ``wall_s`` seconds start to end and trained ``steps`` steps, its
    ``metrics.csv`` logging ``elapsed_s`` at the steps of ``elapsed`` (no folder: none)."""
    attrs: dict[str, Any] = {"final_step": steps}
    if folder is not None:
        folder.mkdir(parents=True)
        rows = ["step,lr,train/step_loss,elapsed_s,val/loss"]
        rows += [f"{step},0.1,0.5,{seconds}," for step, seconds in sorted(elapsed.items())]
        (folder / "metrics.csv").write_text("\n".join(rows) + "\n")
        attrs["run_dir"] = str(folder)
    trial = create_trial(
        state=TrialState[state], value=0.5 if state == "COMPLETE" else None, user_attrs=attrs
    )
    trial.datetime_start = STARTED
    trial.datetime_complete = STARTED + datetime.timedelta(seconds=wall_s)
    return trial


def test_the_fixed_cost_is_the_wall_time_less_the_steps_at_the_loops_pace(tmp_path: Path) -> None:
    """Two trials of 20 and 40 steps at 2 ms a step between their logged steps (the first 10
    steps' warm-up, 0.3 s, left out of the pace): 2.5 s and 2.6 s start to end, so their fixed
    costs are 2.5 - 0.04 and 2.6 - 0.08: the median 2.49 s."""
    trials = [
        _trial(tmp_path / "a", 2.5, 20, {10: 0.30, 20: 0.32}),
        _trial(tmp_path / "b", 2.6, 40, {10: 0.30, 20: 0.32, 30: 0.34, 40: 0.36}, state="PRUNED"),
    ]
    cost = measured_trial_cost(trials)
    assert cost is not None
    assert cost.trials == 2 and round(cost.step_s, 6) == 0.002 and round(cost.fixed_s, 3) == 2.49
    assert cost.outweighs(20)  # 0.04 s of training against 2.49 s
    assert not cost.outweighs(1245) and cost.outweighs(1244)  # 2.49 s of training from 1245 steps


def test_trials_that_cannot_be_measured_are_left_out(tmp_path: Path) -> None:
    running = create_trial(state=TrialState.FAIL, user_attrs={"final_step": 20})
    unmeasured = [
        _trial(None, 2.5, 20, {}),  # its run folder is elsewhere (no run_dir here)
        _trial(tmp_path / "one-row", 2.5, 10, {10: 0.3}),  # one logged step: no pace
        running,
    ]
    assert measured_trial_cost(unmeasured) is None
    measured = [*unmeasured, _trial(tmp_path / "ok", 1.0, 20, {10: 0.1, 20: 0.2})]
    assert measured_trial_cost(measured) == TrialCost(fixed_s=0.8, step_s=0.01, trials=1)
