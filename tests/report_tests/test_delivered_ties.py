"""The delivered model of a run whose evals tie on the objective: the report's best step, its
checkpoint and its validation metrics are the tied eval with the lowest validation loss, as the
run chose it; on a real run folder in a constructed study."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from tests.report_tests.builders import add_trial, run_folder, study
from tests.spec_tests._support import invoke
from tests.train_tests.tie_workload import run_tied
from tuner.playbook.plan import load_plan
from tuner.train import RunResult

pytestmark = pytest.mark.usefixtures("clean_env")


def _tied_run(folder: Path, run_dir: Path) -> RunResult:
    """A real run whose validation error rate is 0 at every eval while its loss keeps falling."""
    folder.mkdir(parents=True)
    return run_tied(folder, run_dir, max_train_steps=40, keep_best=1)


def test_the_delivered_step_of_tied_evals_is_the_one_with_the_lowest_loss(tmp_path: Path) -> None:
    built = study(tmp_path / "s", round2={"top_k": 2})
    round1 = built.start("round-1")
    for slot, (value, lr) in enumerate([(0.30, 0.05), (0.10, 0.1), (0.25, 0.2), (0.40, 0.5)]):
        add_trial(round1, slot, value, {"optimizer.lr": lr}, best_step=30)
    round2 = built.start("round-2")
    plan = load_plan(round2.user_attrs)
    assert plan is not None
    other, tied = plan.slots
    folder = built.output_dir / "toy" / "round-2" / "trial-0"
    metrics = {"val/error_rate": 0.15, "val/loss": 0.4}
    run_folder(folder, best_step=40, metrics=metrics)
    add_trial(round2, 0, 0.15, other.values, best_step=40, run_dir=folder, **other.attrs)
    run_dir = built.output_dir / "toy" / "round-2" / "trial-1"
    result = _tied_run(tmp_path / "train", run_dir)
    assert result.best_value == 0.0 and result.best_step is not None
    add_trial(round2, 1, 0.0, tied.values, best_step=result.best_step, run_dir=run_dir, **tied.attrs)

    with (run_dir / "metrics.csv").open() as handle:
        evals = {int(r["step"]): r for r in csv.DictReader(handle) if r["val/error_rate"]}
    assert len(evals) >= 2 and all(float(r["val/error_rate"]) == 0.0 for r in evals.values())
    lowest = min(evals, key=lambda step: float(evals[step]["val/loss"]))
    assert lowest != min(evals)  # the earliest tie is not the one to deliver

    result_json = invoke("report", "toy", "--output-dir", str(built.output_dir), "--json")
    assert result_json.exit_code == 0, result_json.output
    model = json.loads(result_json.stdout)["delivered_model"]
    assert (model["trial"], model["best_step"]) == (1, lowest)
    assert model["checkpoint"] == str(run_dir / "checkpoints" / f"best-step{lowest:08d}.pt")
    assert model["checkpoint_on_this_machine"] is True and model["checkpoint_problem"] is None
    assert model["val_metrics"]["values"]["val/loss"] == float(evals[lowest]["val/loss"])
