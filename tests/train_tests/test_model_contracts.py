"""Models as users already train them: dict items with ``labels`` and a model that computes its own
(shifted) loss, two inputs and an auxiliary loss through a workload ``step``; and, for what breaks
the contract, one line and exit 2 before the first step where it can be."""

from __future__ import annotations

import csv
import math
import shutil
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn.functional as F
import yaml
from torch.utils.data import default_collate

from tests.spec_tests._support import invoke, single_error
from tuner.spec import load_study
from tuner.train import load_model, read_status, run_training
from tuner.workloads import IGNORE_INDEX

HERE = Path(__file__).parent


def contract_study(folder: Path, entry: str, metric: str = "val/loss", **training: Any) -> Path:
    """A study of ``contract_workloads.py:<entry>`` in ``folder`` (the file copied beside it)."""
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copy(HERE / "contract_workloads.py", folder / "contract_workloads.py")
    study = {
        "name": "contract",
        "workload": {"name": f"contract_workloads.py:{entry}"},
        "objective": {"metric": metric},
        "training": {
            "batch_size": 8,
            "eval_batch_size": 5,  # 17 validation items: batches of 5, 5, 5, 2
            "max_train_steps": 30,
            "eval_every": 10,
            "log_every": 1,
            "prediction_samples": 3,
            "tensorboard": False,
            "device": "cpu",
            "optimizer": {"name": "adamw", "lr": 0.01},
            **training,
        },
    }
    path = folder / "study.yaml"
    path.write_text(yaml.safe_dump(study, sort_keys=False))
    return path


def _train(path: Path, *sets: str) -> Any:
    args = ["train", str(path), "--output-dir", str(path.parent / "runs"), "--no-progress"]
    for item in sets:
        args += ["--set", item]
    return invoke(*args)


def _val_rows(run_dir: Path) -> dict[int, dict[str, str]]:
    with (run_dir / "metrics.csv").open() as handle:
        return {int(row["step"]): row for row in csv.DictReader(handle) if row.get("val/loss")}


def test_dict_items_and_a_models_own_shifted_loss_are_scored_exactly(tmp_path: Path) -> None:
    """Perplexity and token accuracy over the whole split, as one pass computes them by hand:
    position t's logits against label t+1, padding (-100) left out, batches of 5, 5, 5 and 2."""
    loaded = load_study(contract_study(tmp_path, "own_loss_lm", metric="val/perplexity"))
    result = run_training(loaded.spec, tmp_path / "run", base_dir=loaded.base_dir, progress=False)
    assert result.status == "completed" and result.best_step is not None
    checkpoint = tmp_path / "run" / "checkpoints" / f"best-step{result.best_step:08d}.pt"
    model = load_model(checkpoint)
    from tests.train_tests.contract_workloads import TokenItems

    items = TokenItems(17, seed=loaded.spec.seed + 1)
    batch = default_collate([items[i] for i in range(len(items))])
    with torch.no_grad():
        logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"])["logits"]
    scores, labels = logits[:, :-1].reshape(-1, logits.shape[-1]), batch["labels"][:, 1:].reshape(-1)
    kept = labels != IGNORE_INDEX
    assert int((~kept).sum()) > 0  # the split has padding to leave out
    loss = F.cross_entropy(scores[kept], labels[kept]).item()
    accuracy = (scores[kept].argmax(-1) == labels[kept]).float().mean().item()
    row = _val_rows(tmp_path / "run")[result.best_step]
    assert float(row["val/loss"]) == pytest.approx(loss, rel=1e-5)
    assert float(row["val/perplexity"]) == pytest.approx(math.exp(loss), rel=1e-5)
    assert float(row["val/accuracy"]) == pytest.approx(accuracy, abs=1e-9)
    assert result.best_value < 7.0  # below the vocabulary size: it learned something


def test_a_models_own_loss_trains_it(tmp_path: Path) -> None:
    loaded = load_study(contract_study(tmp_path, "own_loss_lm", max_train_steps=60))
    run_training(loaded.spec, tmp_path / "run", base_dir=loaded.base_dir, progress=False)
    rows = _val_rows(tmp_path / "run")
    assert float(rows[60]["val/loss"]) < 0.7 * float(rows[10]["val/loss"])


def test_two_inputs_and_an_auxiliary_loss_train_through_the_workloads_step(tmp_path: Path) -> None:
    path = contract_study(tmp_path, "two_inputs", metric="val/accuracy", max_train_steps=60)
    result = _train(path)
    assert result.exit_code == 0, result.output
    (run_dir,) = (tmp_path / "runs" / "contract" / "train").iterdir()
    status = read_status(run_dir)
    assert status["status"] == "completed"
    assert status["last_eval"]["val/accuracy"] > 0.6  # three classes: chance is about a third
    with (run_dir / "predictions.csv").open() as handle:
        rows = list(csv.DictReader(handle))
    assert rows and all(row["loss"] == "" for row in rows)  # a step's loss is its batch's mean


@pytest.mark.parametrize(
    ("entry", "words"),
    [
        ("tuple_model", "the workload's model returned a tuple of 2; tuner reads a tensor of logits"),
        ("no_logits_nor_loss", "returned dict, with neither logits nor a loss"),
        (
            "strings_in_batch",
            "the workload's batch['text'] is a list of str, which tuner cannot move to a device",
        ),
        ("vector_metric", "the workload's metric 'recall_per_class' returned a tensor of shape (3,)"),
    ],
)
def test_what_breaks_the_contract_is_one_line_and_exit_2(tmp_path: Path, entry: str, words: str) -> None:
    result = _train(contract_study(tmp_path, entry))
    message = single_error(result)
    assert words in message, message


def test_a_model_without_logits_cannot_be_scored_on_accuracy(tmp_path: Path) -> None:
    """The own-loss model's logits are what an accuracy reads; a loss alone scores loss only."""
    from tuner.train.metrics import MetricAccumulator

    accumulator = MetricAccumulator(("loss", "accuracy"), 3)
    with pytest.raises(Exception, match="metric\\(s\\) accuracy need the model's logits"):
        accumulator.update(None, None, mean_loss=torch.tensor(1.0), count=4)
