"""Logs a user reads (CSV, TensorBoard), evaluation weighting, and the two kinds of seed."""

from __future__ import annotations

import csv
from pathlib import Path

import torch

from tuner.train import Evaluator, StepBatches, run_training
from tuner.train.build import build_workload
from tuner.train.rng import derive_seed
from tuner.train.run_parts import cross_entropy_per_item


def test_csv_columns_are_fixed_from_the_first_row(make_study, tmp_path: Path) -> None:
    loaded = make_study(max_train_steps=20, eval_every=10)
    run_training(loaded.spec, tmp_path / "run", base_dir=loaded.base_dir, progress=False)
    with (tmp_path / "run" / "metrics.csv").open() as handle:
        header, *rows = list(csv.reader(handle))
    assert header[:4] == ["step", "lr", "train/step_loss", "elapsed_s"]
    for split in ("val", "train"):
        for metric in ("loss", "accuracy", "error_rate", "top5_accuracy", "mcc"):
            assert f"{split}/{metric}" in header
    assert all(len(row) == len(header) for row in rows)


def test_tensorboard_gets_one_folder_per_run_with_eval_scalars(make_study, tmp_path: Path) -> None:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    loaded = make_study(max_train_steps=40, eval_every=20, tensorboard=True)
    run_training(loaded.spec, tmp_path / "run", base_dir=loaded.base_dir, progress=False)
    events = EventAccumulator(str(tmp_path / "run" / "tensorboard"))
    events.Reload()
    assert [e.step for e in events.Scalars("val/error_rate")] == [20, 40]
    assert "train/step_loss" in events.Tags()["scalars"]


def test_final_train_loss_is_logged_when_off_the_log_interval(make_study, tmp_path: Path) -> None:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    loaded = make_study(max_train_steps=23, eval_every=10, log_every=5, tensorboard=True)
    run_training(loaded.spec, tmp_path / "run", base_dir=loaded.base_dir, progress=False)
    events = EventAccumulator(str(tmp_path / "run" / "tensorboard"))
    events.Reload()
    assert [e.step for e in events.Scalars("train/step_loss")] == [5, 10, 15, 20, 23]
    with (tmp_path / "run" / "metrics.csv").open() as handle:
        logged = [int(row["step"]) for row in csv.DictReader(handle) if row["train/step_loss"]]
    assert logged == [5, 10, 15, 20, 23]


def test_partial_eval_batches_weigh_by_real_examples(make_study) -> None:
    loaded = make_study()
    workload = build_workload(loaded.spec, loaded.base_dir, init_seed=0)
    assert len(workload.eval_data) % 7 != 0

    def evaluate(batch_size: int) -> dict[str, float]:
        evaluator = Evaluator(
            {"val": workload.eval_data},
            loss_fn=cross_entropy_per_item,
            metrics=["loss", "accuracy", "mcc"],
            num_classes=10,
            batch_size=batch_size,
        )
        return evaluator.run(workload.model)[0]

    small, whole = evaluate(7), evaluate(10_000)
    assert small["val/accuracy"] == whole["val/accuracy"]
    assert small["val/mcc"] == whole["val/mcc"]
    assert abs(small["val/loss"] - whole["val/loss"]) <= 1e-6 * whole["val/loss"]


def test_model_init_seed_and_data_seed_are_independent(make_study) -> None:
    loaded = make_study()
    first = build_workload(loaded.spec, loaded.base_dir, init_seed=derive_seed(0, "init"))
    again = build_workload(loaded.spec, loaded.base_dir, init_seed=derive_seed(0, "init"))
    other = build_workload(loaded.spec, loaded.base_dir, init_seed=derive_seed(1, "init"))
    weights = [next(iter(w.model.parameters())) for w in (first, again, other)]
    assert torch.equal(weights[0], weights[1]) and not torch.equal(weights[0], weights[2])

    order = [StepBatches(first.train_data, 32, seed).indices(0) for seed in (5, 5, 6)]
    assert torch.equal(order[0], order[1]) and not torch.equal(order[0], order[2])
    assert derive_seed(0, "data", 0) != derive_seed(0, "data", 1)  # e.g. one data seed per rank


