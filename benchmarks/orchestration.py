"""Orchestration efficiency and per-trial overhead: ``tuner run-round`` against a plain Optuna script.

100 trials of a fixed CPU objective (1 s, then 0.2 s) with 2 workers. Ours: the whole
``tuner run-round --workers 2`` command, start-up included (workers importing torch, the phase
created in SQLite), each trial a forked process running the training engine on
``busy_workload.py`` (10 steps that spin ``busy_s`` in all, one eval, one checkpoint). Baseline,
in the same run: 2 processes of ``study.optimize`` on an SQLite file whose objective spins
``busy_s`` and suggests the same parameter; and the same script as a PyTorch user writes it
(imports torch, trains one optimizer step per trial before spinning), which pays what any
PyTorch trial pays once per process: importing torch and, at the first optimizer step,
``torch._dynamo`` (~4 s of CPU on the 2-core VM this was written on, against a 50 s ideal).
Efficiency = ideal (ceil(trials / 2) x busy_s) / wall. The figure with a target is the ratio of
ours to the fair baseline measured in the same run (the plain script that takes a torch step):
an absolute efficiency would mostly measure how long this machine takes to import torch.

Start-up, side by side: from the launch to the end of the first trial, ours against the plain
script with torch (the target: at most ``FIRST_TRIAL_MARGIN_S`` more). Both first trials spin
``busy_s``; the plain script imports ``torch._dynamo`` inside its first trial (at the optimizer's
first step), a worker before it claims one, so a trial's start would compare unlike things, and an
absolute figure would mostly time this machine's import of torch. One launch each varies by more
than a second between runs here, so the targeted figure is the median of ``LAUNCH_SAMPLES``
launches of each (a round of ``WORKERS`` trials, one a worker), interleaved, paired in order, with
its 95% interval; the 100-trial runs' own launches are shown too, untargeted.

Per-trial overhead, from the storage: a trial's wall (claim to tell) minus ``busy_s``, and minus
the time its process spent inside ``run_training`` (``train_s``: what the orchestrator alone adds).

Run alone: ``python -m benchmarks.orchestration``.
"""

from __future__ import annotations

import datetime
import itertools
import math
import resource
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from benchmarks._common import (
    REPO_ROOT,
    Result,
    busy_study,
    interleaved,
    load,
    paired_difference_interval,
    report,
    stopwatch,
)

NAME = "orchestration"
TRIALS = 100
WORKERS = 2
STEPS = 10
RATIO_TARGET = 0.95  # tuner / plain Optuna with a torch step, at 1 s trials
OVERHEAD_TARGET_S = 0.05  # a trial's wall (claim to tell) minus its objective, median
# from the command's launch to the end of the first trial, beyond the plain script's own (with its
# torch import) measured in the same run: an absolute figure would mostly time torch's import.
# To the end, not the start: the plain script imports ``torch._dynamo`` inside its first trial
# (at the first optimizer step), a worker before it claims one; both first trials spin ``busy_s``
FIRST_TRIAL_MARGIN_S = 0.5
LAUNCH_SAMPLES = 8

_OPTUNA_SCRIPT = """
import sys, time, optuna
optuna.logging.set_verbosity(optuna.logging.WARNING)
busy_s, trials, url, with_torch = float(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4] == "1"
if with_torch:
    import torch
    torch.set_num_threads(1)
def objective(trial):
    lr = trial.suggest_float("optimizer.lr", 1e-3, 1.0, log=True)
    if with_torch:
        model = torch.nn.Linear(4, 2)
        optimizer = torch.optim.SGD(model.parameters(), lr=lr)
        model(torch.randn(16, 4)).square().mean().backward()
        optimizer.step()
    until = time.perf_counter() + busy_s
    while time.perf_counter() < until:
        pass
    return busy_s
study = optuna.create_study(study_name="plain", storage=url, load_if_exists=True)
study.optimize(objective, n_trials=trials)
"""


