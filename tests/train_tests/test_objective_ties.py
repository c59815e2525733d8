"""Ties on the objective go to the lower validation loss, then to the earlier step: the tracker's
best step, the kept checkpoints (their files and ``index.json`` order) and a resumed run agree."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

from tests.train_tests.tie_workload import run_tied
from tuner.train import load_checkpoint, read_status
from tuner.train.checkpoints import LATEST, CheckpointCallback, best_name
from tuner.train.objective import ObjectiveTracker, ScoredEval, eval_order, tie_metric

# (step, val/accuracy, val/loss): 0.983 at steps 20, 30 and 50; the loss puts 30 first, then 50
HISTORY = [(10, 0.95, 0.40), (20, 0.983, 0.30), (30, 0.983, 0.10), (40, 0.975, 0.05), (50, 0.983, 0.20)]


class FakeLoop:
    """What the tracker and the checkpoints read of the loop at an eval step."""

    def __init__(self, step: int, metrics: dict[str, float], callbacks: dict[str, Any]) -> None:
        self.step = self.last_eval_step = step
        self.last_eval = metrics
        self.callbacks = callbacks

    def state_dict(self) -> dict[str, Any]:
        return {"step": self.step, "callbacks": {k: v.state_dict() for k, v in self.callbacks.items()}}


def _pair(
    folder: Path, metric: str, direction: str, keep_best: int
) -> tuple[ObjectiveTracker, CheckpointCallback]:
    tracker = ObjectiveTracker(metric, direction)
    return tracker, CheckpointCallback(folder, tracker, keep_best=keep_best)


def _evals(
    tracker: ObjectiveTracker, callback: CheckpointCallback, history: list[tuple[int, float, float]]
) -> None:
    """Feed ``(step, val/accuracy, val/loss)`` evals to both, as the loop does; wait for the files."""
    callbacks = {"ObjectiveTracker": tracker, "CheckpointCallback": callback}
    for step, accuracy, loss in history:
        loop = FakeLoop(step, {"val/accuracy": accuracy, "val/loss": loss}, callbacks)
        tracker.on_eval_end(loop)
        callback.on_checkpoint(loop)
    callback.flush()


def _kept(folder: Path) -> list[int]:
    """The steps ``index.json`` lists as the best checkpoints, in its order."""
    return [entry["step"] for entry in json.loads((folder / "index.json").read_text())["best"]]


def _files(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.glob("best-step*.pt"))


def test_a_tie_on_accuracy_goes_to_the_lower_loss(tmp_path: Path) -> None:
    tracker, callback = _pair(tmp_path, "val/accuracy", "maximize", keep_best=2)
    _evals(tracker, callback, HISTORY)
    assert (tracker.best_step, tracker.best_value, tracker.best_loss) == (30, 0.983, 0.10)
    assert _kept(tmp_path) == [30, 50]  # step 20 ties on accuracy too, with a higher loss
    assert _files(tmp_path) == [best_name(30), best_name(50)]
    assert load_checkpoint(tmp_path / best_name(tracker.best_step))["step"] == 30


def test_a_tie_on_both_goes_to_the_earlier_eval(tmp_path: Path) -> None:
    tracker, callback = _pair(tmp_path, "val/accuracy", "maximize", keep_best=2)
    _evals(tracker, callback, [(10, 0.983, 0.2), (20, 0.983, 0.2), (30, 0.983, 0.2)])
    assert tracker.best_step == 10
    assert _kept(tmp_path) == [10, 20]
    assert _files(tmp_path) == [best_name(10), best_name(20)]


def test_an_objective_that_is_the_loss_breaks_no_tie_with_another_metric(tmp_path: Path) -> None:
    assert tie_metric("val/loss") is None and tie_metric("val/error_rate") == "val/loss"
    tracker, callback = _pair(tmp_path, "val/loss", "minimize", keep_best=2)
    # (step, val/accuracy, val/loss): the loss ties at 10 and 20; the better accuracy changes nothing
    _evals(tracker, callback, [(10, 0.90, 0.2), (20, 0.99, 0.2), (30, 0.99, 0.3), (40, 0.99, 0.2)])
    assert (tracker.best_step, tracker.best_value) == (10, 0.2)
    assert _kept(tmp_path) == [10, 20]


def test_an_objective_whose_split_has_no_loss_keeps_the_earliest_tie(tmp_path: Path) -> None:
    tracker = ObjectiveTracker("val/accuracy", "maximize")
    for step in (10, 20):
        tracker.on_eval_end(FakeLoop(step, {"val/accuracy": 0.9}, {}))
    assert (tracker.best_step, tracker.best_loss) == (10, None)


def test_a_resume_breaks_ties_as_the_run_that_was_never_stopped(tmp_path: Path) -> None:
    """The best eval's loss travels in ``latest.pt``: without it, a resumed run would let a later
    tie with a higher loss win."""
    history = [(10, 0.983, 0.10), (20, 0.983, 0.30), (30, 0.99, 0.50), (40, 0.99, 0.40)]
    straight = _pair(tmp_path / "straight", "val/accuracy", "maximize", keep_best=2)
    _evals(*straight, history)

    folder = tmp_path / "split"
    _evals(*_pair(folder, "val/accuracy", "maximize", keep_best=2), history[:1])
    tracker, callback = _pair(folder, "val/accuracy", "maximize", keep_best=2)
    state = load_checkpoint(folder / LATEST)["callbacks"]
    tracker.load_state_dict(state["ObjectiveTracker"])
    callback.load_state_dict(state["CheckpointCallback"])
    _evals(tracker, callback, history[1:2])
    assert tracker.best_step == 10 and _kept(folder) == [10, 20]
    _evals(tracker, callback, history[2:])
    assert (
        (tracker.best_step, tracker.best_loss) == (straight[0].best_step, straight[0].best_loss) == (40, 0.40)
    )
    assert _kept(folder) == _kept(tmp_path / "straight") == [40, 30]
    assert _files(folder) == _files(tmp_path / "straight")


def test_a_state_saved_before_the_loss_broke_ties_still_resumes(tmp_path: Path) -> None:
    """An older ``latest.pt`` has neither ``best_loss`` nor the kept files' losses: unknown, so a
    later tie whose loss is known wins it, in the tracker and the kept checkpoints alike."""
    _evals(*_pair(tmp_path, "val/accuracy", "maximize", keep_best=1), [(10, 0.983, 0.10)])
    tracker, callback = _pair(tmp_path, "val/accuracy", "maximize", keep_best=1)
    tracker.load_state_dict({"best_value": 0.983, "best_step": 10, "last_value": 0.983})
    callback.load_state_dict({"best": {best_name(10): 0.983}, "latest_step": 10})
    assert (tracker.best_step, tracker.best_loss, callback.best) == (10, None, {best_name(10): 0.983})
    _evals(tracker, callback, [(20, 0.983, 0.30)])
    assert (tracker.best_step, tracker.best_loss) == (20, 0.30)
    assert _kept(tmp_path) == [20] and _files(tmp_path) == [best_name(20)]


def test_a_real_run_delivers_the_tied_eval_with_the_lowest_loss(tmp_path: Path) -> None:
    """Two well-separated classes: validation accuracy is 1.0 from the first eval on, while the
    loss keeps falling; the best step is the one the rule picks from ``metrics.csv``, not the first."""
    result = run_tied(
        tmp_path,
        tmp_path / "run",
        max_train_steps=60,
        keep_best=2,
        objective={"metric": "val/accuracy", "direction": "maximize"},
    )

    with (tmp_path / "run" / "metrics.csv").open() as handle:
        evals = [
            ScoredEval(int(row["step"]), float(row["val/accuracy"]), float(row["val/loss"]))
            for row in csv.DictReader(handle)
            if row["val/accuracy"]
        ]
    ranked = sorted(evals, key=lambda scored: eval_order(scored, "maximize"))
    tied = [e for e in evals if e.value == ranked[0].value]
    assert len(tied) >= 2 and len({e.loss for e in tied}) == len(tied)  # the loss has something to decide
    assert ranked[0].step != tied[0].step  # the earliest tie is not the best
    assert (result.best_step, result.best_value) == (ranked[0].step, ranked[0].value)
    assert read_status(tmp_path / "run")["best_step"] == ranked[0].step
    folder = tmp_path / "run" / "checkpoints"
    assert _kept(folder) == [e.step for e in ranked[:2]]
    assert _files(folder) == sorted(best_name(e.step) for e in ranked[:2])
    assert load_checkpoint(folder / best_name(ranked[0].step))["step"] == ranked[0].step


def test_a_nan_loss_never_wins_a_tie(tmp_path: Path) -> None:
    tracker, callback = _pair(tmp_path, "val/accuracy", "maximize", keep_best=2)
    _evals(tracker, callback, [(10, 0.9, float("nan")), (20, 0.9, 0.3), (30, 0.9, float("nan"))])
    assert (tracker.best_step, tracker.best_loss) == (20, 0.3)
    index = json.loads((tmp_path / "index.json").read_text())["best"]
    assert [(e["step"], e["loss"]) for e in index] == [(20, 0.3), (10, None)]  # plain JSON: no NaN
