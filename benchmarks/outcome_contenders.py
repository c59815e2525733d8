"""The outcome benchmark's contenders: each spends one budget of training steps on one study and
delivers one checkpoint, which is then scored on the test split (see ``benchmarks.outcome``).

- ``tuner`` (and its ablations, ``tuner:<label>``): ``tuner tune --budget N``, the study's
  ``max_train_steps`` removed so that sweep-lr finds the length, as the README tells a user.
- the baselines, each at three trial lengths (``<baseline>@short|guess|long``: a third of the
  workload's guessed length, the guess, 3x it), every trial of a run at that length:
  ``tpe-last``, ``tpe-best``, ``random`` and ``tpe-hyperband`` (``benchmarks.outcome_search``).
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import subprocess
import sys
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any

import yaml

from benchmarks._common import REPO_ROOT, stopwatch
from benchmarks.outcome_search import PlainSearch, run_search

#: every process trains on one thread: two runs on two cores, no oversubscription
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "TUNER_PRELOAD_WORKLOAD": "1"}
BASELINES = {
    "tpe-last": PlainSearch("tpe", "last"),
    "tpe-best": PlainSearch("tpe", "best"),
    "random": PlainSearch("random", "best"),
    "tpe-hyperband": PlainSearch("tpe", "best", "hyperband"),
}
#: each baseline's trial length, as a multiple of the workload's guessed length
LENGTHS = {"short": Fraction(1, 3), "guess": Fraction(1), "long": Fraction(3)}


@dataclass(frozen=True)
class Contender:
    """One way to spend the budget: tuner (with extra ``tune`` words), or a baseline at a length."""

    name: str
    baseline: str | None = None
    length: str | None = None
    tune_args: tuple[str, ...] = ()

    @property
    def is_tuner(self) -> bool:
        """``tune`` itself (or an ablation of it), not a baseline nor a design in its commands."""
        return self.name.startswith("tuner")


def baseline_contenders() -> list[Contender]:
    return [Contender(f"{b}@{n}", b, n) for n in LENGTHS for b in BASELINES]


def tuner_contender(label: str = "", tune_args: tuple[str, ...] = ()) -> Contender:
    """``tuner``, or the ablation ``tuner:<label>`` that passes ``tune_args`` to ``tune``."""
    return Contender(f"tuner:{label}" if label else "tuner", tune_args=tune_args)


#: candidate designs of the procedure, in tuner's commands (``run_sweep_then_search``): the
#: search quasi-random, or Optuna's TPE (random for its first 10 trials, then guided)
SWEEP_THEN_SEARCH = {"sweep+search": "quasi-random", "sweep+tpe": "tpe", "sweep+gp": "gp"}


def parse_contender(name: str) -> Contender:
    """A contender by name (``tuner``, ``random@guess``); ValueError for an unknown one."""
    if name == "tuner":
        return tuner_contender()
    if name in SWEEP_THEN_SEARCH:
        return Contender(name)
    for contender in baseline_contenders():
        if contender.name == name:
            return contender
    known = ", ".join(["tuner", *(c.name for c in baseline_contenders()), *SWEEP_THEN_SEARCH])
    raise ValueError(f"unknown contender {name!r}; known: {known}")


@dataclass(frozen=True)
class Delivered:
    """What one contender run produced: the checkpoint it hands the user, and what it cost."""

    checkpoint: Path
    run_dir: Path  # the run folder of that checkpoint (its config.yaml builds the model)
    steps: int  # training steps of every run it started, all phases
    trials: int
    notes: str = ""


def cpu_s() -> float:
    """User + system seconds of this process and of its finished children."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def run_contender(
    contender: Contender, document: dict[str, Any], guess: int, budget: int, folder: Path
) -> tuple[Delivered, float, float]:
    """Run one contender in ``folder``: what it delivered, its CPU and wall seconds. A folder
    already there is an interrupted run's (its result was never recorded): it starts again."""
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    started_cpu, elapsed = cpu_s(), stopwatch()
    if contender.name in SWEEP_THEN_SEARCH:
        delivered = run_sweep_then_search(document, folder, budget, SWEEP_THEN_SEARCH[contender.name])
    elif contender.is_tuner:
        delivered = run_tuner(document, folder, budget, contender.tune_args)
    else:
        assert contender.baseline is not None and contender.length is not None
        length = int(guess * LENGTHS[contender.length])
        study = folder / "study.yaml"
        study.write_text(yaml.safe_dump(document, sort_keys=False))
        seed = int(document["seed"])
        found = run_search(BASELINES[contender.baseline], study, folder / "runs", length, budget, seed)
        notes = f"{found.trials} trials of {length} steps" + (
            f", {found.pruned} pruned" if found.pruned else ""
        )
        delivered = Delivered(found.checkpoint, found.run_dir, found.steps, found.trials, notes)
    return delivered, cpu_s() - started_cpu, elapsed()


