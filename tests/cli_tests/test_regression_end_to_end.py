"""A regression tuned end to end: ``tuner init regression``, ``tune --budget``, ``report``, and the
delivered model loaded in plain PyTorch scores on the validation split what the report says.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
import torch

from tests._warm_processes import run_warm_tuner
from tuner.train import load_model

SETS = [
    "--set", "workload.n_examples=600",
    "--set", "max_train_steps=200",
    "--set", "eval_every=50",
    "--set", "log_every=50",
]  # fmt: skip


def _tuner(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """``tuner ARGS`` run in ``cwd``, forked from the test process's zygote (``tests._warm_processes``:
    the command's code after its imports; its workers and trials are real processes too)."""
    env = {**os.environ, "COLUMNS": "200"}
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(cwd)  # the zygote starts the command in the test process's folder
        return run_warm_tuner(*args, env=env, timeout=600)


@pytest.fixture(scope="module")
def tuned(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    """The folder a newcomer's regression was tuned in, and its report as JSON."""
    folder = tmp_path_factory.mktemp("regression")
    assert _tuner("init", "regression", "studies/reg.yaml", cwd=folder).returncode == 0
    # 1,500 steps: every stage of tune in 7 trials of 200 steps (round 1 of 3, round 2 of 3,
    # a round 3 of 1); round 1's best (val/mse ~0.26) is well under half of chance (~1.0)
    result = _tuner("tune", "studies/reg.yaml", "--budget", "1500", "--workers", "2", *SETS, cwd=folder)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "delivered    val/mse = " in result.stdout
    report = _tuner("report", "studies/reg.yaml", "--json", cwd=folder)
    assert report.returncode == 0, report.stderr
    return folder, json.loads(report.stdout)


def test_the_report_judges_the_regression_against_predicting_the_training_mean(
    tuned: tuple[Path, dict],
) -> None:
    _, report = tuned
    learning = report["phases"][-1]["learning"]  # round 1's
    assert learning["learned"] is True
    (verdict,) = learning["verdicts"]
    assert verdict["kind"] == "learned" and verdict["classes"] is None
    assert verdict["chance"] == pytest.approx(1.0, abs=0.2)  # standardised targets: the mean scores ~1
    assert verdict["best_value"] < 0.5 * verdict["chance"]
    assert report["delivered_model"]["metric"] == "val/mse"


def test_the_delivered_regression_model_predicts_in_plain_pytorch(tuned: tuple[Path, dict]) -> None:
    folder, report = tuned
    delivered = report["delivered_model"]
    model = load_model(folder / delivered["checkpoint"])
    from tuner.workloads import WorkloadContext, regression

    workload = regression.build(WorkloadContext(options={"n_examples": 600}, seed=0))
    x, y = workload.eval_data.tensors
    with torch.no_grad():
        mse = float((model(x).squeeze(-1) - y).square().mean())
    assert mse == pytest.approx(delivered["value"], rel=1e-4)
