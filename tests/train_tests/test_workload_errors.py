"""A bug in the user's workload is reported as theirs: file and line in their code, error.log.

Also: the first batch is checked against the workload contract before any weight changes, a
failed start on bad input leaves no run folder behind, and a module-style entry point that is
really a file next to the study gets a hint.
"""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml
from typer.testing import CliRunner

from tests._processes import run
from tests.train_tests.conftest import BASE_STUDY
from tuner.cli.app import app
from tuner.spec import load_study
from tuner.train import read_status, run_training

WORKLOAD = '''\
import torch
from torch.utils.data import Dataset, TensorDataset
from tuner.workloads import Workload


class Listed(Dataset):
    """Not a TensorDataset: only the first batch can be checked."""

    def __init__(self, x, y):
        self.x, self.y = x, y

    def __len__(self):
        return len(self.y)

    def __getitem__(self, i):
        return self.x[i], self.y[i]


class Net(torch.nn.Module):
    def __init__(self, out, fail):
        super().__init__()
        self.linear, self.fail = torch.nn.Linear(4, out), fail

    def forward(self, x):
        if self.fail:
            return x @ torch.ones(5, 5)
        return self.linear(x)


def build(ctx):
    hidden = ctx.options["hidden"]
    g = torch.Generator().manual_seed(0)
    x = torch.randn(64, 4, generator=g)
    y = torch.randint(0, 10, (64,), generator=g)
    if ctx.options.get("float_targets"):
        y = y.float()
    if ctx.options.get("bad_label"):
        y[-1] = 12
    if ctx.options.get("float64_inputs"):
        x = x.double()
    data = (Listed if ctx.options.get("listed") else TensorDataset)(x, y)
    model = Net(ctx.options.get("out", 10), ctx.options.get("fail_forward", False))
    if ctx.options.get("sequential"):  # torch's layers only: no frame of this file in a forward
        model = torch.nn.Sequential(torch.nn.Linear(ctx.options["sequential"], 10))
    return Workload(model=model, train_data=data, eval_data=data, num_classes=10)
'''


def _study(folder: Path, workload: str = "my_workload.py:build", **options: object) -> Path:
    (folder / "my_workload.py").write_text(WORKLOAD)
    study = {
        **BASE_STUDY,
        "name": "wl",
        "workload": {"name": workload, "options": {"hidden": 8, **options}},
        "training": {**BASE_STUDY["training"], "max_train_steps": 20, "eval_every": 10, "batch_size": 16},
    }
    path = folder / "study.yaml"
    path.write_text(yaml.safe_dump(study, sort_keys=False))
    return path


def _train(*args: str):
    return CliRunner().invoke(app, ["train", *args, "--no-progress"])


@pytest.fixture(autouse=True)
def _in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("TUNER_DEBUG", raising=False)


RUN = Path("runs/wl/train/run-001")


def test_an_exception_in_the_users_build_names_their_line_and_the_error_log(tmp_path: Path) -> None:
    study = _study(tmp_path)
    study.write_text(study.read_text().replace("hidden: 8", "hiden: 8"))
    result = _train("study.yaml")
    assert result.exit_code == 2
    assert result.output == (
        "error: the workload raised KeyError: 'hidden' at my_workload.py:31 in build "
        f"(traceback: {RUN}/error.log)\n"
    )
    log = (RUN / "error.log").read_text()
    assert "Traceback" in log and 'hidden = ctx.options["hidden"]' in log
    assert read_status(RUN)["status"] == "failed"


def test_an_option_the_workload_never_reads_stops_train_before_any_step(tmp_path: Path) -> None:
    """``fail_froward`` would do nothing (the workload reads ``fail_forward``): refused at the
    build, and, bad input found before any training, no run folder is left behind."""
    _study(tmp_path, fail_froward=True)
    result = _train("study.yaml")
    assert result.exit_code == 2
    assert result.output == (
        "error: workload option 'fail_froward' was never read by my_workload.py:build (it read: bad_label, "
        "fail_forward, float64_inputs, float_targets, hidden, listed, out, sequential; did you mean "
        "'fail_forward'?)\n"
    )
    assert not Path("runs").exists()


def test_an_exception_in_the_users_model_at_the_first_step_names_their_forward(tmp_path: Path) -> None:
    _study(tmp_path, fail_forward=True)
    result = _train("study.yaml")
    assert result.exit_code == 2
    assert result.output.startswith("error: the workload raised RuntimeError: mat1 and mat2 shapes")
    assert f"at my_workload.py:26 in forward (traceback: {RUN}/error.log)\n" in result.output


def test_float64_inputs_into_a_float32_model_are_the_workloads_error_before_training(tmp_path: Path) -> None:
    _study(tmp_path, float64_inputs=True, sequential=4)
    result = _train("study.yaml")
    assert result.exit_code == 2  # the user's to fix, never tuner's internal error (70)
    assert result.output == (
        "error: the workload's inputs are float64 but its model's parameters are float32: convert the "
        "data (e.g. torch.tensor(x, dtype=torch.float32)) or the model (model.to(torch.float64)) "
        f"(traceback: {RUN}/error.log)\n"
    )
    assert read_status(RUN)["status"] == "failed"


def test_a_model_of_torchs_layers_only_that_raises_is_the_workloads_error(tmp_path: Path) -> None:
    """An ``nn.Sequential`` whose first layer takes 5 features of 4: no frame of the user's file
    in the traceback, and still the workload's error (exit 2), not tuner's own."""
    _study(tmp_path, sequential=5)
    result = _train("study.yaml")
    assert result.exit_code == 2
    assert result.output.startswith(
        "error: the workload's model (Sequential) raised RuntimeError: mat1 and mat2 shapes cannot be "
        "multiplied"
    )
    assert result.output.endswith(f" in its forward (traceback: {RUN}/error.log)\n")
    assert "Traceback" in (RUN / "error.log").read_text()


