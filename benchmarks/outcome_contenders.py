"""The outcome benchmark's contenders: each spends one budget of training steps on one study and
says which checkpoint it delivers (see ``benchmarks.outcome`` for the rules).
"""

from __future__ import annotations

import json
import math
import os
import resource
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from benchmarks._common import REPO_ROOT, stopwatch

#: tuner's workers, and the plain script's processes (``--quick``: 1, fewer process starts)
WORKERS = 2
#: every process trains on one thread: two workers on two cores, no oversubscription
ENV = {**os.environ, "OMP_NUM_THREADS": "1"}


@dataclass(frozen=True)
class Delivered:
    """What one contender run produced: the checkpoint it hands the user, and what it cost."""

    checkpoint: Path
    run_dir: Path  # the run folder of that checkpoint (its config.yaml builds the model)
    steps: int  # training steps of every run it started, all phases
    trials: int
    cpu_s: float
    wall_s: float
    notes: str = ""


def children_cpu_s() -> float:
    """User + system seconds of every finished child process (and the ones they waited for)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def better(direction: str) -> Callable[[float, float], bool]:
    return (lambda a, b: a < b) if direction == "minimize" else (lambda a, b: a > b)


def best_checkpoint(run_dir: Path, best_step: int) -> Path:
    return run_dir / "checkpoints" / f"best-step{best_step:08d}.pt"


def status_steps(folders: list[Path]) -> int:
    """Training steps actually run: each run folder's ``status.json`` step."""
    return sum(int(json.loads((f / "status.json").read_text()).get("step") or 0) for f in folders)


def _cli(*args: str, workers: int) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "tuner", *args, "--workers", str(workers), "--no-progress"],
        capture_output=True, text=True, cwd=REPO_ROOT, env=ENV, check=False,
    )  # fmt: skip
    if done.returncode != 0:
        raise RuntimeError(f"tuner {args[0]} failed: {done.stderr.strip().splitlines()[-3:]}")
    return done.stdout


