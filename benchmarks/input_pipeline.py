"""What ``training.data_workers: 2`` buys a run whose dataset costs ~1 ms per item.

Both sides train the same digits MLP (same initial weights) with ``Trainer`` on the same
step-indexed batches (``StepBatches``, batch 32: ~32 ms of data per step against well under a
millisecond of model), no evaluator, no callbacks: one reads the batches on the training thread
(``data_workers: 0``), the other in 2 DataLoader workers (``prefetch_batches: 2``). The headline
is the steady state (seconds per step after the first step); the first step (which waits for
the workers to start) and whole runs (``fit`` + ``close``, start and shutdown included) are
reported beside it.

The dataset's cost per item, two ways:

- ``sleep``: ``time.sleep(0.001)`` per item, standing for I/O (a file read, a network fetch):
  the GIL is released and no core is busy, so workers overlap waiting, even on one core.
- ``cpu``: 1 ms of Python arithmetic per item (calibrated at start, holding the GIL, like
  decoding or augmenting in Python): only another core helps, and this machine has two for the
  training process and both workers, so its figure moves with whatever else runs here. Beside
  it, how much more CPU work two processes got done than one just before (2.0 on idle cores).

And a third comparison behind a design decision: a ``TensorDataset`` (digits, indexed in one go)
read on the training thread, as the engine does whatever ``data_workers`` says, against the
same read forced through 2 workers: the cost of shipping each batch between processes.

Not pinned to one core (unlike the in-process benchmarks): workers exist to use other cores.
Both sides run one torch intra-op thread (see ``THREADS``). Runs alternate (A B, B A...) as
many short pairs; each speed-up is the median of the per-pair ratios of times (= the ratio of
steps/s) with its 95% confidence interval (see ``_common``). An untimed run of each side first
checks their per-step losses are identical.

Run alone: ``python -m benchmarks.input_pipeline``.
"""

from __future__ import annotations

import copy
import multiprocessing
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch.utils.data import Dataset, TensorDataset

from benchmarks._common import Result, interleaved, load, median, paired_ratio, report, stopwatch
from tuner.spec import OptimizerSpec, ScheduleSegment
from tuner.train.data import StepBatches
from tuner.train.events import Callback
from tuner.train.loop import Trainer
from tuner.train.optimizers import build_optimizer
from tuner.train.run_parts import cross_entropy_per_item
from tuner.train.schedules import build_schedule
from tuner.workloads import Workload, WorkloadContext
from tuner.workloads.digits import build_mlp

NAME = "input_pipeline"
# One intra-op thread on both sides: with 2 workers the engine would take the training process
# down to max(1, threads - 2) = 1 anyway on this machine, and 2 threads on the other side would
# make the comparison one of thread counts (OpenMP threads stall badly on a busy 2-core machine).
THREADS = 1
BATCH_SIZE = 32
WORKERS = 2
PREFETCH = 2
LR = 1e-3
DATA_SEED = 1234
RUN_SEED = 7
ITEM_COST_S = 0.001


def _work(iterations: int) -> int:
    """A fixed amount of Python CPU work holding the GIL (not a spin on the clock: a worker
    that gets no core must take longer, as real decoding would)."""
    total = 0
    for i in range(iterations):
        total += i
    return total


def _iterations_per(seconds: float) -> int:
    """How many ``_work`` iterations take ``seconds`` on this machine (best of 5 timings)."""
    probe = 200_000
    best = min(_timed(lambda: _work(probe)) for _ in range(5))
    return max(1, round(probe * seconds / best))


def _timed(function: Callable[[], object]) -> float:
    elapsed = stopwatch()
    function()
    return elapsed()


class SlowItems(Dataset):
    """The digits rows, each read costing ``ITEM_COST_S`` of sleep or of CPU work."""

    def __init__(self, data: TensorDataset, cost: str) -> None:
        self.inputs, self.targets = data.tensors
        self.cost = cost
        self.iterations = _iterations_per(ITEM_COST_S) if cost == "cpu" else 0

    def __len__(self) -> int:
        return len(self.inputs)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        if self.cost == "sleep":
            time.sleep(ITEM_COST_S)
        else:
            _work(self.iterations)
        return self.inputs[index], self.targets[index]


