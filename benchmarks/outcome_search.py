"""The plain Optuna script a user would write instead of tuner: one worker process of it.

``python -m benchmarks.outcome_search STUDY STORAGE PROCESS_INDEX TRIALS SAMPLER SEED SCORE RUNS``

Every trial trains at the study file's ``max_train_steps`` (the user's guess) with tuner's own
training engine (``tuner.train.run_training``), over the study's search space, sampled by
``SAMPLER`` (``tpe`` or ``random``) seeded with ``SEED``; ``SCORE`` is what Optuna is told:
``last`` (the final eval, what a hand-rolled script reports) or ``best`` (the best eval, whose
checkpoint the run keeps). Two of these processes share one Optuna storage, as a user runs two.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path
from typing import Any

import optuna
import torch

from tuner.spec import load_study
from tuner.train import run_training


def suggest(trial: optuna.Trial, key: str, param: Any) -> Any:
    """One search-space entry through Optuna's public suggest API (the same space tuner searches)."""
    if param.type == "float":
        return trial.suggest_float(key, param.low, param.high, log=param.log)
    if param.type == "int":
        return trial.suggest_int(key, param.low, param.high, log=param.log)
    return trial.suggest_categorical(key, list(param.choices))


def sampler(kind: str, seed: int) -> optuna.samplers.BaseSampler:
    if kind == "tpe":
        return optuna.samplers.TPESampler(seed=seed)
    return optuna.samplers.RandomSampler(seed=seed)


def main(argv: list[str]) -> None:
    study_path, storage, index, trials, kind, seed, score, runs = argv
    torch.set_num_threads(1)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    space = load_study(study_path).spec.search_space

    def objective(trial: optuna.Trial) -> float:
        values = {key: suggest(trial, key, param) for key, param in space.items()}
        loaded = load_study(study_path, [f"{key}={value}" for key, value in values.items()])
        folder = Path(runs) / f"trial-{index}-{trial.number:04d}"
        result = run_training(loaded.spec, folder, base_dir=loaded.base_dir, progress=False)
        metric = loaded.spec.objective.metric
        trial.set_user_attr("run_dir", str(folder))
        trial.set_user_attr("steps", result.step)
        trial.set_user_attr("best_step", result.best_step)
        trial.set_user_attr("last_step", result.step)
        value = result.last_eval.get(metric) if score == "last" else result.best_value
        return float("nan") if value is None or not math.isfinite(value) else float(value)

    study = optuna.load_study(
        study_name="plain", storage=storage, sampler=sampler(kind, int(seed) * 1000 + int(index))
    )
    study.optimize(objective, n_trials=int(trials))


if __name__ == "__main__":
    main(sys.argv[1:])
