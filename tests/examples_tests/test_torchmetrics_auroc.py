"""``examples/torchmetrics-auroc``: a two-input model with its own step (an auxiliary loss), tuned
on a torchmetrics AUROC with RMSprop and a slower-learning pair of towers; the delivered model
reproduces the reported AUROC, balanced accuracy and loss in plain PyTorch, by scikit-learn's hand."""

from __future__ import annotations

import pytest
import torch
import yaml
from sklearn.metrics import balanced_accuracy_score, roc_auc_score
from torch.nn import functional

from tests.examples_tests._support import Tuned, tune_example

pytestmark = pytest.mark.examples


@pytest.fixture(scope="module")
def tuned(tmp_path_factory: pytest.TempPathFactory) -> Tuned:
    return tune_example("torchmetrics-auroc", tmp_path_factory.mktemp("auroc"), budget=800)


def test_the_objective_is_the_torchmetrics_auroc_and_every_own_metric_is_reported(tuned: Tuned) -> None:
    delivered = tuned.delivered
    assert delivered["delivered"] is True
    assert (delivered["metric"], delivered["direction"]) == ("val/auroc", "maximize")
    metrics = tuned.checkpoint_metrics()
    assert metrics["val/auroc"] == pytest.approx(delivered["value"])
    assert metrics["val/auroc"] > 0.8  # 0.5 for a model that learned nothing
    for split in ("train", "val"):
        assert 0 < metrics[f"{split}/f1"] <= 1 and 0 < metrics[f"{split}/balanced_accuracy"] <= 1
    assert metrics["val/balanced_accuracy"] > 1 / 3


def test_the_optimizer_is_rmsprop_with_its_options_and_the_towers_lr_scale(tuned: Tuned) -> None:
    state = torch.load(tuned.checkpoint, weights_only=True)["optimizer"]
    groups = state["param_groups"]
    assert all(group["alpha"] == 0.9 and group["centered"] is True for group in groups)
    tower_scale = tuned.delivered["params"]["workload.tower_lr_scale"]
    assert sorted(group["lr_scale"] for group in groups) == pytest.approx(sorted([tower_scale, 1.0]))


def test_the_delivered_model_reproduces_the_reported_metrics_in_plain_pytorch(tuned: Tuned) -> None:
    from tuner.train import load_model

    model = load_model(tuned.checkpoint, trust_code=True)
    assert type(model).__name__ == "TwoTowers"
    eval_data = tuned.workload().eval_data
    with torch.no_grad():
        logits, aux_a, aux_b = model(eval_data.view_a, eval_data.view_b)
    labels = eval_data.y
    probabilities = logits.softmax(dim=-1).numpy()
    metrics = tuned.checkpoint_metrics()
    auroc = roc_auc_score(labels.numpy(), probabilities, multi_class="ovr", average="macro")
    assert auroc == pytest.approx(tuned.delivered["value"], rel=1e-5)
    balanced = balanced_accuracy_score(labels.numpy(), logits.argmax(dim=-1).numpy())
    assert balanced == pytest.approx(metrics["val/balanced_accuracy"], rel=1e-9)
    aux = functional.cross_entropy(aux_a, labels) + functional.cross_entropy(aux_b, labels)
    aux_weight = yaml.safe_load((tuned.folder / "study.yaml").read_text())["workload"]["options"][
        "aux_weight"
    ]
    loss = functional.cross_entropy(logits, labels) + aux_weight * aux / 2  # the step's
    assert float(loss) == pytest.approx(metrics["val/loss"], rel=1e-5)
