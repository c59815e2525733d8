"""``examples/timm-images``: a timm model tuned end to end under bfloat16 autocast with its own
augmentation; the delivered model is timm's own class and scores the reported error rate.

timm imports torchvision, whose PyPI wheels need the torch they were built with: this file runs
in the venv ``make examples`` makes for it (``.venv-timm``), not in ``.venv``.
"""

from __future__ import annotations

import pytest
import torch
import yaml

from tests.examples_tests._support import Tuned, tune_example

pytestmark = pytest.mark.examples


@pytest.fixture(scope="module")
def tuned(tmp_path_factory: pytest.TempPathFactory) -> Tuned:
    return tune_example("timm-images", tmp_path_factory.mktemp("timm-images"), budget=240)


def test_the_delivered_timm_model_learned_the_colours(tuned: Tuned) -> None:
    delivered = tuned.delivered
    assert delivered["delivered"] is True and delivered["metric"] == "val/error_rate"
    metrics = tuned.checkpoint_metrics()
    assert metrics["val/error_rate"] == pytest.approx(delivered["value"])
    chance = 0.75  # four colours, drawn evenly
    assert metrics["val/error_rate"] < 0.8 * chance


def test_the_trials_trained_under_bfloat16_autocast(tuned: Tuned) -> None:
    config = yaml.safe_load((tuned.checkpoint.parents[1] / "config.yaml").read_text())
    assert config["training"]["precision"] == "bf16-mixed"
    assert config["training"]["augment"] is True  # the workload's flips and crops, on every batch


def test_the_delivered_timm_model_scores_the_reported_error_rate_in_plain_pytorch(tuned: Tuned) -> None:
    import timm.models

    from tuner.train import load_model

    model = load_model(tuned.checkpoint, trust_code=True)
    assert isinstance(model, timm.models.VisionTransformer)
    images, labels = tuned.workload().eval_data.tensors
    with torch.no_grad():
        # as the run scored it: under the autocast it trained in, in batches of its eval batch (128)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            logits = torch.cat([model(part) for part in images.split(128)])
        in_float32 = model(images)
    error_rate = int((logits.argmax(dim=-1) != labels).sum()) / len(labels)
    assert error_rate == pytest.approx(tuned.delivered["value"], rel=1e-9)
    float32_error_rate = int((in_float32.argmax(dim=-1) != labels).sum()) / len(labels)
    assert float32_error_rate == pytest.approx(error_rate, abs=0.03)  # bfloat16 moves a few borderline ones
