"""The playbook's procedure (sweep-lr, round 1, round 2) against a plain Optuna TPE script.

Both sides tune the built-in ``char-lm`` (a small character-level transformer: harder than the
digits MLP, and it overfits its small built-in corpus, so the length of training matters) over
its study's search space (``optimizer.lr``, ``workload.d_model``), with the same training engine,
on 2 CPU workers of 1 thread each, and with the same total number of training steps:

- tuner: ``tuner sweep-lr`` (4 constant LRs until the training set reaches a train perplexity of
  7, which sets ``max_train_steps``), ``tuner run-round --round 1`` (8 quasi-random trials at a
  quarter of that length) and ``--round 2`` (round 1's best 2 points at full length, the schedule
  extended). Its result is round 2's best trial: its best-step validation perplexity, whose
  checkpoint is on disk.
- plain Optuna: what a hand-rolled script does: TPE (seeded) over the same space, every trial at
  the study file's ``max_train_steps`` (the user's guess, 300), scored by its final validation
  perplexity, as many trials as fit in the steps tuner used, two processes sharing one SQLite
  study. Its result is the best trial's final value (what it reports); its best-step value is
  printed too, since it is what a user could have kept with checkpoints.

CPU time is user + system of every process (workers and trials included), from
``RUSAGE_CHILDREN``. One run of each side, one seed: the figures show what each procedure
delivers for the same compute on this machine, not a statistically settled ranking; there is no
PASS/FAIL target. ``python -m benchmarks.procedure`` runs it alone (about 2 minutes here).
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from benchmarks._common import REPO_ROOT, Result, report, stopwatch

NAME = "procedure"
WORKERS = 2
STUDY_NAME = "bench-procedure"
GUESSED_STEPS = 300  # the study file's max_train_steps: what a plain script trains every trial for

_OPTUNA_SCRIPT = r"""
import json, sys, tempfile
from pathlib import Path
import optuna, torch
from tuner.spec import load_study
from tuner.train import run_training

torch.set_num_threads(1)
study_path, url, trials, seed = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
optuna.logging.set_verbosity(optuna.logging.WARNING)
runs = Path(tempfile.mkdtemp(prefix="plain-optuna-"))

def objective(trial):
    lr = trial.suggest_float("optimizer.lr", 3e-4, 1e-2, log=True)
    d_model = trial.suggest_categorical("workload.d_model", [32, 64, 96])
    loaded = load_study(study_path, [f"optimizer.lr={lr}", f"workload.d_model={d_model}"])
    folder = runs / f"trial-{trial.number}"
    result = run_training(loaded.spec, folder, base_dir=loaded.base_dir, progress=False)
    trial.set_user_attr("best_value", result.best_value)
    trial.set_user_attr("steps", result.step)
    return result.last_eval["val/perplexity"]  # the final value, as a hand-rolled script reports