@pytest.mark.parametrize(
    ("options", "message"),
    [
        pytest.param(
            {"out": 3},
            "the workload's model returned logits of shape (16, 3) for targets (16,); "
            "expected (16, 10): num_classes is 10",
            id="class-count",
        ),
        pytest.param(
            {"float_targets": True},
            "the workload's targets are float32; expected integer class indices (torch.long), "
            "e.g. torch.tensor(labels, dtype=torch.long); a workload that predicts numbers returns "
            "Workload(..., task='regression')",
            id="float-targets",
        ),
        pytest.param(
            {"bad_label": True},
            "the workload's training targets include 12, outside 0..9 "
            "(num_classes is 10; -100 marks padding)",
            id="label-out-of-range",
        ),
    ],
)
def test_a_batch_that_breaks_the_contract_is_refused_before_training(
    tmp_path: Path, options: dict, message: str
) -> None:
    _study(tmp_path, **options)
    result = _train("study.yaml")
    assert result.exit_code == 2
    assert result.output == f"error: {message} (traceback: {RUN}/error.log)\n"
    assert not (RUN / "checkpoints" / "latest.pt").exists()  # found before the first eval
    metrics = RUN / "metrics.csv"
    assert not metrics.exists() or len(metrics.read_text().splitlines()) <= 1


def test_a_bad_label_in_the_first_batch_of_any_dataset_is_refused(tmp_path: Path) -> None:
    study = _study(tmp_path, listed=True)
    source = WORKLOAD.replace("y = torch.randint(0, 10", "y = torch.randint(9, 11")
    (tmp_path / "my_workload.py").write_text(source)
    result = _train(str(study))
    assert result.exit_code == 2
    assert "the workload's targets include 10, outside 0..9" in result.output


def _metrics_rows(run_dir: Path) -> list[dict[str, str]]:
    with (run_dir / "metrics.csv").open() as handle:
        return [{k: v for k, v in row.items() if k != "elapsed_s"} for row in csv.DictReader(handle)]


def test_the_first_batch_check_changes_no_number(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The check reads the first step's own logits: no extra forward, no RNG drawn (dropout on)."""
    loaded = load_study(_study(tmp_path))
    spec = loaded.spec.model_copy(deep=True)
    spec.workload.name = "digits-mlp"
    spec.workload.options = {"hidden_sizes": [16], "dropout": 0.3}
    checked = run_training(spec, tmp_path / "checked", base_dir=tmp_path, progress=False)
    monkeypatch.setattr("tuner.train.scoring.check_batch", lambda *args: None)
    unchecked = run_training(spec, tmp_path / "unchecked", base_dir=tmp_path, progress=False)
    assert checked.status == unchecked.status == "completed"
    assert _metrics_rows(tmp_path / "checked") == _metrics_rows(tmp_path / "unchecked")
    weights = [
        torch.load(run / "checkpoints" / "latest.pt", weights_only=True)["model"]
        for run in (tmp_path / "checked", tmp_path / "unchecked")
    ]
    assert all(torch.equal(weights[0][k], weights[1][k]) for k in weights[0])


def test_a_failed_start_on_bad_input_leaves_no_run_folder(tmp_path: Path) -> None:
    _study(tmp_path)
    result = _train("study.yaml", "--set", "objective.metric=val/perplexity")
    assert result.exit_code == 2 and "is not computed by this workload" in result.output
    assert not Path("runs").exists()


def test_a_failed_start_in_user_code_keeps_one_folder_the_fixed_rerun_reuses(tmp_path: Path) -> None:
    study = _study(tmp_path)
    workload = tmp_path / "my_workload.py"
    workload.write_text(WORKLOAD.replace('ctx.options["hidden"]', 'ctx.options["hiden"]'))
    for _ in range(2):
        assert _tuner("train", "study.yaml", "--no-progress").returncode == 2
    assert sorted(p.name for p in RUN.parent.iterdir()) == ["run-001"]
    assert json.loads((RUN / "status.json").read_text())["status"] == "failed"
    workload.write_text(WORKLOAD)
    fixed = _tuner("train", str(study), "--no-progress")
    assert fixed.returncode == 0, fixed.stderr
    assert sorted(p.name for p in RUN.parent.iterdir()) == ["run-001"]
    assert read_status(RUN)["status"] == "completed"


def _tuner(*args: str) -> subprocess.CompletedProcess:
    """The real command, in a fresh process (a user's module is imported once per process);
    ``-P``: like the ``tuner`` script, the current folder is not on ``sys.path``."""
    return run([sys.executable, "-P", "-m", "tuner", *args])  # a timeout kills its group


def test_a_module_entry_point_that_is_a_file_here_gets_a_hint(tmp_path: Path) -> None:
    _study(tmp_path, workload="my_workload:build")
    result = _tuner("train", "study.yaml", "--no-progress")
    assert result.returncode == 2, result.stderr
    assert result.stderr == (
        "error: study.yaml:4:9: workload.name: entry point 'my_workload:build': "
        "no module named 'my_workload'; "
        "for a file next to the study use my_workload.py:build, or add its folder to PYTHONPATH\n"
    )
    assert not Path("runs").exists()
    _study(tmp_path, workload="my_workload.py:build")  # what the hint says works
    assert _tuner("train", "study.yaml", "--no-progress").returncode == 0