def test_batches_cover_each_epoch_once(make_study) -> None:
    loaded = make_study()
    data = build_workload(loaded.spec, loaded.base_dir, init_seed=0).train_data
    batches = StepBatches(data, 32, data_seed=3)
    epoch = torch.cat([batches.indices(step) for step in range(batches.steps_per_epoch)])
    assert len(set(epoch.tolist())) == len(epoch) == batches.steps_per_epoch * 32
    assert not torch.equal(batches.indices(0), batches.indices(batches.steps_per_epoch))  # reshuffled


def test_prediction_sample_is_scored_in_eval_batches(make_study) -> None:
    loaded = make_study()
    workload = build_workload(loaded.spec, loaded.base_dir, init_seed=0)
    sample = torch.arange(0, 50, 2)  # 25 examples

    def predictions(batch_size: int) -> tuple[list[dict], list[int]]:
        seen: list[int] = []
        hook = workload.model.register_forward_hook(lambda module, args, output: seen.append(len(args[0])))
        evaluator = Evaluator(
            {"val": workload.eval_data},
            loss_fn=cross_entropy_per_item,
            metrics=["loss"],
            num_classes=10,
            batch_size=batch_size,
            prediction_indices=sample,
        )
        try:
            return evaluator.run(workload.model)[1], seen
        finally:
            hook.remove()

    batched, batch_sizes = predictions(8)
    whole, _ = predictions(1000)
    assert max(batch_sizes) == 8  # metrics and the 25-example sample alike: never more than a batch
    assert [row["example"] for row in batched] == sample.tolist()
    pairs = [[(r["prediction"], r["target"]) for r in rows] for rows in (batched, whole)]
    assert pairs[0] == pairs[1]
    assert all(abs(a["loss"] - b["loss"]) <= 1e-5 for a, b in zip(batched, whole, strict=True))


def test_derived_seeds_of_labels_with_the_same_characters_differ() -> None:
    # Characters four places apart used to land on the same byte of an additive hash.
    assert derive_seed(0, "abcdef") != derive_seed(0, "ebcdaf")
    assert derive_seed(0, "init") != derive_seed(1, "init") != derive_seed(0, "data")
    assert derive_seed(0, "1") != derive_seed(0, 1)  # a label's type is part of it
    assert derive_seed(7, "data", 3) == derive_seed(7, "data", 3)  # and it is a pure function
    assert all(0 <= derive_seed(seed, "x") < 2**31 for seed in range(50))


def test_imbalanced_data_records_each_evaluated_splits_class_counts(tmp_path: Path) -> None:
    """For the report's minority-class counts and its check of a sampled train-split eval."""
    import json

    import yaml

    from tuner.spec import load_study

    study = {
        "name": "imbalanced-counts",
        "workload": {
            "name": "imbalanced",
            "options": {"n_examples": 400, "class_weights": [0.85, 0.1, 0.05]},
        },
        "objective": {"metric": "val/mcc", "direction": "maximize"},
        "training": {
            "batch_size": 32,
            "max_train_steps": 4,
            "eval_every": 2,
            "train_eval_examples": 50,
            "tensorboard": False,
            "device": "cpu",
        },
    }
    path = tmp_path / "study.yaml"
    path.write_text(yaml.safe_dump(study))
    loaded = load_study(path)
    run_training(loaded.spec, tmp_path / "run", base_dir=loaded.base_dir, progress=False)
    status = json.loads((tmp_path / "run" / "status.json").read_text())
    counts = status["class_counts"]
    assert sum(counts["train"]) + sum(counts["val"]) == 400
    assert sum(counts["train_eval_sample"]) == 50 and len(counts["train_eval_sample"]) == 3
    assert counts["val"][0] > counts["val"][1] > counts["val"][2] > 0
    # the correct counts at the last eval never exceed the examples of their class
    last = status["last_eval"]
    assert all(last[f"val/class_{k}_correct"] <= counts["val"][k] for k in range(3))
    assert all(last[f"train/class_{k}_correct"] <= counts["train_eval_sample"][k] for k in range(3))
