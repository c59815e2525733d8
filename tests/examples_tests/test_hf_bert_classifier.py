"""``examples/hf-bert-classifier``: a Hugging Face BERT classifier tuned end to end on its own
metric (a torchmetrics macro F1), whose delivered model scores that F1 in plain PyTorch, by
scikit-learn's hand."""

from __future__ import annotations

import pytest
import torch
from sklearn.metrics import f1_score

from tests.examples_tests._support import Tuned, tune_example

pytestmark = pytest.mark.examples


@pytest.fixture(scope="module")
def tuned(tmp_path_factory: pytest.TempPathFactory) -> Tuned:
    return tune_example("hf-bert-classifier", tmp_path_factory.mktemp("hf-bert"), budget=600)


def test_the_objective_is_the_workloads_own_f1_and_it_learned(tuned: Tuned) -> None:
    delivered = tuned.delivered
    assert delivered["delivered"] is True
    assert (delivered["metric"], delivered["direction"]) == ("val/f1", "maximize")
    metrics = tuned.checkpoint_metrics()
    assert metrics["val/f1"] == pytest.approx(delivered["value"])
    chance = 1 / 3  # three topics, drawn evenly
    assert metrics["val/f1"] > 0.5 and metrics["val/accuracy"] > 0.5 > chance
    assert {"val/loss", "train/f1", "train/accuracy"} <= set(metrics)


def test_the_delivered_bert_scores_the_reported_f1_in_plain_pytorch(tuned: Tuned) -> None:
    from transformers import BertForSequenceClassification

    from tuner.train import load_model

    model = load_model(tuned.checkpoint, trust_code=True)
    assert type(model) is BertForSequenceClassification
    workload = tuned.workload()
    items = [workload.eval_data[i] for i in range(len(workload.eval_data))]
    predicted, labels = [], []
    with torch.no_grad():
        for start in range(0, len(items), 100):
            batch = workload.collate(items[start : start + 100])  # transformers pads the sentences
            logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
            predicted += logits.argmax(dim=-1).tolist()
            labels += batch["labels"].tolist()
    f1 = f1_score(labels, predicted, average="macro")
    assert f1 == pytest.approx(tuned.delivered["value"], rel=1e-6)
