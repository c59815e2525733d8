"""The playbook's switches on one run: ``seed_index``, the proxy validation split, ``augment``."""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

import pytest
import torch
import yaml
from torch.utils.data import Dataset, Subset, TensorDataset

from tests.train_tests import rule_workloads
from tests.train_tests.conftest import write_study
from tuner.errors import UsageError
from tuner.spec import LoadedStudy, load_study
from tuner.train import Callback, read_status, run_training
from tuner.train.build import build_workload
from tuner.train.proxy import proxy_split
from tuner.train.rng import derive_seed, trial_seeds


class Probe(Callback):
    """What the run starts from: weights, data order, evaluation data, the samples."""

    def on_fit_start(self, loop: Any) -> None:
        self.weights = {k: v.clone() for k, v in loop.model.state_dict().items()}
        self.first_batch = loop.batches.indices(0).clone()
        self.data_seed = loop.batches.data_seed
        self.train_size = len(loop.batches.dataset)
        self.val = [t.clone() for t in loop.evaluator.splits["val"].tensors]
        self.train_eval = loop.evaluator.subsets.get("train")
        self.prediction_indices = loop.evaluator.prediction_indices.clone()


def _probe(loaded: LoadedStudy, run_dir: Path) -> tuple[Probe, Any]:
    probe = Probe()
    result = run_training(
        loaded.spec, run_dir, base_dir=loaded.base_dir, extra_callbacks=[probe], progress=False
    )
    return probe, result


def _predicted_examples(run_dir: Path) -> list[str]:
    with (run_dir / "predictions.csv").open() as handle:
        return sorted({row["example"] for row in csv.DictReader(handle)})


FEW_STEPS = {"max_train_steps": 12, "eval_every": 12, "train_eval_examples": 100}


def test_seed_index_moves_init_and_data_order_but_not_what_is_evaluated(make_study, tmp_path: Path) -> None:
    first, _ = _probe(make_study(**FEW_STEPS), tmp_path / "k0")
    other, _ = _probe(make_study(seed_index=1, **FEW_STEPS), tmp_path / "k1")

    assert any(not torch.equal(first.weights[k], other.weights[k]) for k in first.weights)
    assert first.data_seed != other.data_seed
    assert not torch.equal(first.first_batch, other.first_batch)
    # the same validation examples, train-eval sample and prediction sample for every seed
    assert all(torch.equal(a, b) for a, b in zip(first.val, other.val, strict=True))
    assert torch.equal(first.train_eval, other.train_eval)
    assert torch.equal(first.prediction_indices, other.prediction_indices)
    assert _predicted_examples(tmp_path / "k0") == _predicted_examples(tmp_path / "k1")


def test_seed_index_0_keeps_the_seeds_runs_had_before_it_existed(make_study, tmp_path: Path) -> None:
    loaded = make_study(**FEW_STEPS)
    assert loaded.spec.training.seed_index == 0
    seeds = trial_seeds(loaded.spec)
    assert (seeds.init, seeds.data) == (derive_seed(0, "init"), derive_seed(0, "data"))
    probe, _ = _probe(loaded, tmp_path / "run")
    assert probe.data_seed == derive_seed(0, "data")
    built = build_workload(loaded.spec, loaded.base_dir, init_seed=derive_seed(0, "init"))
    assert all(torch.equal(v, probe.weights[k]) for k, v in built.model.state_dict().items())

    k2 = trial_seeds(make_study(seed_index=2).spec)
    assert (k2.init, k2.data) == (derive_seed(0, "init", 2), derive_seed(0, "data", 2))


def test_an_explicit_data_seed_still_wins_over_seed_index(make_study, tmp_path: Path) -> None:
    loaded = make_study(seed_index=3, **FEW_STEPS)
    probe = Probe()
    run_training(
        loaded.spec, tmp_path / "run", base_dir=loaded.base_dir, extra_callbacks=[probe],
        data_seed=1234, progress=False,
    )  # fmt: skip
    assert probe.data_seed == 1234


