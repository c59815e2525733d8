"""Rules of the engine that each had no test: --fresh, the optimizers, grad_clip_norm,
train_eval_examples, augment, and checkpoints kept for ``direction: maximize``."""

from __future__ import annotations

import copy
import csv
import json
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn.functional as F
import yaml
from typer.testing import CliRunner

from tests.train_tests import rule_workloads
from tests.train_tests.conftest import write_study
from tuner.cli.app import app
from tuner.spec import LoadedStudy, OptimizerSpec, load_study
from tuner.train import Callback, StopReason, StopTraining, read_status, run_training
from tuner.train.evaluation import fixed_sample
from tuner.train.optimizers import build_optimizer
from tuner.train.rng import derive_seed


class StopAt(Callback):
    """Stops the run at ``step`` the way a signal does (status ``interrupted``, resumable)."""

    def __init__(self, step: int) -> None:
        self.step = step

    def on_train_step_end(self, loop: Any) -> None:
        if loop.step == self.step:
            raise StopTraining(StopReason.INTERRUPTED)


class GradNorms(Callback):
    """The total gradient norm each step's optimizer step used."""

    def __init__(self) -> None:
        self.norms: list[float] = []

    def on_train_step_end(self, loop: Any) -> None:
        grads = [p.grad for p in loop.model.parameters() if p.grad is not None]
        self.norms.append(float(torch.linalg.vector_norm(torch.stack([g.norm() for g in grads]))))


def _study(folder: Path, *overrides: str, workload: dict | None = None, **training: Any) -> LoadedStudy:
    folder.mkdir(parents=True, exist_ok=True)
    path = write_study(folder, **training)
    if workload is not None:
        study = yaml.safe_load(path.read_text())
        study["workload"] = workload
        path.write_text(yaml.safe_dump(study, sort_keys=False))
    return load_study(path, list(overrides))


def _train(loaded: LoadedStudy, run_dir: Path, *callbacks: Callback):
    return run_training(
        loaded.spec, run_dir, base_dir=loaded.base_dir, extra_callbacks=callbacks, progress=False
    )


def _rows(run_dir: Path) -> list[dict[str, str]]:
    with (run_dir / "metrics.csv").open() as handle:
        return [{k: v for k, v in row.items() if k != "elapsed_s"} for row in csv.DictReader(handle)]


def _weights(run_dir: Path) -> dict[str, torch.Tensor]:
    return torch.load(run_dir / "checkpoints" / "latest.pt", weights_only=True)["model"]


def test_fresh_starts_a_new_run_and_leaves_the_unfinished_one_resumable(tmp_path: Path) -> None:
    loaded = _study(tmp_path, max_train_steps=30, eval_every=10)
    run1 = tmp_path / "runs" / "engine-test" / "train" / "run-001"
    assert _train(loaded, run1, StopAt(10)).status == "interrupted"
    args = ["train", str(loaded.path), "--output-dir", str(tmp_path / "runs"), "--no-progress"]

    fresh = CliRunner().invoke(app, [*args, "--fresh"])
    assert fresh.exit_code == 0, fresh.output
    assert "run-002" in fresh.output and "resum" not in fresh.output
    assert read_status(run1)["status"] == "interrupted" and read_status(run1)["step"] == 10

    resumed = CliRunner().invoke(app, args)
    assert resumed.exit_code == 0, resumed.output
    assert "run-001" in resumed.output and "resumed from step 10" in resumed.output


@pytest.mark.parametrize("name", ["sgd", "momentum", "nesterov", "adam", "adamw"])
def test_each_optimizer_is_torchs_with_the_study_settings(name: str) -> None:
    spec = OptimizerSpec(
        name=name, lr=0.05, momentum=0.8, weight_decay=0.01, beta1=0.85, beta2=0.99, eps=1e-7
    )
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 4)
    twin = copy.deepcopy(model)
    sgd = {"lr": 0.05, "weight_decay": 0.01}
    adam = {"lr": 0.05, "betas": (0.85, 0.99), "eps": 1e-7, "weight_decay": 0.01}
    theirs = {
        "sgd": lambda p: torch.optim.SGD(p, **sgd),
        "momentum": lambda p: torch.optim.SGD(p, momentum=0.8, **sgd),
        "nesterov": lambda p: torch.optim.SGD(p, momentum=0.8, nesterov=True, **sgd),
        "adam": lambda p: torch.optim.Adam(p, **adam),
        "adamw": lambda p: torch.optim.AdamW(p, **adam),
    }[name](twin.parameters())
    ours = build_optimizer(spec, model.parameters())
    assert type(ours) is type(theirs)
    inputs, targets = torch.randn(16, 3), torch.randint(0, 4, (16,))
    for _ in range(5):
        for net, optimizer in ((model, ours), (twin, theirs)):
            optimizer.zero_grad()
            F.cross_entropy(net(inputs), targets).backward()
            optimizer.step()
    assert torch.equal(model.weight, twin.weight) and torch.equal(model.bias, twin.bias)