study = optuna.load_study(study_name="plain", storage=url, sampler=optuna.samplers.TPESampler(seed=seed))
study.optimize(objective, n_trials=trials)
"""


def _children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _study(folder: Path) -> Path:
    document = yaml.safe_load((REPO_ROOT / "studies" / "char-lm.yaml").read_text())
    document["name"] = STUDY_NAME
    document["training"].update(eval_every=50, tensorboard=False, max_train_steps=GUESSED_STEPS)
    # a warmup of a tenth, not 30 steps: round 1's quarter-length trials must hold it
    document["training"]["schedule"] = [
        {"shape": "linear", "fraction": 0.1, "start": 0.0, "end": 1.0},
        {"shape": "cosine", "start": 1.0, "end": 0.1},
    ]
    document["sweep_lr"] = {
        "grid": [0.001, 0.003, 0.01, 0.03],
        "max_steps": 600,
        "fit_metric": "train/perplexity",
        "fit_threshold": 7.0,
    }
    document["rounds"] = {
        "round1": {"trials": 8, "length_fraction": 0.25},
        "round2": {"top_k": 2, "seeds": 1},
    }
    path = folder / "study.yaml"
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    return path


def _tuner(*args: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "tuner", *args, "--workers", str(WORKERS), "--no-progress"],
        capture_output=True, text=True, cwd=REPO_ROOT, check=False,
    )  # fmt: skip
    print(done.stdout, end="", flush=True)
    if done.returncode != 0:
        raise RuntimeError(f"tuner {args[0]} failed: {done.stderr.strip().splitlines()[-3:]}")


def _trials(url: str, phase: str) -> list[Any]:
    import optuna

    return optuna.load_study(study_name=f"{STUDY_NAME}/{phase}", storage=url).trials


def _steps(trial: Any) -> int:
    attrs = trial.user_attrs
    return int(attrs.get("final_step") or attrs.get("max_train_steps") or 0)


@dataclass
class Side:
    steps: int
    trials: int
    value: float
    best_step_value: float
    cpu_s: float
    wall_s: float


def run_tuner_side(folder: Path) -> Side:
    study = _study(folder)
    output = folder / "runs"
    # the procedure's own way: the file leaves max_train_steps to sweep-lr
    document = yaml.safe_load(study.read_text())
    document["training"].pop("max_train_steps")
    study.write_text(yaml.safe_dump(document, sort_keys=False))
    cpu, elapsed = _children_cpu_s(), stopwatch()
    for args in (["sweep-lr"], ["run-round", "--round", "1"], ["run-round", "--round", "2"]):
        _tuner(*args[:1], str(study), *args[1:], "--output-dir", str(output))
    wall, cpu = elapsed(), _children_cpu_s() - cpu
    url = f"sqlite:///{output / STUDY_NAME / 'study.db'}"
    trials = [t for phase in ("sweep-lr", "round-1", "round-2") for t in _trials(url, phase)]
    round2 = [t for t in _trials(url, "round-2") if t.value is not None]
    best = min(t.value for t in round2)
    return Side(sum(_steps(t) for t in trials), len(trials), best, best, cpu, wall)


def run_optuna_side(folder: Path, steps: int) -> Side:
    import optuna

    study = _study(folder)
    url = f"sqlite:///{folder / 'plain.db'}"
    optuna.create_study(study_name="plain", storage=url)
    trials = max(WORKERS, steps // GUESSED_STEPS)
    per_process = [trials // WORKERS + (index < trials % WORKERS) for index in range(WORKERS)]
    cpu, elapsed = _children_cpu_s(), stopwatch()
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    processes = [
        subprocess.Popen(
            [sys.executable, "-c", _OPTUNA_SCRIPT, str(study), url, str(count), str(index)],
            cwd=REPO_ROOT,
            env=env,
        )
        for index, count in enumerate(per_process)
    ]
    for process in processes:
        process.wait()
    wall, cpu = elapsed(), _children_cpu_s() - cpu
    done = [t for t in optuna.load_study(study_name="plain", storage=url).trials if t.value is not None]
    best = min(done, key=lambda t: t.value)
    return Side(
        sum(int(t.user_attrs["steps"]) for t in done),
        len(done),
        best.value,
        min(float(t.user_attrs["best_value"]) for t in done),
        cpu,
        wall,
    )


def run() -> list[Result]:
    with tempfile.TemporaryDirectory(prefix="bench-procedure-") as tmp:
        folder = Path(tmp)
        (folder / "tuner").mkdir()
        (folder / "optuna").mkdir()
        ours = run_tuner_side(folder / "tuner")
        plain = run_optuna_side(folder / "optuna", ours.steps)
    rows = [
        ("", "tuner procedure", "plain Optuna TPE"),
        ("training steps", f"{ours.steps}", f"{plain.steps}"),
        ("trials", f"{ours.trials}", f"{plain.trials}"),
        ("reported val/perplexity", f"{ours.value:.4f} (best step)", f"{plain.value:.4f} (final)"),
        ("best-step val/perplexity", f"{ours.best_step_value:.4f}", f"{plain.best_step_value:.4f}"),
        ("CPU seconds", f"{ours.cpu_s:.0f}", f"{plain.cpu_s:.0f}"),
        ("wall seconds", f"{ours.wall_s:.0f}", f"{plain.wall_s:.0f}"),
    ]
    print(f"\n{NAME}: char-lm, {WORKERS} CPU workers of 1 thread each, one seed")
    for row in rows:
        print(f"  {row[0]:<26}{row[1]:<22}{row[2]}")
    print(json.dumps({"tuner": ours.__dict__, "plain_optuna": plain.__dict__}))
    return [
        Result(NAME, "tuner: reported val/perplexity", ours.value, "{:.4f}"),
        Result(NAME, "plain TPE: reported (final) val/perplexity", plain.value, "{:.4f}"),
        Result(NAME, "plain TPE: best-step val/perplexity", plain.best_step_value, "{:.4f}"),
        Result(NAME, "tuner/plain training steps", ours.steps / plain.steps, "{:.3f}"),
        Result(NAME, "tuner/plain CPU time", ours.cpu_s / plain.cpu_s, "{:.3f}"),
    ]


def main() -> None:
    report(NAME, run())


if __name__ == "__main__":
    main()