def run_tuner(document: dict[str, Any], folder: Path, budget: int, extra: tuple[str, ...] = ()) -> Delivered:
    """``tuner tune --budget`` on one worker: the whole procedure in one command; the model it
    delivers (``--json``'s ``delivered_model``: the one rule of ``tuner report``). Without
    ``--no-sweep`` in ``extra`` the study's ``max_train_steps`` is removed: sweep-lr finds it."""
    document = json.loads(json.dumps(document))
    if "--no-sweep" not in extra:
        document["training"].pop("max_train_steps")
    study = folder / "study.yaml"
    study.write_text(yaml.safe_dump(document, sort_keys=False))
    output = folder / "runs"
    command = [
        sys.executable, "-m", "tuner", "tune", str(study), "--budget", str(budget),
        "--output-dir", str(output), "--json", "--workers", "1", "--no-progress", *extra,
    ]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, cwd=REPO_ROOT, env=ENV, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"tuner tune failed: {done.stderr.strip().splitlines()[-3:]}")
    payload = json.loads(done.stdout)
    model = payload["delivered_model"]
    if model is None or not model["delivered"]:
        raise RuntimeError(f"tuner tune delivered no model: {model and model['status']}")
    folders = sorted(output.glob("*/*/trial-*"))
    kinds = [d["kind"] for d in payload["decisions"]]
    notes = f"{' '.join(extra)}; " if extra else ""
    notes += f"delivered run of {model['max_train_steps']} steps; decisions: {', '.join(kinds)}"
    return Delivered(
        Path(model["checkpoint"]), Path(model["run_dir"]), status_steps(folders), len(folders), notes
    )


#: the sweep's length rule when nothing fits and validation was still improving at its cap
#: (compute-bound): the longest length that leaves this many full-length trials
SEARCH_TRIALS_AT_LEAST = 8


def run_sweep_then_search(document: dict[str, Any], folder: Path, budget: int, sampler: str) -> Delivered:
    """A candidate design of the procedure, in tuner's own commands: ``tuner sweep-lr`` within
    20% of the budget (its cap lowered as ``tune`` lowers it) for the length, then one
    ``sampler`` round 1 at that full length with every step left; the best run by validation,
    at its best step. The length: the fewest steps an LR fit in; nothing fitting, 2x the early
    best step the sweep saw (noisy labels), else the longest length that still leaves
    ``SEARCH_TRIALS_AT_LEAST`` trials (compute-bound: the playbook's "as long as you can
    afford")."""
    from tuner.playbook.budget import SWEEP_SHARE

    document = json.loads(json.dumps(document))
    document["training"].pop("max_train_steps")
    study = folder / "study.yaml"
    study.write_text(yaml.safe_dump(document, sort_keys=False))
    output = folder / "runs"
    grid, eval_every = len(document["sweep_lr"]["grid"]), int(document["training"]["eval_every"])
    cap = min(
        int(document["sweep_lr"]["max_steps"]), int(budget * SWEEP_SHARE) // grid // eval_every * eval_every
    )
    sweep = _tuner_json(
        "sweep-lr", str(study), "--set", f"sweep_lr.max_steps={cap}", "--output-dir", str(output)
    )
    spent = status_steps(sorted(output.glob("*/sweep-lr/trial-*")))
    left = budget - spent
    verdicts = {v["kind"]: v for v in sweep.get("verdicts", [])}
    if sweep.get("recommended_max_train_steps"):
        length, why = int(sweep["recommended_max_train_steps"]), "fit"
    elif verdicts.get("nothing_fits", {}).get("noisy_labels_steps"):
        length, why = int(verdicts["nothing_fits"]["noisy_labels_steps"]), "2x the early best step"
    else:
        length = max(cap, left // SEARCH_TRIALS_AT_LEAST // eval_every * eval_every)
        why = f"compute-bound: {SEARCH_TRIALS_AT_LEAST} trials of the steps left"
    trials = left // length
    sets = ["--set", f"max_train_steps={length}", "--set", "rounds.round1.length_fraction=1"]
    sets += ["--set", f"rounds.round1.sampler={sampler}"]
    command = ["run-round", str(study), "--round", "1", "--trials", str(trials), *sets]
    _tuner_json(*command, "--output-dir", str(output), "--workers", "1", "--no-progress", parse=False)
    report = _tuner_json("report", str(study), "--phase", "round-1", "--output-dir", str(output))
    best = report["phases"][0]["best_trial"]
    folders = sorted(output.glob("*/*/trial-*"))
    notes = f"sweep-lr then {trials} {sampler} trials of {length} steps ({why})"
    return Delivered(
        Path(best["checkpoint"]), Path(best["run_dir"]), status_steps(folders), len(folders), notes
    )


def _tuner_json(*args: str, parse: bool = True) -> Any:
    command = [sys.executable, "-m", "tuner", *args, *(("--json",) if parse else ())]
    done = subprocess.run(command, capture_output=True, text=True, cwd=REPO_ROOT, env=ENV, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"tuner {args[0]} failed: {done.stderr.strip().splitlines()[-3:]}")
    return json.loads(done.stdout) if parse else None


def status_steps(folders: list[Path]) -> int:
    """Training steps actually run: each run folder's ``status.json`` step."""
    return sum(int(json.loads((f / "status.json").read_text()).get("step") or 0) for f in folders)


def delivered_metric(delivered: Delivered, split: str = "test") -> float:
    """The delivered weights scored on the test split by the engine's Evaluator (``split="tune"``:
    on the validation split, where it must give what training recorded)."""
    from tuner.spec import load_study
    from tuner.train import Evaluator, build_workload, load_checkpoint
    from tuner.train.run_parts import default_loss

    loaded = load_study(delivered.run_dir / "config.yaml", [f"workload.split={split}"])
    spec = loaded.spec
    workload = build_workload(spec, loaded.base_dir, init_seed=0)
    workload.model.load_state_dict(load_checkpoint(delivered.checkpoint)["model"])
    evaluator = Evaluator(
        {"test": workload.eval_data},
        loss_fn=default_loss(workload),  # the workload's, else its task's (cross-entropy, squared error)
        metrics=workload.builtin_metrics,
        num_classes=workload.num_classes,
        batch_size=spec.training.resolved_eval_batch_size,
        regression=workload.regression,
    )
    metrics, _ = evaluator.run(workload.model)
    return metrics["test/" + spec.objective.metric.split("/", 1)[1]]
