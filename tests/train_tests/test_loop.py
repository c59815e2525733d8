"""The loop's contract: event order, eval cadence in steps, stopping with a reason, divergence."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from tuner.train import Callback, Event, StopReason, StopTraining, read_status, run_training, should_eval


class Recorder(Callback):
    def __init__(self) -> None:
        self.events: list[tuple[str, int]] = []

    def __getattr__(self, name: str):
        if name.startswith("on_") and name[3:] in Event._value2member_map_:
            return lambda loop: self.events.append((name[3:], loop.step))
        raise AttributeError(name)


def test_events_fire_in_documented_order(make_study, tmp_path: Path) -> None:
    loaded = make_study(max_train_steps=4, eval_every=2, schedule=[{"shape": "constant"}])
    recorder = Recorder()
    run_training(
        loaded.spec, tmp_path / "run", base_dir=loaded.base_dir, extra_callbacks=[recorder], progress=False
    )
    step_pair = [
        ("train_step_start", 0),
        ("train_step_end", 1),
        ("train_step_start", 1),
        ("train_step_end", 2),
    ]
    evals = [("eval_start", 2), ("eval_end", 2), ("checkpoint", 2)]
    second = [(e, s + 2) for e, s in step_pair]
    evals4 = [(e, 4) for e, _ in evals]
    assert recorder.events == [("fit_start", 0), *step_pair, *evals, *second, *evals4, ("fit_end", 4)]


@pytest.mark.parametrize(
    ("max_steps", "every", "expected"),
    [(100, 25, [25, 50, 75, 100]), (90, 25, [25, 50, 75, 90]), (10, 20, [10]), (3, 1, [1, 2, 3])],
)
def test_eval_steps_are_every_n_steps_plus_the_last(max_steps: int, every: int, expected: list[int]) -> None:
    assert [s for s in range(max_steps + 1) if should_eval(s, every, max_steps)] == expected


def test_eval_rows_land_on_eval_steps(make_study, tmp_path: Path) -> None:
    loaded = make_study(max_train_steps=50, eval_every=20, log_every=5)
    run_training(loaded.spec, tmp_path / "run", base_dir=loaded.base_dir, progress=False)
    with (tmp_path / "run" / "metrics.csv").open() as handle:
        rows = list(csv.DictReader(handle))
    assert [int(r["step"]) for r in rows] == list(range(5, 55, 5))
    assert [int(r["step"]) for r in rows if r["val/error_rate"]] == [20, 40, 50]
    assert all(r["train/step_loss"] for r in rows)


class StopAt(Callback):
    def __init__(self, step: int, reason: str = "stopped") -> None:
        self.step, self.reason = step, reason

    def on_train_step_end(self, loop) -> None:
        if loop.step == self.step:
            raise StopTraining(self.reason, f"asked to stop at step {self.step}")


def test_a_callback_stops_training_with_a_reason(make_study, tmp_path: Path) -> None:
    loaded = make_study()
    result = run_training(
        loaded.spec, tmp_path / "run", base_dir=loaded.base_dir, extra_callbacks=[StopAt(7)], progress=False
    )
    assert (result.status, result.step, result.message) == ("stopped", 7, "asked to stop at step 7")
    status = read_status(tmp_path / "run")
    assert status["status"] == "stopped" and status["step"] == 7


NAN_WORKLOAD = '''
import torch
from tuner.workloads import Workload, WorkloadContext
from tuner.workloads.digits import build_mlp


class ExplodesAt(torch.nn.Module):
    """Returns NaN logits from the given call on: a stand-in for a too-high learning rate."""

    def __init__(self, inner, at_call):
        super().__init__()
        self.inner, self.at_call, self.calls = inner, at_call, 0

    def forward(self, x):
        self.calls += 1 if self.training else 0
        out = self.inner(x)
        return out * float("nan") if self.calls >= self.at_call else out


def build(ctx: WorkloadContext) -> Workload:
    workload = build_mlp(WorkloadContext(options={"hidden_sizes": [16]}, seed=ctx.seed))
    workload.model = ExplodesAt(workload.model, ctx.options["at_call"])
    return workload
'''


def test_nan_loss_stops_the_run_as_diverged_and_is_never_best(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from tuner.cli.app import app

    (tmp_path / "nan_workload.py").write_text(NAN_WORKLOAD)
    (tmp_path / "study.yaml").write_text(
        "name: nan\nworkload: {name: 'nan_workload.py:build', options: {at_call: 25}}\n"
        "training: {max_train_steps: 50, eval_every: 10, tensorboard: false, keep_best_checkpoints: 5}\n"
    )
    result = CliRunner().invoke(
        app, ["train", str(tmp_path / "study.yaml"), "--output-dir", str(tmp_path / "runs"), "--no-progress"]
    )
    assert result.exit_code == 1, result.output
    assert "diverged" in result.output
    run = tmp_path / "runs" / "nan" / "train" / "run-001"
    status = read_status(run)
    assert status["status"] == StopReason.DIVERGED.value
    assert status["step"] == 24  # step 25's loss was NaN: that update never happened
    index = json.loads((run / "checkpoints" / "index.json").read_text())
    assert [entry["step"] for entry in index["best"]] and all(entry["step"] <= 20 for entry in index["best"])
