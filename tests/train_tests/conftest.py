"""Small, fast studies for engine tests (digits MLP, a few hundred steps at most)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from tuner.spec import LoadedStudy, load_study

BASE_STUDY: dict[str, Any] = {
    "name": "engine-test",
    "seed": 0,
    "workload": {"name": "digits-mlp", "options": {"hidden_sizes": [32], "dropout": 0.1}},
    "objective": {"metric": "val/error_rate", "direction": "minimize"},
    "training": {
        "batch_size": 32,
        "eval_batch_size": 128,
        "max_train_steps": 60,
        "eval_every": 20,
        "log_every": 5,
        "keep_best_checkpoints": 2,
        "prediction_samples": 5,
        "tensorboard": False,
        "device": "cpu",
        "optimizer": {"name": "adamw", "lr": 3.0e-3},
        "schedule": [{"shape": "linear", "steps": 10, "start": 0.0, "end": 1.0}, {"shape": "cosine"}],
    },
}


def write_study(folder: Path, **training: Any) -> Path:
    study = {**BASE_STUDY, "training": {**BASE_STUDY["training"], **training}}
    path = folder / "study.yaml"
    path.write_text(yaml.safe_dump(study, sort_keys=False))
    return path


@pytest.fixture
def make_study(tmp_path: Path):
    """``make_study(**training_fields) -> LoadedStudy`` written under ``tmp_path``."""

    def make(**training: Any) -> LoadedStudy:
        return load_study(write_study(tmp_path, **training))

    return make
