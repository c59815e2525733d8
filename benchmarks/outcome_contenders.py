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
# tuner's workers import the workload file once instead of every trial importing it (scikit-learn:
# about a CPU second each), as the README tells a user whose module only defines at import
TUNER_ENV = {**ENV, "TUNER_PRELOAD_WORKLOAD": "1"}


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
        capture_output=True, text=True, cwd=REPO_ROOT, env=TUNER_ENV, check=False,
    )  # fmt: skip
    if done.returncode != 0:
        raise RuntimeError(f"tuner {args[0]} failed: {done.stderr.strip().splitlines()[-3:]}")
    return done.stdout


def run_tuner(
    document: dict[str, Any],
    folder: Path,
    budget: int,
    workers: int = WORKERS,
    *,
    sweep: bool = True,
    extra: tuple[str, ...] = (),
) -> Delivered:
    """``tuner tune --budget``: the whole procedure in one command (sweep-lr, round 1, the
    report's suggestions, round 2), its budget split by tuner's own rule; the model it delivers
    (``--json``'s ``delivered_model``: the one rule of ``tuner report``).

    The study file leaves ``max_train_steps`` to sweep-lr; when no LR fits within the sweep's
    share, tune trains the rounds at the sweep's cap (its decision log says so).
    """
    if sweep:
        document["training"].pop("max_train_steps")
    study = folder / "study.yaml"
    study.write_text(yaml.safe_dump(document, sort_keys=False))
    output = folder / "runs"
    cpu, elapsed = children_cpu_s(), stopwatch()
    payload = json.loads(
        _cli(
            "tune",
            str(study),
            "--budget",
            str(budget),
            "--output-dir",
            str(output),
            "--json",
            *(() if sweep else ("--no-sweep",)),
            *extra,
            workers=workers,
        )
    )
    wall, cpu = elapsed(), children_cpu_s() - cpu
    model = payload["delivered_model"]
    if model is None or not model["delivered"]:
        raise RuntimeError(f"tuner tune delivered no model: {model and model['status']}")
    folders = sorted(output.glob("*/*/trial-*"))
    decided = {d["kind"]: d for d in payload["decisions"]}
    round1 = [s for s in payload["stages"] if s["phase"] == "round-1"]
    notes = f"tune {' '.join(extra)}; " if extra else ""
    # the delivered run's own length (a longer extra round's, say), not the study's max_train_steps
    notes += f"delivered run of {model['max_train_steps']} steps"
    if "max_train_steps_fallback" in decided:
        early = "2 x that best step" in decided["max_train_steps_fallback"]["text"]
        length = "2 x the sweep's early best step" if early else "the sweep's cap"
        notes += f"; sweep-lr: nothing fit, the rounds train {length}"
    notes += "; round 1 --trials " + " then ".join(str(s["trials"]) for s in round1)
    return Delivered(
        Path(model["checkpoint"]),
        Path(model["run_dir"]),
        status_steps(folders),
        len(folders),
        cpu,
        wall,
        notes,
    )


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
