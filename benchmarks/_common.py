"""Shared pieces of the benchmarks: results, interleaved timing, paired ratios, the summary table.

Every figure is a ratio against a baseline measured in the same process run, interleaved with it
(A, B, B, A...), so a machine that is busy or throttled slows both sides alike. On a shared VM
the CPU's speed also jumps between runs of the very same code (seen here: the same digits CNN
step at 6.2 ms and at 9.0 ms, minutes apart, on an idle guest): the in-process comparisons
therefore run on one core, as many short pairs, and report the median of the per-pair ratios
with its 95% confidence interval, so a reader sees how far a verdict stands from the noise.
"""

from __future__ import annotations

import contextlib
import math
import os
import statistics
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Result:
    """One figure of one benchmark; ``passed`` is None for a figure reported without a target."""

    benchmark: str
    figure: str
    value: float
    fmt: str  # how to print value, e.g. "{:.3f}" or "{:.0f} ms"
    target: str = ""
    passed: bool | None = None

    @property
    def shown(self) -> str:
        return self.fmt.format(self.value)

    @property
    def verdict(self) -> str:
        return "-" if self.passed is None else "PASS" if self.passed else "FAIL"


def interleaved(
    runs: dict[str, Callable[[], float]], repetitions: int, *, label: str = ""
) -> dict[str, list[float]]:
    """Call each of ``runs`` in turn, ``repetitions`` rounds; each returns its own wall time (s).

    The callables time themselves so their setup (building a model, a folder) stays untimed.
    Every other round runs in reverse order (A B, B A, A B...) so a drift in machine speed, or
    going first after a slow setup, does not always land on the same side.
    """
    times: dict[str, list[float]] = {name: [] for name in runs}
    for rep in range(repetitions):
        order = list(runs) if rep % 2 == 0 else list(reversed(runs))
        for name in order:
            times[name].append(runs[name]())
        if label and ((rep + 1) % 10 == 0 or rep + 1 == repetitions):  # a sign of life, not a log
            last = "  ".join(f"{name} {times[name][-1]:.3f}s" for name in runs)
            print(f"  {label} rep {rep + 1}/{repetitions}: {last}", flush=True)
    return times


def median(values: Sequence[float]) -> float:
    return statistics.median(values)


@dataclass(frozen=True)
class PairedMedian:
    """The median of a per-pair figure over ``pairs`` pairs, and its 95% confidence interval."""

    median: float
    low: float
    high: float
    pairs: int


class PairedRatio(PairedMedian):
    """The median of ``a[i] / b[i]``."""

    def __str__(self) -> str:
        return f"{self.median:.4f} (95% CI {self.low:.4f}..{self.high:.4f}, {self.pairs} pairs)"


class PairedDifference(PairedMedian):
    """The median of ``a[i] - b[i]``, in seconds."""

    def __str__(self) -> str:
        return f"{self.median:+.2f} s (95% CI {self.low:+.2f}..{self.high:+.2f}, {self.pairs} pairs)"


def _median_interval(values: Sequence[float]) -> tuple[float, float, float]:
    """The median and its distribution-free 95% interval (order statistics, normal approximation
    of the binomial): no assumption about how the machine's noise is shaped."""
    ordered = sorted(values)
    n = len(ordered)
    k = max(0, math.floor((n - 1.96 * math.sqrt(n)) / 2))
    return statistics.median(ordered), ordered[k], ordered[n - 1 - k]


def paired_ratio(a: Sequence[float], b: Sequence[float]) -> PairedRatio:
    """Median of ``a[i] / b[i]``: the two runs of a pair are close in time, so a slow patch of
    the machine mostly hits both; one it hits alone makes an outlier, which the median ignores."""
    ratios = [x / y for x, y in zip(a, b, strict=True)]
    return PairedRatio(*_median_interval(ratios), len(ratios))


def paired_difference(a: Sequence[float], b: Sequence[float]) -> float:
    """Median of ``a[i] - b[i]`` (seconds): what one side adds to the other, pair by pair."""
    return paired_difference_interval(a, b).median


def paired_difference_interval(a: Sequence[float], b: Sequence[float]) -> PairedDifference:
    """``paired_difference`` with its 95% interval: with a few pairs (say 8) the interval spans
    the extremes, which is what a reader needs to see before trusting a change of half a second."""
    differences = [x - y for x, y in zip(a, b, strict=True)]
    return PairedDifference(*_median_interval(differences), len(differences))