@pytest.mark.parametrize(("name", "lr"), [("momentum", 0.1), ("nesterov", 0.1), ("adam", 1e-2)])
def test_each_optimizer_trains(tmp_path: Path, name: str, lr: float) -> None:
    loaded = _study(
        tmp_path, f"optimizer.name={name}", f"optimizer.lr={lr}", max_train_steps=60, eval_every=30
    )
    seen: list[torch.optim.Optimizer] = []

    class Capture(Callback):
        def on_fit_start(self, loop: Any) -> None:
            seen.append(loop.optimizer)

    result = _train(loaded, tmp_path / "run", Capture())
    assert result.status == "completed"
    assert seen[0].defaults.get("nesterov", False) == (name == "nesterov")
    assert seen[0].defaults.get("momentum", 0.9) == 0.9
    rows = _rows(tmp_path / "run")
    first, last = float(rows[0]["train/step_loss"]), float(rows[-1]["train/step_loss"])
    error_rate = result.last_eval["val/error_rate"]
    assert last < 0.8 * first and error_rate < 0.5, (first, last, error_rate)  # chance: 0.9


def test_grad_clip_norm_caps_the_norm_of_every_step(tmp_path: Path) -> None:
    unclipped, clipped = GradNorms(), GradNorms()
    _train(_study(tmp_path / "a", max_train_steps=20, eval_every=20), tmp_path / "a" / "run", unclipped)
    loaded = _study(tmp_path / "b", max_train_steps=20, eval_every=20, grad_clip_norm=0.05)
    _train(loaded, tmp_path / "b" / "run", clipped)
    assert min(unclipped.norms) > 0.05  # so the cap below is the clip's doing
    assert len(clipped.norms) == 20 and max(clipped.norms) <= 0.05 * (1 + 1e-5)
    assert min(clipped.norms) > 0.05 * (1 - 1e-3)  # clipped to the cap, not zeroed


def test_train_metrics_are_computed_on_exactly_train_eval_examples(tmp_path: Path) -> None:
    workload = {"name": "tests.train_tests.rule_workloads:build_class_zero", "options": {}}
    loaded = _study(
        tmp_path,
        workload=workload,
        max_train_steps=2,
        eval_every=2,
        train_eval_examples=7,
        batch_size=8,
        schedule=[{"shape": "constant"}],
    )
    result = _train(loaded, tmp_path / "run")
    sample = fixed_sample(100, 7, derive_seed(loaded.spec.seed, "train-eval"))
    class_zero = int((sample < 40).sum())  # the model predicts 0; the first 40 targets are 0
    assert result.last_eval["train/accuracy"] == class_zero / 7
    assert result.last_eval["val/accuracy"] == 0.4  # the whole split: 40 of 100


def test_augment_gets_a_generator_touches_training_batches_only_and_resumes_exactly(tmp_path: Path) -> None:
    workload = {"name": "tests.train_tests.rule_workloads:build_augmented", "options": {}}
    fields = {"max_train_steps": 40, "eval_every": 10, "batch_size": 16, "eval_batch_size": 16}
    loaded = _study(tmp_path, workload=workload, **fields)
    rule_workloads.AUGMENT_CALLS.clear()
    straight = _train(loaded, tmp_path / "straight")
    calls = list(rule_workloads.AUGMENT_CALLS)
    assert len(calls) == 40  # once per training step, never for evaluation or prediction samples
    assert all(is_generator and grad_enabled for is_generator, grad_enabled, _ in calls)

    assert _train(loaded, tmp_path / "resumed", StopAt(25)).status == "interrupted"
    assert _train(loaded, tmp_path / "resumed").status == straight.status == "completed"
    assert _rows(tmp_path / "resumed") == _rows(tmp_path / "straight")
    ours, theirs = _weights(tmp_path / "resumed"), _weights(tmp_path / "straight")
    assert all(torch.equal(ours[k], theirs[k]) for k in ours)

    plain = {**workload, "options": {"augment": False}}
    _train(_study(tmp_path / "plain", workload=plain, **fields), tmp_path / "plain" / "run")
    steps = [r["train/step_loss"] for r in _rows(tmp_path / "straight")]
    assert steps != [r["train/step_loss"] for r in _rows(tmp_path / "plain" / "run")]


def test_maximize_keeps_the_checkpoints_of_the_highest_values(tmp_path: Path) -> None:
    loaded = _study(
        tmp_path,
        "objective.metric=val/accuracy",
        "objective.direction=maximize",
        max_train_steps=80,
        eval_every=10,
        keep_best_checkpoints=2,
        optimizer={"name": "sgd", "lr": 0.05},
        schedule=[{"shape": "constant"}],
    )
    result = _train(loaded, tmp_path / "run")
    evals = {int(r["step"]): float(r["val/accuracy"]) for r in _rows(tmp_path / "run") if r["val/accuracy"]}
    assert len(evals) == 8 and len(set(evals.values())) > 2  # the ranking has something to choose
    index = json.loads((tmp_path / "run" / "checkpoints" / "index.json").read_text())
    kept = [(entry["step"], entry["value"]) for entry in index["best"]]
    assert [value for _, value in kept] == sorted(evals.values(), reverse=True)[:2]
    assert all(evals[step] == value for step, value in kept)
    files = sorted(p.name for p in (tmp_path / "run" / "checkpoints").glob("best-*.pt"))
    assert files == sorted(f"best-step{step:08d}.pt" for step, _ in kept)
    assert result.best_value == max(evals.values())