@dataclass(frozen=True)
class Case:
    label: str
    dataset: Callable[[TensorDataset], Dataset]
    steps: int
    repetitions: int
    target: float | None  # workers' steps/s over the training thread's, at least


CASES = (
    Case("sleep 1 ms/item", lambda data: SlowItems(data, "sleep"), steps=40, repetitions=11, target=1.5),
    Case("cpu 1 ms/item", lambda data: SlowItems(data, "cpu"), steps=40, repetitions=11, target=None),
    # the engine never uses workers for a TensorDataset; this measures what they would cost
    Case("TensorDataset", lambda data: data, steps=400, repetitions=11, target=None),
)


class _LossRecorder(Callback):
    order = 100

    def __init__(self) -> None:
        self.losses: list[float] = []

    def on_train_step_end(self, loop: Any) -> None:
        self.losses.append(loop.last_loss)


class _FirstStepClock(Callback):
    """When the first step ended (its batch is the one that waits for the workers to start)."""

    order = 100

    def __init__(self) -> None:
        self.first_step_end: float | None = None

    def on_train_step_end(self, loop: Any) -> None:
        if self.first_step_end is None:
            self.first_step_end = time.perf_counter()


@dataclass(frozen=True)
class RunTimes:
    total: float  # fit + close (seconds)
    first_step: float  # fit start to the end of the first step: start-up included
    per_step: float  # seconds per step after the first (the steady state)


def build_workload() -> Workload:
    torch.manual_seed(0)
    return build_mlp(WorkloadContext(options={"hidden_sizes": [64], "dropout": 0.1}, seed=0))


def train(
    workload: Workload, dataset: Dataset, steps: int, workers: int, extra: tuple[Callback, ...] = ()
) -> RunTimes:
    """One run: ``fit`` of ``steps`` steps, then ``close`` (the workers end)."""
    model = copy.deepcopy(workload.model)
    batches = StepBatches(dataset, BATCH_SIZE, DATA_SEED, data_workers=workers, prefetch_batches=PREFETCH)
    if workers and isinstance(dataset, TensorDataset):
        batches.uses_workers = True  # what the engine would do without its TensorDataset rule
    clock = _FirstStepClock()
    trainer = Trainer(
        model=model,
        batches=batches,
        loss_fn=cross_entropy_per_item,
        optimizer=build_optimizer(OptimizerSpec(name="adamw", lr=LR), model.parameters()),
        schedule=build_schedule([ScheduleSegment(shape="constant")], steps),
        base_lr=LR,
        max_train_steps=steps,
        eval_every=steps,
        callbacks=(clock, *extra),
    )
    torch.manual_seed(RUN_SEED)
    started = time.perf_counter()
    try:
        trainer.fit()
        fitted = time.perf_counter()
    finally:
        batches.close()
    assert clock.first_step_end is not None
    return RunTimes(
        total=time.perf_counter() - started,
        first_step=clock.first_step_end - started,
        per_step=(fitted - clock.first_step_end) / (steps - 1),
    )


