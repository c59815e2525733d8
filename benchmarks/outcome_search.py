"""The plain Optuna scripts a user would write instead of tuner: one search, in one process.

Every trial trains at one fixed length (the user's guess, or a third of it, or 3x it) with
tuner's own training engine (``tuner.train.run_training``), over the study's search space,
sampled by Optuna's ``TPESampler`` or ``RandomSampler`` seeded with the run's seed. ``score``
is what Optuna is told: ``last`` (the final eval, what a hand-rolled script reports) or ``best``
(the best eval, whose checkpoint the run keeps). With ``pruner="hyperband"``, the pair
Optuna's documentation recommends for TPE: every eval is reported (``trial.report``) and
``HyperbandPruner`` stops the trials it prunes; trials then start while steps of the budget are
left, and the one running when the budget is spent stops there (pruned).

The trials run one after another (``n_jobs=1``): each TPE suggestion sees every result before
it, TPE's best case, and the run does not depend on which of two processes finished first.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

#: Hyperband's rungs: reduction factor 3 (Optuna's default) from one eval interval up.
HYPERBAND_REDUCTION = 3


@dataclass(frozen=True)
class PlainSearch:
    """A plain Optuna script: its sampler, what it tells Optuna, and its pruner (or none)."""

    sampler: str  # tpe | random
    score: str  # last | best
    pruner: str | None = None  # hyperband


@dataclass(frozen=True)
class SearchOutcome:
    """What a search delivers: the run folder and checkpoint of its best trial, what it cost."""

    run_dir: Path
    checkpoint: Path
    steps: int
    trials: int
    pruned: int


def _suggest(trial: Any, key: str, param: Any) -> Any:
    """One search-space entry through Optuna's public suggest API (the space tuner searches)."""
    if param.type == "float":
        return trial.suggest_float(key, param.low, param.high, log=param.log)
    if param.type == "int":
        return trial.suggest_int(key, param.low, param.high, log=param.log)
    return trial.suggest_categorical(key, list(param.choices))


def _sampler(kind: str, seed: int) -> Any:
    import optuna

    if kind == "tpe":
        return optuna.samplers.TPESampler(seed=seed)
    return optuna.samplers.RandomSampler(seed=seed)


def run_search(
    search: PlainSearch, study: Path, folder: Path, length: int, budget: int, seed: int
) -> SearchOutcome:
    """Trials of ``length`` steps of the study file ``study`` until ``budget`` steps are spent."""
    import optuna

    from tuner.spec import load_study
    from tuner.train import Callback, StopTraining, run_training

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    loaded = load_study(study, [f"max_train_steps={length}"])
    space, metric = loaded.spec.search_space, loaded.spec.objective.metric
    eval_every = loaded.spec.training.eval_every
    spent = [0]

    class Report(Callback):
        """Counts the steps of the whole search; with a pruner, reports each eval to it."""

        def __init__(self, trial: Any) -> None:
            self.trial = trial

        def on_train_step_end(self, loop: Any) -> None:
            spent[0] += 1
            if search.pruner and spent[0] >= budget:
                raise StopTraining("stopped", "the search's budget is spent")

        def on_eval_end(self, loop: Any) -> None:
            value = loop.last_eval.get(metric)
            if search.pruner and value is not None and math.isfinite(value):
                self.trial.report(float(value), loop.step)
                if self.trial.should_prune():
                    raise StopTraining("stopped", "pruned")

    def objective(trial: Any) -> float:
        values = {key: _suggest(trial, key, param) for key, param in space.items()}
        loaded_trial = load_study(
            study, [f"max_train_steps={length}", *(f"{k}={v}" for k, v in values.items())]
        )
        run_dir = folder / f"trial-{trial.number:04d}"
        trial.set_user_attr("run_dir", str(run_dir))
        result = run_training(
            loaded_trial.spec, run_dir, base_dir=loaded_trial.base_dir, progress=False,
            extra_callbacks=[Report(trial)],
        )  # fmt: skip
        trial.set_user_attr("best_step", result.best_step)
        if result.status == "stopped":  # pruned, or the budget ran out mid-trial
            raise optuna.TrialPruned()
        value = result.last_eval.get(metric) if search.score == "last" else result.best_value
        return float("nan") if value is None or not math.isfinite(value) else float(value)

    pruner = (
        optuna.pruners.HyperbandPruner(
            min_resource=eval_every, max_resource=length, reduction_factor=HYPERBAND_REDUCTION
        )
        if search.pruner == "hyperband"
        else optuna.pruners.NopPruner()
    )
    direction = loaded.spec.objective.direction
    # named: HyperbandPruner puts a trial in a bracket by a hash of the study's name and the
    # trial's number, and an unnamed study gets a random name (a run would not repeat)
    plain = optuna.create_study(
        study_name="plain", direction=direction, sampler=_sampler(search.sampler, seed), pruner=pruner
    )
    if search.pruner:
        while spent[0] < budget:
            plain.optimize(objective, n_trials=1)
    else:
        plain.optimize(objective, n_trials=max(1, budget // length))
    done = [t for t in plain.trials if t.state.name == "COMPLETE" and math.isfinite(t.value)]
    if not done:
        raise RuntimeError(f"plain {search.sampler} search completed no trial")
    best = plain.best_trial
    run_dir = Path(best.user_attrs["run_dir"])
    checkpoint = (
        run_dir / "checkpoints" / "latest.pt"
        if search.score == "last"
        else run_dir / "checkpoints" / f"best-step{int(best.user_attrs['best_step']):08d}.pt"
    )
    pruned = sum(t.state.name == "PRUNED" for t in plain.trials)
    return SearchOutcome(run_dir, checkpoint, spent[0], len(plain.trials), pruned)
