"""``examples/hf-gpt2``: a Hugging Face GPT-2 tuned end to end, its perplexity computed by hand from
the delivered model, and the model saved and loaded back the Hugging Face way."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from tests.examples_tests._support import Tuned, tune_example
from tuner.workloads import IGNORE_INDEX

pytestmark = pytest.mark.examples


@pytest.fixture(scope="module")
def tuned(tmp_path_factory: pytest.TempPathFactory) -> Tuned:
    return tune_example("hf-gpt2", tmp_path_factory.mktemp("hf-gpt2"), budget=300)


def test_the_delivered_gpt2_predicts_characters_better_than_chance(tuned: Tuned) -> None:
    delivered = tuned.delivered
    assert delivered["delivered"] is True and delivered["metric"] == "val/perplexity"
    metrics = tuned.checkpoint_metrics()
    vocabulary = 57  # the characters of tuner's corpus: a model that learned nothing scores this
    assert metrics["val/perplexity"] == pytest.approx(delivered["value"])
    assert metrics["val/perplexity"] < vocabulary / 2
    assert metrics["val/perplexity"] == pytest.approx(math.exp(metrics["val/loss"]), rel=1e-6)
    assert 0.15 < metrics["val/accuracy"] <= 1


def test_the_delivered_gpt2_scores_the_reported_perplexity_in_plain_pytorch(tuned: Tuned) -> None:
    from transformers import GPT2LMHeadModel

    from tuner.train import load_model

    model = load_model(tuned.checkpoint, trust_code=True)
    assert type(model) is GPT2LMHeadModel
    nll, count = 0.0, 0
    with torch.no_grad():
        for item in tuned.workload().eval_data:
            batch = {key: value[None] for key, value in item.items()}
            logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
            labels = batch["labels"][:, 1:]  # position t predicts character t + 1
            kept = labels != IGNORE_INDEX
            losses = torch.nn.functional.cross_entropy(logits[:, :-1][kept], labels[kept], reduction="sum")
            nll, count = nll + float(losses), count + int(kept.sum())
    assert math.exp(nll / count) == pytest.approx(tuned.delivered["value"], rel=1e-4)


def test_the_delivered_gpt2_saves_and_loads_the_hugging_face_way(tuned: Tuned, tmp_path: Path) -> None:
    from transformers import GPT2LMHeadModel

    from tuner.train import load_model

    model = load_model(tuned.checkpoint, trust_code=True)
    model.save_pretrained(tmp_path / "gpt2")
    again = GPT2LMHeadModel.from_pretrained(tmp_path / "gpt2").eval()
    input_ids = tuned.workload().eval_data[0]["input_ids"][None]
    with torch.no_grad():
        assert torch.equal(model(input_ids=input_ids).logits, again(input_ids=input_ids).logits)