def run_case(case: Case, workload: Workload) -> list[Result]:
    dataset = case.dataset(workload.train_data)  # type: ignore[arg-type]
    sides = {"0 workers": 0, f"{WORKERS} workers": WORKERS}
    print(
        f"\n{case.label}: batch {BATCH_SIZE}, {case.steps} steps, prefetch_batches {PREFETCH}, "
        f"{case.repetitions} pairs"
    )
    recorders = {name: _LossRecorder() for name in sides}
    for name, workers in sides.items():  # untimed: equality check and warm-up
        train(workload, dataset, case.steps, workers, (recorders[name],))
    same = recorders["0 workers"].losses == recorders[f"{WORKERS} workers"].losses
    print(f"  per-step losses 0 vs {WORKERS} workers: {'identical' if same else 'DIFFERENT'}")
    runs: dict[str, list[RunTimes]] = {name: [] for name in sides}

    def timed(name: str, workers: int) -> Callable[[], float]:
        def once() -> float:
            runs[name].append(train(workload, dataset, case.steps, workers))
            return runs[name][-1].total

        return once

    interleaved(
        {name: timed(name, workers) for name, workers in sides.items()}, case.repetitions, label=case.label
    )
    thread, pool = runs["0 workers"], runs[f"{WORKERS} workers"]
    # time(0) / time(N) per pair = steps/s(N) / steps/s(0)
    steady = paired_ratio([r.per_step for r in thread], [r.per_step for r in pool])
    whole = paired_ratio([r.total for r in thread], [r.total for r in pool])
    rate = {name: 1 / median([r.per_step for r in values]) for name, values in runs.items()}
    first = {name: median([r.first_step for r in values]) * 1000 for name, values in runs.items()}
    print(
        f"  steady state: 0 workers {rate['0 workers']:.1f} steps/s, {WORKERS} workers "
        f"{rate[f'{WORKERS} workers']:.1f} steps/s; speed-up {steady}"
        + (f", target >= {case.target}" if case.target else "")
        + f"\n  first step (start-up included): 0 workers {first['0 workers']:.0f} ms, "
        f"{WORKERS} workers {first[f'{WORKERS} workers']:.0f} ms\n"
        f"  whole runs of {case.steps} steps: speed-up {whole}  [{load()}]"
    )
    passed = None if case.target is None else steady.median >= case.target
    return [
        Result(NAME, f"{case.label} 0 workers", rate["0 workers"], "{:.1f} steps/s"),
        Result(NAME, f"{case.label} {WORKERS} workers", rate[f"{WORKERS} workers"], "{:.1f} steps/s"),
        Result(
            NAME,
            f"{case.label} speed-up",
            steady.median,
            "{:.2f}x",
            f">= {case.target}" if case.target else "",
            passed,
        ),
        Result(NAME, f"{case.label} speed-up 95% CI", steady.low, f"{{:.2f}}..{steady.high:.2f}"),
        Result(NAME, f"{case.label} first step, {WORKERS} workers", first[f"{WORKERS} workers"], "{:.0f} ms"),
        Result(NAME, f"{case.label} whole-run speed-up", whole.median, f"{{:.2f}}x ({case.steps} steps)"),
        Result(NAME, f"{case.label} same losses", float(same), "{:.0f}", "1", same),
    ]


def _parallel_capacity(repetitions: int = 5) -> float:
    """How much more ``_work`` two forked processes got done than one, right now (2.0 on two
    idle cores): the ceiling of the ``cpu`` case's speed-up on this machine at this time. The
    cost of starting and joining two processes (measured with no work) is taken off."""
    context = multiprocessing.get_context("fork")
    amount = _iterations_per(0.2)

    def two(iterations: int) -> float:
        processes = [context.Process(target=_work, args=(iterations,)) for _ in range(2)]
        elapsed = stopwatch()
        for process in processes:
            process.start()
        for process in processes:
            process.join()
        return elapsed()

    ratios = []
    for _ in range(repetitions):
        one = _timed(lambda: _work(amount))
        ratios.append(2 * one / max(1e-6, two(amount) - two(0)))
    return median(ratios)


def run() -> list[Result]:
    workload = build_workload()
    before = torch.get_num_threads()
    torch.set_num_threads(THREADS)
    print(f"== {NAME}: steps/s with 0 vs {WORKERS} DataLoader workers, torch.set_num_threads({THREADS})")
    results: list[Result] = []
    try:
        for case in CASES:
            if case.label.startswith("cpu"):
                capacity = _parallel_capacity()
                print(f"\n2 processes of CPU work got {capacity:.2f}x one process's done here, just now")
                results.append(Result(NAME, "2-process CPU capacity (2.0 when idle)", capacity, "{:.2f}x"))
            results += run_case(case, workload)
    finally:
        torch.set_num_threads(before)
    return results


def main() -> None:
    report(NAME, run())


if __name__ == "__main__":
    main()
