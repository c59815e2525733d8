"""A workload's own metrics: torchmetrics objects and plain functions, scored on the whole split
(never averaged over batches), equal to scikit-learn on the same predictions, and the same with
two processes as with one; a model's own shifted loss sums across processes exactly too."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from sklearn.metrics import f1_score, roc_auc_score
from torchmetrics.classification import MulticlassAUROC, MulticlassF1Score

from tests.train_tests.contract_ddp_checks import own_loss_case, own_metrics_case
from tests.train_tests.test_model_contracts import _train, contract_study
from tuner.train import Ranks, read_status
from tuner.train.evaluation import Evaluator
from tuner.train.run_parts import cross_entropy_per_item

ROOT = Path(__file__).resolve().parents[2]


def _scored(batch_size: int) -> tuple[dict[str, float], torch.Tensor, torch.Tensor]:
    """An imbalanced 3-class split of 50 scored by torchmetrics in batches of ``batch_size``; and
    its logits and targets for scikit-learn."""
    generator = torch.Generator().manual_seed(0)
    inputs = torch.randn(50, 6, generator=generator)
    targets = torch.cat([torch.zeros(35), torch.ones(10), torch.full((5,), 2)]).long()
    torch.manual_seed(1)
    model = torch.nn.Linear(6, 3)
    evaluator = Evaluator(
        {"val": torch.utils.data.TensorDataset(inputs, targets)},
        loss_fn=cross_entropy_per_item,
        metrics=("loss",),
        num_classes=3,
        batch_size=batch_size,
        own_metrics={
            "f1": MulticlassF1Score(num_classes=3, average="macro"),
            "auroc": MulticlassAUROC(num_classes=3),
            "f1_sklearn": lambda out, y: f1_score(y.numpy(), out.argmax(-1).numpy(), average="macro"),
        },
    )
    with torch.no_grad():
        logits = model(inputs)
    return evaluator.run(model)[0], logits, targets


def test_torchmetrics_and_a_function_equal_scikit_learn_on_the_whole_split() -> None:
    metrics, logits, targets = _scored(batch_size=7)  # 7 batches, the last of 1
    expected_f1 = f1_score(targets.numpy(), logits.argmax(-1).numpy(), average="macro")
    expected_auroc = roc_auc_score(
        targets.numpy(), logits.softmax(-1).numpy(), multi_class="ovr", average="macro"
    )
    assert metrics["val/f1"] == pytest.approx(expected_f1, abs=1e-6)
    assert metrics["val/f1_sklearn"] == pytest.approx(expected_f1, abs=1e-12)
    assert metrics["val/auroc"] == pytest.approx(expected_auroc, abs=1e-6)


def test_a_whole_split_metric_is_not_a_mean_over_batches() -> None:
    """Batches of 7 and one batch of 50 give the same F1: a per-batch mean would not."""
    by_batches, one_batch = _scored(batch_size=7)[0], _scored(batch_size=50)[0]
    assert by_batches["val/f1"] == pytest.approx(one_batch["val/f1"], abs=1e-7)
    assert by_batches["val/auroc"] == pytest.approx(one_batch["val/auroc"], abs=1e-7)


@pytest.fixture(scope="module")
def two_processes(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    out = tmp_path_factory.mktemp("ranks") / "out.pt"
    subprocess.run(
        [sys.executable, "-m", "tests.train_tests.contract_ddp_checks", str(out)],
        cwd=ROOT,
        check=True,
        timeout=600,
    )
    return torch.load(out, weights_only=False)


def test_own_metrics_are_the_same_with_two_processes(two_processes: dict[str, Any]) -> None:
    one = own_metrics_case(Ranks())
    two = two_processes["own_metrics"]
    assert two.keys() == one.keys()
    for name in one:
        assert two[name] == pytest.approx(one[name], abs=1e-6), name
    assert two["val/examples"] == 31.0  # the function saw every example once


def test_a_models_own_shifted_loss_sums_exactly_across_processes(two_processes: dict[str, Any]) -> None:
    one = own_loss_case(Ranks())
    for name in ("val/loss", "val/perplexity", "val/accuracy"):
        assert two_processes["own_loss"][name] == pytest.approx(one[name], rel=1e-6), name


def test_an_own_metric_can_be_the_objective(tmp_path: Path) -> None:
    path = contract_study(tmp_path, "two_inputs", metric="val/f1", max_train_steps=20)
    text = path.read_text().replace("  metric: val/f1\n", "  metric: val/f1\n  direction: maximize\n")
    text = text.replace("contract_workloads.py:two_inputs", "contract_workloads.py:two_inputs_f1")
    path.write_text(text)
    result = _train(path)
    assert result.exit_code == 0, result.output
    (run_dir,) = (tmp_path / "runs" / "contract" / "train").iterdir()
    status = read_status(run_dir)
    assert status["objective"] == "val/f1" and status["direction"] == "maximize"
    assert 0.0 < status["best_value"] <= 1.0


def test_an_own_metric_as_objective_needs_a_direction(tmp_path: Path) -> None:
    from tests.spec_tests._support import invoke, single_error

    path = contract_study(tmp_path, "two_inputs", metric="val/f1")
    message = single_error(invoke("validate", str(path)))
    assert "'val/f1' is not a metric tuner computes" in message
    assert "set objective.direction (minimize or maximize)" in message
