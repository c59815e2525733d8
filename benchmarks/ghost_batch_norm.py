"""What ghost batch norm costs over plain batch norm: forward + backward, same input, one core.

``GhostBatchNorm`` runs one native batch-norm call per virtual batch and concatenates the
outputs; ``nn.BatchNorm2d`` makes one call over the whole batch. The cases: a layer alone with
a few and with many virtual batches, a remainder batch, and the whole digits CNN's training step
with ``ghost_batch_size`` against without. Each side runs as many short timed loops, interleaved,
pinned to one core; the figure is the median of the per-pair ratios with its 95% CI (``_common``).
Both layers start from the same weights; an untimed check first confirms that with a virtual
batch as large as the batch the two give identical outputs (the overhead measured is the
splitting, not a different computation).

Run alone: ``python -m benchmarks.ghost_batch_norm``.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from benchmarks._common import Result, interleaved, load, one_core, paired_ratio, report, stopwatch
from tuner.workloads import GhostBatchNorm, WorkloadContext
from tuner.workloads.digits import build_cnn

NAME = "ghost_batch_norm"
THREADS = 1
REPETITIONS = 21


@dataclass(frozen=True)
class Case:
    label: str
    baseline: Callable[[], nn.Module]
    ghost: Callable[[], nn.Module]
    inputs: torch.Tensor
    targets: torch.Tensor | None  # None: a layer alone, the loss is the output's sum
    loops: int  # forward + backward passes per timed run (~0.2 s)
    target: float | None = None


def _layer_case(label: str, shape: tuple[int, ...], virtual: int, loops: int, target: float | None) -> Case:
    generator = torch.Generator().manual_seed(0)
    return Case(
        label,
        lambda: nn.BatchNorm2d(shape[1]),
        lambda: GhostBatchNorm(shape[1], virtual_batch_size=virtual),
        torch.randn(*shape, generator=generator),
        None,
        loops,
        target,
    )


def _digits_case() -> Case:
    def build(**options: object) -> nn.Module:
        torch.manual_seed(0)
        return build_cnn(WorkloadContext(options=dict(options), seed=0)).model

    data = build_cnn(WorkloadContext(options={}, seed=0)).train_data
    inputs, targets = data.tensors  # type: ignore[attr-defined]
    return Case(
        "digits CNN step, batch 64, ghost 16",
        build,
        lambda: build(ghost_batch_size=16),
        inputs[:64],
        targets[:64],
        loops=60,
    )


def cases() -> tuple[Case, ...]:
    return (
        _layer_case("layer (256,32,8,8), 4 virtual batches of 64", (256, 32, 8, 8), 64, 60, target=1.5),
        _layer_case("layer (256,32,8,8), 16 virtual batches of 16", (256, 32, 8, 8), 16, 60, None),
        _layer_case("layer (250,32,16,16), virtual 64: 64x3 + 58", (250, 32, 16, 16), 64, 15, None),
        _digits_case(),
    )


def _timed(model: nn.Module, case: Case) -> Callable[[], float]:
    inputs = case.inputs.clone().requires_grad_(case.targets is None)

    def run() -> float:
        model.train()
        elapsed = stopwatch()
        for _ in range(case.loops):
            out = model(inputs)
            loss = out.sum() if case.targets is None else F.cross_entropy(out, case.targets)
            loss.backward()
        return elapsed()

    return run


def _same_when_one_virtual_batch(case: Case) -> bool | str:
    if case.targets is not None:
        return "n/a (a whole model)"
    plain = case.baseline()
    ghost = GhostBatchNorm(plain.num_features, virtual_batch_size=len(case.inputs))
    ghost.load_state_dict(copy.deepcopy(plain.state_dict()))
    return torch.equal(plain(case.inputs), ghost(case.inputs))


def run_case(case: Case, repetitions: int = REPETITIONS) -> list[Result]:
    print(f"\n{case.label}: {case.loops} forward+backward per run, {repetitions} pairs")
    print(f"  identical to BatchNorm2d with one virtual batch: {_same_when_one_virtual_batch(case)}")
    runs = {"ghost": _timed(case.ghost(), case), "batchnorm": _timed(case.baseline(), case)}
    for run in runs.values():
        run()  # warm-up, untimed
    times = interleaved(runs, repetitions, label=case.label)
    paired = paired_ratio(times["ghost"], times["batchnorm"])
    per_pass = {name: sorted(t)[len(t) // 2] / case.loops * 1e3 for name, t in times.items()}
    target = f"<= {case.target}" if case.target else ""
    print(
        f"  ghost {per_pass['ghost']:.3f} ms  batchnorm {per_pass['batchnorm']:.3f} ms per pass\n"
        f"  ghost/batchnorm {paired}{', target ' + target if target else ''}  [{load()}]"
    )
    return [
        Result(
            NAME,
            f"{case.label} ghost/batchnorm",
            paired.median,
            "{:.3f}",
            target,
            None if case.target is None else paired.median <= case.target,
        ),
        Result(NAME, f"{case.label} 95% CI", paired.low, f"{{:.3f}}..{paired.high:.3f}"),
    ]


def run() -> list[Result]:
    torch.set_num_threads(THREADS)
    results: list[Result] = []
    with one_core() as pinned:
        print(f"== {NAME} ({pinned}, {THREADS} torch thread)")
        for case in cases():
            results += run_case(case)
    return results


if __name__ == "__main__":
    report(NAME, run())
