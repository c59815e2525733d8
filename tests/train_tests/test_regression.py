"""Regression workloads: real-valued targets, the squared-error loss, mse / mae / r2, and the
contract's errors, each one line before the first step.

The metrics are checked against scikit-learn's on the same numbers, batch by batch; the
engine's run records what predicting the training mean scores (the report's chance level).
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
import torch
import yaml
from sklearn.metrics import mean_absolute_error, mean_squared_error, r2_score
from typer.testing import CliRunner

from tests.train_tests.conftest import BASE_STUDY
from tuner.cli.app import app
from tuner.train.regression_metrics import RegressionAccumulator, constant_scores, squared_error_per_item
from tuner.workloads import Workload

WORKLOAD = """\
import torch
from torch.utils.data import TensorDataset
from tuner.workloads import Workload


class Squeeze(torch.nn.Module):
    def forward(self, x):
        return x.squeeze()


def build(ctx):
    g = torch.Generator().manual_seed(0)
    x = torch.rand(200, 3, generator=g)
    y = 3 * x[:, 0] - 2 * x[:, 1] + 0.05 * torch.randn(200, generator=g)
    if ctx.options.get("nan_target"):
        y[150] = float("nan")
    head = torch.nn.Linear(16, ctx.options.get("out", 1))
    model = torch.nn.Sequential(torch.nn.Linear(3, 16), torch.nn.ReLU(), head)
    if ctx.options.get("squeeze"):  # drops the batch dimension of a batch of one too
        model = torch.nn.Sequential(model, Squeeze())
    kwargs = {"task": "regression"}
    if ctx.options.get("loss") == "huber":
        kwargs["loss_fn"] = torch.nn.HuberLoss(reduction="none")
    if ctx.options.get("loss") == "scalar":
        kwargs["loss_fn"] = torch.nn.MSELoss()
    if ctx.options.get("metrics"):
        kwargs["metrics"] = ctx.options["metrics"]
    if ctx.options.get("no_task"):
        kwargs = {}
    return Workload(model=model, train_data=TensorDataset(x[:160], y[:160]),
                    eval_data=TensorDataset(x[160:], y[160:]), **kwargs)