@contextlib.contextmanager
def one_core() -> Iterator[str]:
    """Pin the calling thread (and the threads it starts) to one core while timing.

    Both sides of a comparison then run on the same core: on a VM the two cores can differ in
    speed (a busy neighbour on one), which otherwise lands on whichever side ran there. A
    background thread (the checkpoint writer) shares that core too, so its cost is counted,
    never hidden on the other core. Restores the previous affinity; a no-op off Linux.
    """
    if not hasattr(os, "sched_setaffinity"):
        yield "not pinned (no sched_setaffinity here)"
        return
    before = os.sched_getaffinity(0)
    core = max(before)
    os.sched_setaffinity(0, {core})
    try:
        yield f"pinned to core {core}"
    finally:
        os.sched_setaffinity(0, before)


def load() -> str:
    """The 1-minute load average against the cores: other work on the machine makes figures noisy.

    The benchmark itself keeps one core busy (load ~1); more than a quarter of the others busy on
    top of that is flagged.
    """
    cores = os.cpu_count() or 1
    one_minute = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    busy = one_minute - 1 > 0.25 * cores
    note = "; other processes were busy too, figures are noisier" if busy else ""
    return f"load average {one_minute:.2f} on {cores} cores{note}"


def spread(values: Sequence[float]) -> str:
    """``min..max`` of a sample, to show how noisy a median is."""
    return f"{min(values):.3f}..{max(values):.3f}s"


def stopwatch() -> Callable[[], float]:
    """``elapsed = stopwatch(); ...; elapsed()`` -> seconds since the call."""
    start = time.perf_counter()
    return lambda: time.perf_counter() - start


def print_table(results: Sequence[Result]) -> None:
    rows = [("benchmark", "figure", "value", "target", "result")]
    rows += [(r.benchmark, r.figure, r.shown, r.target or "-", r.verdict) for r in results]
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for index, row in enumerate(rows):
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip())
        if index == 0:
            print("  ".join("-" * width for width in widths))


def report(title: str, results: Sequence[Result]) -> None:
    """The end of a benchmark run on its own: its figures as a table."""
    print(f"\n{title}")
    print_table(results)


def busy_study(folder: Path, name: str, busy_s: float, steps: int, trials: int) -> Path:
    """``folder/study.yaml``: round 1 of ``trials`` trials on ``busy_workload.py`` (copied beside
    it), each ``steps`` steps spinning ``busy_s`` in all, one eval, one checkpoint: a trial whose
    cost is known, so what shows is what tuner adds (``orchestration.py``, ``fleet.py``)."""
    import shutil

    import yaml

    shutil.copy(Path(__file__).with_name("busy_workload.py"), folder / "busy_workload.py")
    study = {
        "name": name,
        "workload": {"name": "busy_workload.py:build", "options": {"busy_s": busy_s, "steps": steps}},
        "training": {
            "batch_size": 16,
            "max_train_steps": steps,
            "eval_every": steps,
            "log_every": steps,
            "keep_best_checkpoints": 1,
            "prediction_samples": 1,
            "tensorboard": False,
            "device": "cpu",
            "optimizer": {"name": "sgd", "lr": 0.1},
        },
        "search_space": {"optimizer.lr": {"type": "float", "low": 1e-3, "high": 1.0, "log": True}},
        "rounds": {"round1": {"trials": trials, "steps": steps}},
    }
    path = folder / "study.yaml"
    path.write_text(yaml.safe_dump(study, sort_keys=False))
    return path


def calibration_arguments(name: str, doc: str, quick: str) -> tuple[int, bool]:
    """A verdict calibration's command line (``python -m benchmarks.<name> [--repetitions N]
    [--quick]``): the repetitions of every case, and whether ``quick`` (``quick`` says what it
    runs: 10 repetitions of fewer cases, a smoke test)."""
    import argparse

    parser = argparse.ArgumentParser(prog=f"python -m benchmarks.{name}", description=doc.split("\n")[0])
    parser.add_argument("--repetitions", type=int, default=200, help="of every case (default 200)")
    parser.add_argument("--quick", action="store_true", help=quick)
    args = parser.parse_args()
    return (10 if args.quick else args.repetitions), args.quick


def calibration_study(folder: Path, steps: int, eval_every: int, rounds: dict[str, object]) -> Path:
    """``folder/calibration.yaml``: a study whose rounds a verdict calibration plans for real (its
    trials are simulated, never trained): digits-mlp, the LR searched, ``rounds`` as given."""
    import yaml

    document = {
        "name": "calibration",
        "workload": {"name": "digits-mlp", "options": {"hidden_sizes": [16]}},
        "objective": {"metric": "val/error_rate", "direction": "minimize"},
        "training": {
            "batch_size": 32,
            "max_train_steps": steps,
            "eval_every": eval_every,
            "optimizer": {"name": "adamw", "lr": 1e-3},
        },
        "search_space": {"optimizer.lr": {"type": "float", "low": 1e-4, "high": 1e-1, "log": True}},
        "rounds": rounds,
    }
    path = folder / "calibration.yaml"
    path.write_text(yaml.safe_dump(document))
    return path
