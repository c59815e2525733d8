"""A trial as 2 processes (gloo, DistributedDataParallel) against the same trial in 1 process.

Both are real ``tuner train`` runs of the digits CNN (a small and a 10x heavier step), interleaved
pair by pair; the figure is training steps per second, read from each run's own ``metrics.csv``
(``elapsed_s`` at the last step: training time, without the seconds of imports and process
start-up), and the median of the per-pair ratios with its 95% CI.

No target: on this 2-core CPU machine two processes share the cores one process already uses
(each rank gets one thread), and every step adds a gradient all-reduce and a loss/stop
all-reduce over gloo. Near 1.0x is what to expect; the point is that it is measured. On GPUs
each rank has its own device and the ratio is what a user buys with a second one.

Run alone: ``python -m benchmarks.multi_process``.
"""

from __future__ import annotations

import csv
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import yaml

from benchmarks._common import REPO_ROOT, Result, interleaved, load, paired_ratio, report

NAME = "multi_process"
PAIRS = 5


@dataclass(frozen=True)
class Case:
    label: str
    channels: list[int]
    batch_size: int
    steps: int


# a step of a few ms, where gloo's per-step all-reduces weigh most; one 10x heavier
CASES = (
    Case("digits CNN [16,32], batch 64", [16, 32], 64, 300),
    Case("digits CNN [64,128], batch 256", [64, 128], 256, 60),
)


def _study(folder: Path, case: Case, processes: int) -> Path:
    study = {
        "name": f"bench-{processes}p",
        "seed": 0,
        "workload": {"name": "digits-cnn", "options": {"channels": case.channels}},
        "training": {
            "batch_size": case.batch_size,
            "eval_batch_size": 512,
            "max_train_steps": case.steps,
            "eval_every": case.steps,
            "log_every": 50,
            "keep_best_checkpoints": 0,
            "tensorboard": False,
            "device": "cpu",
            "processes_per_trial": processes,
            "optimizer": {"name": "momentum", "lr": 0.05},
        },
    }
    path = folder / f"study-{case.channels[0]}-{processes}.yaml"
    path.write_text(yaml.safe_dump(study, sort_keys=False))
    return path


def _timed_run(study: Path, output: Path):
    def run() -> float:
        done = subprocess.run(
            [sys.executable, "-m", "tuner", "train", str(study), "--output-dir", str(output),
             "--fresh", "--no-progress"],
            cwd=REPO_ROOT, capture_output=True, text=True, check=False,
        )  # fmt: skip
        if done.returncode != 0:
            raise RuntimeError(done.stderr)
        newest = max((output).glob("*/train/run-*"))
        with (newest / "metrics.csv").open() as handle:
            last = list(csv.DictReader(handle))[-1]
        return float(last["elapsed_s"])  # training time of all the steps

    return run


def run_case(case: Case, root: Path) -> list[Result]:
    print(f"\n{case.label}, {case.steps} steps: 1 process vs 2 (gloo), {PAIRS} pairs")
    runs = {
        "2 processes": _timed_run(_study(root, case, 2), root / f"runs-{case.channels[0]}-2"),
        "1 process": _timed_run(_study(root, case, 1), root / f"runs-{case.channels[0]}-1"),
    }
    times = interleaved(runs, PAIRS, label=NAME)
    # steps/s ratio (2 over 1) = time of 1 / time of 2
    paired = paired_ratio(times["1 process"], times["2 processes"])
    rates = {name: case.steps / sorted(t)[len(t) // 2] for name, t in times.items()}
    print(
        f"  1 process {rates['1 process']:.1f} steps/s, 2 processes {rates['2 processes']:.1f} steps/s\n"
        f"  2-process/1-process steps/s {paired}  [{load()}]"
    )
    return [
        Result(NAME, f"{case.label}: 1 process steps/s", rates["1 process"], "{:.1f}"),
        Result(NAME, f"{case.label}: 2 processes steps/s", rates["2 processes"], "{:.1f}"),
        Result(NAME, f"{case.label}: 2p/1p steps/s", paired.median, "{:.3f}"),
        Result(NAME, f"{case.label}: 2p/1p 95% CI", paired.low, f"{{:.3f}}..{paired.high:.3f}"),
    ]


def run() -> list[Result]:
    print(f"== {NAME}")
    results: list[Result] = []
    with tempfile.TemporaryDirectory() as folder:
        for case in CASES:
            results += run_case(case, Path(folder))
    return results


if __name__ == "__main__":
    report(NAME, run())
