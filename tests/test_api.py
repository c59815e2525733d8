"""tuner from Python: ``tuner.tune`` returns the delivered model, a study may be a dict and its
workload a function (one defined inside a test is sent by value), ``tuner.get_report`` gives the
report's JSON, and tuner's errors come back as exceptions, never as an exit."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.utils.data import TensorDataset

import tuner
from tests.orchestrate_tests.conftest import FAST_HEARTBEAT
from tuner.errors import UsageError
from tuner.workloads import Workload, WorkloadContext


def _study(**changes: Any) -> dict[str, Any]:
    study: dict[str, Any] = {
        "name": "api",
        "objective": {"metric": "val/error_rate"},
        "training": {
            "batch_size": 16,
            "eval_batch_size": 64,
            "max_train_steps": 30,
            "eval_every": 10,
            "log_every": 10,
            "keep_best_checkpoints": 1,
            "prediction_samples": 2,
            "tensorboard": False,
            "device": "cpu",
            "optimizer": {"name": "sgd", "lr": 0.1},
            "schedule": [{"shape": "constant"}],
        },
        "search_space": {"optimizer.lr": {"type": "float", "low": 0.01, "high": 1.0, "log": True}},
        "rounds": {"round1": {"trials": 3}, "round2": {"top_k": 1, "seeds": 2}},
    }
    return {**study, **changes}


@pytest.fixture(autouse=True)
def _fast_workers(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for key, value in FAST_HEARTBEAT.items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("TUNER_STORAGE", raising=False)
    monkeypatch.chdir(tmp_path)


def test_tune_a_dict_whose_workload_is_a_function_defined_here(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A notebook's function: no worker could import it, so it reaches them by value."""
    offset = 0.5  # a closure: the function carries what it refers to

    def build(ctx: WorkloadContext) -> Workload:
        generator = torch.Generator().manual_seed(ctx.seed)
        x = torch.randn(160, 4, generator=generator)
        y = (x[:, 0] + x[:, 1] > offset).long()
        model = torch.nn.Linear(4, 2)
        return Workload(
            model, TensorDataset(x[:120], y[:120]), TensorDataset(x[120:], y[120:]), num_classes=2
        )

    model = tuner.tune(_study(), workload=build, budget=400, output_dir=tmp_path / "runs", quiet=True)
    said = capsys.readouterr()
    assert said.out == "" and "round-1" not in said.err  # quiet: no decision, header or summary
    assert isinstance(model, tuner.TunedModel)
    assert model.checkpoint.is_file() and model.metric == "val/error_rate" and model.direction == "minimize"
    assert 0.0 <= model.value < 0.5 and model.seeds.seeds >= 2 and model.seeds.low <= model.value
    assert "optimizer.lr" in model.params and model.phase in ("round-2", "round-3")
    assert (tmp_path / "runs" / "api" / "study.yaml").is_file()
    assert (tmp_path / "runs" / "api" / "workload.pkl").is_file()
    loaded = model.load_model()
    assert isinstance(loaded, torch.nn.Linear) and not loaded.training

    again = tuner.tune(_study(), workload=build, budget=400, output_dir=tmp_path / "runs")
    assert again.checkpoint == model.checkpoint  # the same call continues: everything was done
    assert "tune         api/round-1: done in an earlier run, not run again" in capsys.readouterr().out

    report = tuner.get_report(tmp_path / "runs" / "api" / "study.yaml", output_dir=tmp_path / "runs")
    delivered = report["delivered_model"]
    assert delivered["delivered"] and math.isclose(delivered["value"], model.value)


def test_errors_are_exceptions_not_exits(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="optimizer"):
        tuner.tune(_study(training={"optimizer": {"name": "adamm"}}), workload="digits-mlp", budget=100)
    with pytest.raises(UsageError, match="budget"):
        tuner.tune(_study(), workload="digits-mlp", budget="soon")
    with pytest.raises(UsageError, match="would write outside the output folder"):
        tuner.tune(_study(name=".."), workload="digits-mlp", budget=100)
    with pytest.raises(UsageError, match="a study is a file's path, a dict or a StudySpec"):
        tuner.tune(42, budget=100)