def test_proxy_split_is_disjoint_complete_seeded_and_keeps_tensor_datasets() -> None:
    data = TensorDataset(torch.arange(50).float().unsqueeze(1), torch.arange(50))
    split = proxy_split(data, 0.1, seed=7)
    held, kept = split.held_out_indices.tolist(), split.train_indices.tolist()
    assert len(held) == 5 and len(kept) == 45
    assert not set(held) & set(kept) and sorted(held + kept) == list(range(50))
    assert isinstance(split.train, TensorDataset) and isinstance(split.held_out, TensorDataset)
    assert split.held_out.tensors[1].tolist() == held  # the rows themselves, in order
    assert held == proxy_split(data, 0.1, seed=7).held_out_indices.tolist()
    assert held != proxy_split(data, 0.1, seed=8).held_out_indices.tolist()
    assert len(proxy_split(data, 0.01, seed=7).held_out_indices) == 1  # ceil: at least one

    class Plain(Dataset):
        def __len__(self) -> int:
            return 10

        def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
            return torch.tensor([float(i)]), i

    plain = proxy_split(Plain(), 0.3, seed=1)
    assert isinstance(plain.held_out, Subset) and [plain.held_out[i][1] for i in range(3)] == (
        plain.held_out_indices.tolist()
    )
    with pytest.raises(UsageError, match="proxy_fraction"):
        proxy_split(Plain(), 0.95, seed=1)  # ceil(9.5) = 10 held out, nothing to train on


def test_proxy_run_validates_on_a_held_out_part_of_the_training_split(make_study, tmp_path: Path) -> None:
    fields = {**FEW_STEPS, "proxy_fraction": 0.1, "prediction_samples": 10_000}
    loaded = make_study(**fields)
    full = build_workload(loaded.spec, loaded.base_dir, init_seed=0).train_data
    expected = proxy_split(full, 0.1, derive_seed(0, "proxy"))
    held = len(expected.held_out_indices)
    assert held == -(-len(full) // 10)

    probe, result = _probe(loaded, tmp_path / "k0")
    other, _ = _probe(make_study(seed_index=1, **fields), tmp_path / "k1")
    again, _ = _probe(loaded, tmp_path / "again")
    assert probe.train_size == len(full) - held
    for seen in (probe, other, again):  # every seed and every run: the same held-out examples
        assert all(torch.equal(a, b) for a, b in zip(seen.val, expected.held_out.tensors, strict=True))
    # the "val" metrics are computed on the held-out part: every example of it is scored
    assert len(_predicted_examples(tmp_path / "k0")) == held
    assert result.validation == f"proxy (10% of the training split, {held} examples)"
    assert read_status(tmp_path / "k0")["validation"] == result.validation


def test_a_proxy_fraction_leaving_no_training_data_is_refused(make_study, tmp_path: Path) -> None:
    loaded = make_study(**FEW_STEPS, proxy_fraction=0.9999)
    with pytest.raises(UsageError) as caught:
        run_training(loaded.spec, tmp_path / "run", base_dir=loaded.base_dir, progress=False)
    assert "proxy_fraction" in str(caught.value) and "\n" not in str(caught.value)
    assert not (tmp_path / "run").exists()


def _augmented_study(folder: Path, augment: bool, options: dict[str, Any]) -> LoadedStudy:
    folder.mkdir(parents=True, exist_ok=True)
    path = write_study(
        folder, max_train_steps=20, eval_every=10, batch_size=16, eval_batch_size=16, augment=augment
    )
    study = yaml.safe_load(path.read_text())
    study["workload"] = {"name": "tests.train_tests.rule_workloads:build_augmented", "options": options}
    path.write_text(yaml.safe_dump(study, sort_keys=False))
    return load_study(path)


def _rows(run_dir: Path) -> list[dict[str, str]]:
    with (run_dir / "metrics.csv").open() as handle:
        return [{k: v for k, v in row.items() if k != "elapsed_s"} for row in csv.DictReader(handle)]


def test_augment_false_trains_exactly_as_a_workload_without_augmentation(tmp_path: Path) -> None:
    def train(name: str, augment: bool, options: dict[str, Any]) -> list[dict[str, str]]:
        loaded = _augmented_study(tmp_path / name, augment, options)
        run_training(loaded.spec, tmp_path / name / "run", base_dir=loaded.base_dir, progress=False)
        return _rows(tmp_path / name / "run")

    rule_workloads.AUGMENT_CALLS.clear()
    switched_off = train("off", False, {})
    assert rule_workloads.AUGMENT_CALLS == []  # the workload's augment was never called
    assert switched_off == train("none", True, {"augment": False})
    assert switched_off != train("on", True, {})  # and it would have changed the batches
    assert len(rule_workloads.AUGMENT_CALLS) == 20
