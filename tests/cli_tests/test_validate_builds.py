"""``tuner validate`` builds the workload and pushes one batch through it: what a run would stop
at, at or before its first step, stops validate, in the very line the run prints (less the run
folder's ``error.log``); it writes nothing, and ``--no-build`` checks the file alone."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest
import yaml

from tests.spec_tests._support import invoke, plain, single_error

WORKLOAD = """\
import torch
from torch.utils.data import TensorDataset


def build(ctx):
    from tuner.workloads import Workload

    hidden = ctx.options.get("hidden", 16)
    if ctx.options.get("crash"):
        raise KeyError(ctx.options["crash"])
    g = torch.Generator().manual_seed(0)
    x = torch.randn(96, 4, generator=g)
    y = (x[:, 0] > 0).long() + (x[:, 1] > 0).long()  # 3 classes
    model = torch.nn.Sequential(
        torch.nn.Linear(4, hidden), torch.nn.ReLU(), torch.nn.Linear(hidden, ctx.options.get("outputs", 3))
    )
    return Workload(
        model=model,
        train_data=TensorDataset(x[:64], y[:64]),
        eval_data=TensorDataset(x[64:], y[64:]),
        num_classes=3,
        metrics=tuple(ctx.options.get("metrics", ["loss", "accuracy", "error_rate"])),
    )
"""


def _study(folder: Path, *, max_train_steps: int | None = 20, **options: object) -> Path:
    (folder / "mine.py").write_text(WORKLOAD)
    training = {"batch_size": 16, "eval_every": 10, "device": "cpu", "tensorboard": False}
    if max_train_steps is not None:
        training["max_train_steps"] = max_train_steps
    study = {
        "name": "mine",
        "workload": {"name": "mine.py:build", "options": {"hidden": 8, **options}},
        "objective": {"metric": "val/error_rate", "direction": "minimize"},
        "training": {**training, "schedule": [{"shape": "constant"}]},
    }
    path = folder / "study.yaml"
    path.write_text(yaml.safe_dump(study, sort_keys=False))
    return path


@pytest.fixture(autouse=True)
def _in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)


def _files(folder: Path) -> set[Path]:
    return {path.relative_to(folder) for path in folder.rglob("*") if "__pycache__" not in path.parts}


def _train_error(study: Path) -> str:
    """The one line ``tuner train`` fails with, less its ``(traceback: ...)`` pointer."""
    message = single_error(invoke("train", str(study), "--no-progress"))
    return message.split(" (traceback: ")[0]


@pytest.mark.parametrize(
    ("options", "expected"),
    [
        (
            {"outputs": 4},
            "the workload's model returned logits of shape (16, 4) for targets (16,); expected (16, 3): "
            "num_classes is 3",
        ),
        ({"crash": "boom"}, "the workload raised KeyError: 'boom' at mine.py:10 in build"),
        (
            {"metrics": ["loss", "accuracy"]},
            "objective.metric 'val/error_rate' is not computed by this workload; it computes: val/loss, "
            "val/accuracy, train/loss, train/accuracy",
        ),
        (
            {"hiden": 8},
            "workload option 'hiden' was never read by mine.py:build (it read: crash, hidden, metrics, "
            "outputs; did you mean 'hidden'?)",
        ),
    ],
    ids=["class count", "build raises", "objective not computed", "option never read"],
)
def test_validate_stops_at_what_the_first_step_would_in_its_words(
    tmp_path: Path, options: dict[str, object], expected: str
) -> None:
    study = _study(tmp_path, **options)
    before = _files(tmp_path)
    assert single_error(invoke("validate", str(study))) == expected
    assert _files(tmp_path) == before  # no run folder, no storage, nothing
    assert _train_error(study) == expected
    passed = invoke("validate", str(study), "--no-build")  # the file alone holds no such error
    assert passed.exit_code == 0, passed.output
    assert "built" not in plain(passed.stdout)


def test_a_fit_metric_the_workload_does_not_compute_stops_validate_when_a_sweep_will_read_it(
    tmp_path: Path,
) -> None:
    """No ``max_train_steps``: sweep-lr comes first, and judges fits on train/accuracy, which this
    workload does not compute; with a length of its own, no sweep reads it."""
    study = _study(tmp_path, max_train_steps=None, metrics=["loss", "error_rate"])
    assert single_error(invoke("validate", str(study))) == (
        "fit metric 'train/accuracy' is not computed by this workload; it computes: val/loss, "
        "val/error_rate, train/loss, train/error_rate"
    )
    with_length = invoke("validate", str(study), "--set", "max_train_steps=20")
    assert with_length.exit_code == 0, with_length.output


def test_validate_says_what_the_build_found_and_its_loss_is_the_first_steps(tmp_path: Path) -> None:
    study = _study(tmp_path)
    before = _files(tmp_path)
    result = invoke("validate", str(study))
    assert result.exit_code == 0, result.output
    lines = plain(result.stdout).splitlines()
    assert lines[-2:] == [
        "  built        Sequential, 67 parameters; data: 64 training, 32 evaluation examples",
        "  first batch  16 examples: loss 0.9168, outputs (16, 3); an evaluation batch of each split scored",
    ]
    assert _files(tmp_path) == before
    trained = invoke(
        "train", str(study), "--no-progress", "--set", "max_train_steps=1", "--set", "log_every=1"
    )
    assert trained.exit_code == 0, trained.output
    with open("runs/mine/train/run-001/metrics.csv", newline="") as rows:
        first = next(csv.DictReader(rows))
    assert first["step"] == "1" and f"{float(first['train/step_loss']):.4g}" == "0.9168"