def _children_cpu_s() -> float:
    """User + system CPU of every finished descendant (workers and their trials included)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _run_ours(folder: Path, busy_s: float, trials: int) -> tuple[float, float, list[Any], datetime.datetime]:
    import optuna

    study = busy_study(folder, "bench-orchestration", busy_s, STEPS, trials)
    output = folder / "runs"
    cpu = _children_cpu_s()
    launched = datetime.datetime.now()  # the clock Optuna stamps trials with
    elapsed = stopwatch()
    done = subprocess.run(
        [sys.executable, "-m", "tuner", "run-round", str(study), "--round", "1", "--workers", str(WORKERS),
         "--no-progress", "--output-dir", str(output)],
        capture_output=True, text=True, cwd=REPO_ROOT, check=False,
    )  # fmt: skip
    wall, cpu = elapsed(), _children_cpu_s() - cpu
    if done.returncode != 0:
        raise RuntimeError(f"tuner run-round failed: {done.stderr.strip().splitlines()[-1:]}")
    url = f"sqlite:///{output / 'bench-orchestration' / 'study.db'}"
    return (
        wall,
        cpu,
        optuna.load_study(study_name="bench-orchestration/round-1", storage=url).trials,
        launched,
    )


def _run_plain_optuna(
    folder: Path, busy_s: float, trials: int, *, with_torch: bool
) -> tuple[float, float, float]:
    """(wall, CPU of the processes, seconds from launch to the first trial's end)."""
    import optuna

    url = f"sqlite:///{folder / ('plain-torch.db' if with_torch else 'plain.db')}"
    optuna.create_study(study_name="plain", storage=url)  # the schema exists before the race
    per_process = math.ceil(trials / WORKERS)
    cpu = _children_cpu_s()
    launched = datetime.datetime.now()  # the clock Optuna stamps trials with
    elapsed = stopwatch()
    processes = [
        subprocess.Popen(
            [sys.executable, "-c", _OPTUNA_SCRIPT, str(busy_s), str(per_process), url, str(int(with_torch))]
        )
        for _ in range(WORKERS)
    ]
    for process in processes:
        process.wait()
    wall, cpu = elapsed(), _children_cpu_s() - cpu
    trials = optuna.load_study(study_name="plain", storage=url).trials
    first_end = min(t.datetime_complete for t in trials if t.datetime_complete is not None)
    return wall, cpu, (first_end - launched).total_seconds()


def _launches(samples: int, busy_s: float = 1.0) -> dict[str, list[float]]:
    """Seconds from the launch to the first trial's end, ``samples`` of each side, interleaved:
    ``tuner run-round`` of one trial a worker, and the plain script with torch, one a process."""

    def ours() -> float:
        with tempfile.TemporaryDirectory(prefix="tuner-bench-") as tmp:
            _, _, trials, launched = _run_ours(Path(tmp), busy_s, WORKERS)
        first_end = min(t.datetime_complete for t in trials if t.datetime_complete is not None)
        return (first_end - launched).total_seconds()

    def plain() -> float:
        with tempfile.TemporaryDirectory(prefix="tuner-bench-") as tmp:
            return _run_plain_optuna(Path(tmp), busy_s, WORKERS, with_torch=True)[2]

    return interleaved({"tuner": ours, "plain": plain}, samples, label="launch")


def _overheads(trials: list[Any], busy_s: float) -> dict[str, list[float]]:
    walls = [(t.datetime_complete - t.datetime_start).total_seconds() for t in trials]
    by_worker: dict[str, list[Any]] = {}
    for trial in sorted(trials, key=lambda t: t.datetime_start):
        by_worker.setdefault(trial.user_attrs["worker"], []).append(trial)
    gaps = [
        (after.datetime_start - before.datetime_complete).total_seconds()
        for runs in by_worker.values()
        for before, after in itertools.pairwise(runs)
    ]
    return {
        "minus objective": [wall - busy_s for wall in walls],
        "minus run_training": [wall - t.user_attrs["train_s"] for wall, t in zip(walls, trials, strict=True)],
        "engine (run_training - objective)": [t.user_attrs["train_s"] - busy_s for t in trials],
        "gap between trials": gaps,
    }


def _p90(values: list[float]) -> float:
    return statistics.quantiles(values, n=10)[-1] if len(values) > 1 else values[0]


def run(trials: int = TRIALS, launch_samples: int = LAUNCH_SAMPLES) -> list[Result]:
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    print(f"== {NAME}: launch to the first trial's end, {launch_samples} launches each, interleaved")
    launches = _launches(launch_samples)
    beyond = paired_difference_interval(launches["tuner"], launches["plain"])
    print(f"  tuner beyond the plain script with torch: {beyond}  [{load()}]")
    results: list[Result] = [
        Result(
            NAME,
            f"launch to the first trial's end beyond the plain script's (median of {beyond.pairs}; "
            f"95% CI {beyond.low:+.2f}..{beyond.high:+.2f} s)",
            beyond.median,
            "{:+.2f} s",
            f"<= +{FIRST_TRIAL_MARGIN_S} s",
            beyond.median <= FIRST_TRIAL_MARGIN_S,
        ),
        Result(
            NAME, "launch to the first trial's end, median", statistics.median(launches["tuner"]), "{:.2f} s"
        ),
        Result(
            NAME,
            "plain script + torch, launch to the first trial's end, median",
            statistics.median(launches["plain"]),
            "{:.2f} s",
        ),
    ]
    print(f"== {NAME}: {trials} trials, {WORKERS} workers, SQLite; tuner run-round vs plain optuna")
    for busy_s in (1.0, 0.2):
        ideal = math.ceil(trials / WORKERS) * busy_s
        with tempfile.TemporaryDirectory(prefix="tuner-bench-") as tmp:
            ours_wall, ours_cpu, ours_trials, launched = _run_ours(Path(tmp), busy_s, trials)
            plain_wall, plain_cpu, _ = _run_plain_optuna(Path(tmp), busy_s, trials, with_torch=False)
            torch_wall, torch_cpu, torch_first_s = _run_plain_optuna(
                Path(tmp), busy_s, trials, with_torch=True
            )
        ours, plain, plain_torch = ideal / ours_wall, ideal / plain_wall, ideal / torch_wall
        # from the first trial's start to the last one's end: the command's start-up (workers
        # importing torch, ~4 s of CPU each here) and shutdown left out
        first_start = min(t.datetime_start for t in ours_trials)
        last_end = max(t.datetime_complete for t in ours_trials)
        span = last_end - first_start
        steady = ideal / span.total_seconds()
        to_first_trial_s = (first_start - launched).total_seconds()
        first_end = min(t.datetime_complete for t in ours_trials if t.datetime_complete is not None)
        to_first_end_s = (first_end - launched).total_seconds()
        # from the last trial's end to the command's exit: the workers seeing the round done, the
        # command's summary, the zygote's exit
        after_last_s = ours_wall - (last_end - launched).total_seconds()
        overheads = _overheads(ours_trials, busy_s)
        print(
            f"  {busy_s:g} s trials: ideal {ideal:.1f}s; tuner {ours_wall:.1f}s (efficiency {ours:.3f}; "
            f"{steady:.3f} from first trial start to last trial end; first trial started after "
            f"{to_first_trial_s:.2f}s and ended after {to_first_end_s:.2f}s, the plain script with torch's "
            f"ended after {torch_first_s:.2f}s), plain optuna {plain_wall:.1f}s (efficiency {plain:.3f}), "
            f"plain optuna with a torch step {torch_wall:.1f}s (efficiency {plain_torch:.3f}); "
            f"tuner exited {after_last_s:.2f}s after its last trial ended; "
            f"tuner/optuna {ours / plain:.3f}, tuner/optuna with torch {ours / plain_torch:.3f}  [{load()}]\n"
            f"    CPU beyond the objectives: tuner {ours_cpu - trials * busy_s:.1f}s "
            f"({(ours_cpu - trials * busy_s) / trials * 1e3:.0f} ms a trial, start-up included), "
            f"plain optuna {plain_cpu - trials * busy_s:.1f}s, "
            f"with torch {torch_cpu - trials * busy_s:.1f}s"
        )
        for label, values in overheads.items():
            print(f"    per trial, {label}: median {statistics.median(values):.3f}s  p90 {_p90(values):.3f}s")
        median_overhead = statistics.median(overheads["minus objective"])
        tag = f"{busy_s:g} s trials"
        targeted = busy_s == 1.0  # the targets are set for 1 s trials; 0.2 s shows the trend
        ratio = ours / plain_torch
        results += [
            Result(
                NAME,
                f"tuner/plain optuna + torch step, {tag}",
                ratio,
                "{:.3f}",
                f">= {RATIO_TARGET}" if targeted else "",
                ratio >= RATIO_TARGET if targeted else None,
            ),
            Result(
                NAME,
                f"per-trial overhead median, {tag}",
                median_overhead,
                "{:.3f} s",
                f"<= {OVERHEAD_TARGET_S} s" if targeted else "",
                median_overhead <= OVERHEAD_TARGET_S if targeted else None,
            ),
            Result(
                NAME,
                f"launch to the first trial's end, beyond the plain script's (one launch), {tag}",
                to_first_end_s - torch_first_s,
                "{:+.2f} s",
            ),
            Result(NAME, f"launch to the first trial's start, {tag}", to_first_trial_s, "{:.2f} s"),
            Result(NAME, f"launch to the first trial's end, {tag}", to_first_end_s, "{:.2f} s"),
            Result(
                NAME,
                f"plain script + torch, launch to the first trial's end, {tag}",
                torch_first_s,
                "{:.2f} s",
            ),
            Result(NAME, f"last trial's end to the command's exit, {tag}", after_last_s, "{:.2f} s"),
            Result(NAME, f"efficiency, {tag}", ours, "{:.3f}"),
            Result(NAME, f"efficiency after start-up, {tag}", steady, "{:.3f}"),
            Result(NAME, f"plain optuna efficiency, {tag}", plain, "{:.3f}"),
            Result(NAME, f"plain optuna + torch step efficiency, {tag}", plain_torch, "{:.3f}"),
            Result(NAME, f"tuner/plain optuna, {tag}", ours / plain, "{:.3f}"),
        ]
    return results


def main() -> None:
    report(NAME, run())


if __name__ == "__main__":
    main()