def round1_trials(budget: int, sweep_steps: int, max_train_steps: int, document: dict[str, Any]) -> int:
    """Round 1's ``--trials``, worked out by hand as a user would from the README: the steps left
    after the sweep, minus round 2's cost (top_k x seeds x max_train_steps), over round 1's trial
    length (ceil(length_fraction x max_train_steps)); at least round 2's top_k."""
    rounds = document["rounds"]
    round2 = rounds["round2"]["top_k"] * rounds["round2"].get("seeds", 1) * max_train_steps
    length = math.ceil(rounds["round1"]["length_fraction"] * max_train_steps)
    return max(rounds["round2"]["top_k"], (budget - sweep_steps - round2) // length)


def run_tuner(document: dict[str, Any], folder: Path, budget: int, workers: int = WORKERS) -> Delivered:
    """sweep-lr, round 1 with the hand-worked ``--trials``, round 2: the README's procedure.

    The study file leaves ``max_train_steps`` to sweep-lr. When no LR fits the training set, the
    user falls back to the guess they had (the template's ``max_train_steps``), passed as --set.
    """
    guess = document["training"].pop("max_train_steps")
    study = folder / "study.yaml"
    study.write_text(yaml.safe_dump(document, sort_keys=False))
    output = folder / "runs"
    out = ["--output-dir", str(output)]
    cpu, elapsed = children_cpu_s(), stopwatch()
    sweep = json.loads(_cli("sweep-lr", str(study), *out, "--json", workers=workers))
    phase_root = output / document["name"]
    sweep_steps = status_steps(sorted((phase_root / "sweep-lr").glob("trial-*")))
    found = sweep.get("recommended_max_train_steps")
    fallback = [] if found else ["--set", f"max_train_steps={guess}"]
    max_train_steps = int(found or guess)
    trials = round1_trials(budget, sweep_steps, max_train_steps, document)
    _cli("run-round", str(study), "--round", "1", "--trials", str(trials), *fallback, *out, workers=workers)
    _cli("run-round", str(study), "--round", "2", *fallback, *out, workers=workers)
    wall, cpu = elapsed(), children_cpu_s() - cpu
    folders = sorted(phase_root.glob("*/trial-*"))
    run_dir, best_step = _round2_choice(phase_root, document["objective"]["direction"])
    notes = f"max_train_steps {max_train_steps} ({'sweep-lr' if found else 'nothing fit: the guess'})"
    notes += f"; round 1 --trials {trials}"
    return Delivered(
        best_checkpoint(run_dir, best_step), run_dir, status_steps(folders), len(folders), cpu, wall, notes
    )


def _round2_choice(phase_root: Path, direction: str) -> tuple[Path, int]:
    """Round 2's point with the best mean objective over its seeds; that point's best seed run,
    at its best step."""
    import optuna

    url = f"sqlite:///{phase_root / 'study.db'}"
    name = phase_root.name
    done = [
        t for t in optuna.load_study(study_name=f"{name}/round-2", storage=url).trials if t.value is not None
    ]
    points: dict[tuple[Any, Any], list[Any]] = {}
    for trial in done:
        key = (trial.user_attrs.get("source_trial"), trial.user_attrs.get("lr_multiplier"))
        points.setdefault(key, []).append(trial)
    is_better = better(direction)
    means = {key: sum(t.value for t in runs) / len(runs) for key, runs in points.items()}
    chosen = None
    for key, mean in means.items():
        if chosen is None or is_better(mean, means[chosen]):
            chosen = key
    if chosen is None:
        raise RuntimeError("round 2 completed no trial")
    best = points[chosen][0]
    for trial in points[chosen][1:]:
        if is_better(trial.value, best.value):
            best = trial
    run_dir = Path(best.user_attrs["run_dir"])
    return run_dir, int(json.loads((run_dir / "status.json").read_text())["best_step"])


@dataclass(frozen=True)
class PlainSearch:
    """A plain Optuna script: its sampler and what it tells Optuna (``last`` or ``best`` eval)."""

    sampler: str  # tpe | random
    score: str  # last | best


def run_plain(
    search: PlainSearch,
    document: dict[str, Any],
    folder: Path,
    budget: int,
    seed: int,
    workers: int = WORKERS,
) -> Delivered:
    """As many trials of the guessed length as the budget holds, ``workers`` processes sharing a study.

    Delivers, by ``score``: the best trial by last eval and its final weights (``latest.pt``), or
    the best trial by best eval and its best-step checkpoint.
    """
    import optuna

    study = folder / "study.yaml"
    study.write_text(yaml.safe_dump(document, sort_keys=False))
    url = f"sqlite:///{folder / 'plain.db'}"
    direction = document["objective"]["direction"]
    optuna.create_study(study_name="plain", storage=url, direction=direction)
    trials = max(1, budget // int(document["training"]["max_train_steps"]))
    per_process = [trials // workers + (index < trials % workers) for index in range(workers)]
    cpu, elapsed = children_cpu_s(), stopwatch()
    processes = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "benchmarks.outcome_search",
                str(study),
                url,
                str(index),
                str(count),
                search.sampler,
                str(seed),
                search.score,
                str(folder / "runs"),
            ],
            cwd=REPO_ROOT,
            env=ENV,
        )
        for index, count in enumerate(per_process)
        if count > 0
    ]
    codes = [process.wait() for process in processes]
    wall, cpu = elapsed(), children_cpu_s() - cpu
    if any(codes):
        raise RuntimeError(f"plain {search.sampler} search failed (exit codes {codes})")
    all_trials = optuna.load_study(study_name="plain", storage=url).trials
    done = [t for t in all_trials if t.value is not None and math.isfinite(t.value)]
    if not done:
        raise RuntimeError(f"plain {search.sampler} search completed no trial")
    best = done[0]
    for trial in done[1:]:
        if better(direction)(trial.value, best.value):
            best = trial
    run_dir = Path(best.user_attrs["run_dir"])
    checkpoint = (
        run_dir / "checkpoints" / "latest.pt"
        if search.score == "last"
        else best_checkpoint(run_dir, int(best.user_attrs["best_step"]))
    )
    folders = [Path(t.user_attrs["run_dir"]) for t in all_trials if "run_dir" in t.user_attrs]
    return Delivered(checkpoint, run_dir, status_steps(folders), len(all_trials), cpu, wall)