"""

RUN = Path("runs/reg/train/run-001")


@pytest.fixture(autouse=True)
def _in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("TUNER_DEBUG", raising=False)


def _train(objective: dict[str, str] | None = None, eval_batch_size: int = 128, **options: object):
    Path("reg_workload.py").write_text(WORKLOAD)
    study = {
        **BASE_STUDY,
        "name": "reg",
        "workload": {"name": "reg_workload.py:build", "options": options},
        "objective": objective or {"metric": "val/mse", "direction": "minimize"},
        "training": {
            **BASE_STUDY["training"],
            **{
                "max_train_steps": 100,
                "eval_every": 20,
                "batch_size": 32,
                "eval_batch_size": eval_batch_size,
            },
            "optimizer": {"name": "adamw", "lr": 0.02},
        },
    }
    Path("study.yaml").write_text(yaml.safe_dump(study, sort_keys=False))
    return CliRunner().invoke(app, ["train", "study.yaml", "--no-progress"])


def test_metrics_match_scikit_learns_over_uneven_batches_and_a_one_wide_head() -> None:
    g = torch.Generator().manual_seed(1)
    targets = torch.randn(103, generator=g) * 4 + 10
    outputs = (targets + torch.randn(103, generator=g)).unsqueeze(-1)  # an nn.Linear(h, 1) head
    accumulator = RegressionAccumulator(["loss", "mse", "mae", "r2"])
    for chunk_out, chunk_y in zip(outputs.split(40), targets.split(40), strict=True):
        accumulator.update(chunk_out, chunk_y, squared_error_per_item(chunk_out, chunk_y))
    got = accumulator.compute()
    y, p = targets.numpy(), outputs.squeeze(-1).numpy()
    assert got["mse"] == pytest.approx(mean_squared_error(y, p), rel=1e-6)
    assert got["loss"] == pytest.approx(got["mse"], rel=1e-6)  # the default loss is the squared error
    assert got["mae"] == pytest.approx(mean_absolute_error(y, p), rel=1e-6)
    assert got["r2"] == pytest.approx(r2_score(y, p), rel=1e-6)


def test_r2_is_zero_for_the_mean_one_for_the_targets_and_nan_for_constant_targets() -> None:
    targets = torch.tensor([1.0, 2.0, 3.0, 6.0])
    for predictions, r2 in ((torch.full((4,), 3.0), 0.0), (targets, 1.0)):
        accumulator = RegressionAccumulator(["r2"])
        accumulator.update(predictions, targets, (predictions - targets).square())
        assert accumulator.compute()["r2"] == pytest.approx(r2)
    flat = RegressionAccumulator(["r2", "mse"])
    flat.update(torch.ones(3), torch.ones(3), torch.zeros(3))
    result = flat.compute()
    assert result["mse"] == 0.0 and result["r2"] != result["r2"]  # NaN: nothing to explain


def test_a_workload_takes_its_tasks_metrics_when_it_names_none() -> None:
    model, data = torch.nn.Linear(1, 1), torch.utils.data.TensorDataset(torch.ones(2, 1), torch.ones(2))
    assert Workload(model, data, data, task="regression").metrics == ("loss", "mse", "mae", "r2")
    assert Workload(model, data, data, num_classes=2).metrics == ("loss", "accuracy", "error_rate")


def test_a_regression_trains_and_records_what_predicting_the_training_mean_scores() -> None:
    result = _train({"metric": "val/r2", "direction": "maximize"})
    assert result.exit_code == 0, result.output
    status = json.loads((RUN / "status.json").read_text())
    assert status["task"] == "regression" and "num_classes" not in status
    chance = status["chance"]
    assert set(chance) == {"val", "train"} and set(chance["val"]) == {"loss", "mse", "mae", "r2"}
    assert chance["train"]["r2"] == pytest.approx(0.0, abs=1e-9)  # the training mean on its own split
    assert status["best_value"] > 0.5 > chance["val"]["r2"]  # it learned, far beyond the mean
    with (RUN / "metrics.csv").open() as handle:
        rows = list(csv.DictReader(handle))
    assert {"val/mse", "val/mae", "val/r2", "train/r2"} <= set(rows[0])
    evals = [row for row in rows if row["val/r2"]]  # log-only rows leave the eval columns empty
    best = max(evals, key=lambda row: float(row["val/r2"]))
    assert int(best["step"]) == status["best_step"]  # r2 is maximised
    with (RUN / "predictions.csv").open() as handle:
        prediction = next(csv.DictReader(handle))
    assert prediction["confidence"] == ""  # a value has no confidence
    assert "." in prediction["target"] and "." in prediction["prediction"]  # numbers, not class indices


def test_r2_of_several_outputs_is_each_outputs_averaged_as_scikit_learns() -> None:
    """Outputs at 0 and at 100: the mean of each alone must not look learned (r2 over the
    flattened values would be near 1, since the second output's mean explains its offset)."""
    g = torch.Generator().manual_seed(2)
    targets = torch.randn(60, 2, generator=g) + torch.tensor([0.0, 100.0])
    outputs = torch.stack(
        [targets[:, 0] + 0.3 * torch.randn(60, generator=g), targets[:, 1].mean().expand(60)], 1
    )
    accumulator = RegressionAccumulator(["r2", "mse"])
    for out, y in zip(outputs.split(25), targets.split(25), strict=True):
        accumulator.update(out, y, (out - y).square())
    got = accumulator.compute()
    assert got["r2"] == pytest.approx(r2_score(targets.numpy(), outputs.numpy()), rel=1e-6)
    assert got["r2"] < 0.5


def test_r2_stays_exact_for_targets_far_from_zero() -> None:
    """Targets around 1e8 with a spread of 1: unshifted sums of squares lose every digit."""
    g = torch.Generator().manual_seed(4)
    targets = 1e8 + torch.randn(300, generator=g, dtype=torch.float64)
    outputs = targets + 0.3 * torch.randn(300, generator=g, dtype=torch.float64)
    accumulator = RegressionAccumulator(["r2"])
    for out, y in zip(outputs.split(64), targets.split(64), strict=True):
        accumulator.update(out, y, (out - y).square())
    assert accumulator.compute()["r2"] == pytest.approx(r2_score(targets.numpy(), outputs.numpy()), rel=1e-9)


def test_chance_for_mae_is_the_training_median_and_for_mse_the_mean() -> None:
    g = torch.Generator().manual_seed(3)
    train, val = torch.randn(500, generator=g).exp(), torch.randn(200, generator=g).exp()  # skewed
    scores = constant_scores(["loss", "mse", "mae", "r2"], val, train, default_loss=True)
    y = val.numpy()
    assert scores["mae"] == pytest.approx(mean_absolute_error(y, [float(train.median())] * 200), rel=1e-6)
    assert scores["mse"] == pytest.approx(mean_squared_error(y, [float(train.mean())] * 200), rel=1e-6)
    assert scores["loss"] == scores["mse"]
    assert "loss" not in constant_scores(["loss", "mse"], val, train, default_loss=False)


def test_a_loss_of_the_users_own_sees_one_prediction_per_target() -> None:
    """A Huber loss with an nn.Linear(h, 1) head: broadcast, it would compare every prediction
    with every target (a 32 x 32 loss) and teach the mean; handed one prediction per target, it
    learns as the squared error does (Huber is half the squared error below 1)."""
    result = _train(loss="huber")
    assert result.exit_code == 0, result.output
    last = json.loads((RUN / "status.json").read_text())["last_eval"]
    assert last["val/r2"] > 0.5
    assert last["val/loss"] == pytest.approx(last["val/mse"] / 2, rel=0.2)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        pytest.param(
            {"out": 2},
            "the workload's model returned predictions of shape (32, 2) for targets (32,); "
            "expected (32,) or (32, 1)",
            id="output-shape",
        ),
        pytest.param(
            {"nan_target": True},
            "the workload's training targets include nan (value 150); a regression needs finite targets",
            id="nan-target",
        ),
        pytest.param(
            {"metrics": ["loss", "accuracy"]},
            "workload 'reg_workload.py:build' is a regression workload and asks for accuracy, which a "
            "regression model does not have; its metrics: loss, mse, mae, r2",
            id="classification-metric",
        ),
        pytest.param(
            {"loss": "scalar"},
            "the workload's loss_fn returned () for targets (32,); expected one loss per target, "
            "(32,) (e.g. reduction='none')",
            id="reduced-loss",
        ),
        pytest.param(
            {"no_task": True},
            "workload 'reg_workload.py:build' returned num_classes=0; a classifier needs its class "
            "count (a regression workload sets task='regression' instead)",
            id="no-task",
        ),
    ],
)
def test_a_regression_that_breaks_the_contract_is_refused_in_one_line(options: dict, message: str) -> None:
    result = _train(**options)
    assert result.exit_code == 2
    assert result.output.startswith(f"error: {message}")
    assert len(result.output.splitlines()) == 1
    assert not (RUN / "checkpoints" / "latest.pt").exists()


def test_a_model_that_squeezes_away_the_batch_of_one_is_told_at_the_evaluation() -> None:
    """40 validation examples in batches of 39 leave a batch of one, which ``.squeeze()`` turns
    into a scalar: the workload's error, in one line, with the fix."""
    result = _train(eval_batch_size=39, squeeze=True)
    assert result.exit_code == 2, result.output
    assert result.output.startswith(
        "error: the workload's model returned predictions of shape () for targets (1,); expected (1,) or "
        "(1, 1) (a .squeeze() drops the batch dimension of a batch of one: squeeze(-1) keeps it)"
    )
    assert len(result.output.splitlines()) == 1
