"""What the engine costs over a hand-written PyTorch loop doing the same training.

The engine is ``Trainer`` with its default callbacks (``CsvLogger`` to a temp file,
``ProgressCallback`` on a non-terminal console) and no evaluator. The hand loop trains the same
model (same initial weights, a deepcopy of one seeded build) on the same batches in the same order
(the engine's per-epoch seeded permutation) with the same optimizer (AdamW, constant LR):
forward, per-item cross entropy + mean, ``zero_grad(set_to_none=True)``, backward,
``loss.item()``, ``optimizer.step()``. Engine and hand runs alternate, pinned to one core, as
many short pairs (each run ~0.4 s: long enough that the engine's per-run set-up inside ``fit``
weighs under 1%); the figure is the median of the per-pair ratios, with its 95% confidence
interval (see ``_common``). An untimed run of each first checks their per-step losses are
bit-identical.

Run alone: ``python -m benchmarks.loop_overhead``; on a GPU, ``python -m benchmarks.loop_overhead
--device cuda`` (the same cases, bf16 included; it says so and measures nothing without one).
"""

from __future__ import annotations

import copy
import io
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from rich.console import Console

from benchmarks._common import (
    Result,
    interleaved,
    load,
    median,
    one_core,
    paired_difference,
    paired_ratio,
    report,
    spread,
    stopwatch,
)
from tuner.spec import OptimizerSpec, ScheduleSegment, TrainingSpec
from tuner.train.data import StepBatches, epoch_seed
from tuner.train.events import Callback
from tuner.train.loggers import CsvLogger
from tuner.train.loop import Trainer
from tuner.train.optimizers import build_optimizer
from tuner.train.precision import Precision
from tuner.train.progress import ProgressCallback
from tuner.train.run_parts import cross_entropy_per_item
from tuner.train.schedules import build_schedule
from tuner.workloads import Workload, WorkloadContext
from tuner.workloads.digits import build_cnn, build_mlp

NAME = "loop_overhead"
THREADS = 1
REPETITIONS = 31
BATCH_SIZE = 64
LR = 1e-3
INIT_SEED = 0  # the model's initial weights
DATA_SEED = 1234  # the batch order
RUN_SEED = 7  # the global RNG at the start of every run (dropout, if any)


@dataclass(frozen=True)
class Case:
    label: str
    build: Callable[[WorkloadContext], Workload]
    steps: int
    target: float
    #: ``training.precision``: the hand loop runs its forward and loss under the same autocast
    precision: str = "32-true"


# Steps chosen so one run takes ~0.4 s here with one torch thread: many short pairs beat a few
# long ones on a machine whose speed drifts (see _common).
CASES = (
    Case("digits MLP", build_mlp, steps=500, target=1.02),
    Case("digits CNN", build_cnn, steps=60, target=1.02),
    # bf16 autocast: the engine's precision contract against the same autocast written by hand
    Case("digits MLP bf16", build_mlp, steps=400, target=1.03, precision="bf16-mixed"),
    Case("digits CNN bf16", build_cnn, steps=40, target=1.03, precision="bf16-mixed"),
)


class _LossRecorder(Callback):
    """Collects ``loop.last_loss`` after every step (only in the untimed equality run)."""

    order = 100

    def __init__(self) -> None:
        self.losses: list[float] = []

    def on_train_step_end(self, loop: Any) -> None:
        self.losses.append(loop.last_loss)


def build_workload(case: Case) -> Workload:
    torch.manual_seed(INIT_SEED)
    return case.build(WorkloadContext(options={}, seed=0))


def engine_run(
    workload: Workload,
    steps: int,
    folder: Path,
    extra: tuple[Callback, ...] = (),
    precision: str = "32-true",
    device: str = "cpu",
) -> tuple[float, torch.nn.Module]:
    """One ``Trainer.fit()`` with the default callbacks; returns (seconds, trained model)."""
    training = TrainingSpec()
    model = copy.deepcopy(workload.model).to(device)
    callbacks: list[Callback] = [
        CsvLogger(folder / "metrics.csv", [], training.log_every),
        ProgressCallback(Console(file=io.StringIO()), refresh_every=training.log_every),
        *extra,
    ]
    trainer = Trainer(
        model=model,
        batches=StepBatches(workload.train_data, BATCH_SIZE, DATA_SEED, device),
        loss_fn=cross_entropy_per_item,
        optimizer=build_optimizer(OptimizerSpec(name="adamw", lr=LR), model.parameters()),
        schedule=build_schedule([ScheduleSegment(shape="constant")], steps),
        base_lr=LR,
        max_train_steps=steps,
        eval_every=training.eval_every,
        evaluator=None,
        callbacks=callbacks,
        precision=Precision(precision, torch.device(device).type),
    )
    torch.manual_seed(RUN_SEED)
    elapsed = stopwatch()
    trainer.fit()
    return elapsed(), model


def hand_run(
    workload: Workload,
    steps: int,
    losses: list[float] | None = None,
    precision: str = "32-true",
    device: str = "cpu",
) -> tuple[float, torch.nn.Module]:
    """The same training written by hand (its forward and loss under autocast for a mixed
    precision, as PyTorch's AMP recipe has it); returns (seconds, trained model)."""
    dtype = {"bf16-mixed": torch.bfloat16, "16-mixed": torch.float16}.get(precision)
    model = copy.deepcopy(workload.model).to(device)
    on_cpu = torch.device(device).type == "cpu"
    optimizer = torch.optim.AdamW(model.parameters(), lr=LR, weight_decay=0.0)
    inputs, targets = workload.train_data.tensors  # type: ignore[attr-defined]
    size = len(inputs)
    steps_per_epoch = size // BATCH_SIZE
    order = torch.empty(0, dtype=torch.long)
    torch.manual_seed(RUN_SEED)
    model.train()
    elapsed = stopwatch()
    for step in range(steps):
        epoch, position = divmod(step, steps_per_epoch)
        if position == 0:
            generator = torch.Generator().manual_seed(epoch_seed(DATA_SEED, epoch))
            order = torch.randperm(size, generator=generator)
        batch = order[position * BATCH_SIZE : (position + 1) * BATCH_SIZE]
        x, y = inputs[batch], targets[batch]
        if not on_cpu:
            x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
        if dtype is None:
            loss = F.cross_entropy(model(x), y, reduction="none").mean()
        else:
            with torch.autocast(torch.device(device).type, dtype=dtype):
                loss = F.cross_entropy(model(x), y, reduction="none").mean()
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        value = loss.item()
        if losses is not None:
            losses.append(value)
        optimizer.step()
    return elapsed(), model


def _same_weights(a: torch.nn.Module, b: torch.nn.Module) -> bool:
    return all(
        torch.equal(x, y) for x, y in zip(a.state_dict().values(), b.state_dict().values(), strict=True)
    )


def run_case(case: Case, folder: Path, repetitions: int = REPETITIONS, device: str = "cpu") -> list[Result]:
    workload = build_workload(case)
    print(
        f"\n{case.label}: batch {BATCH_SIZE}, {case.steps} steps, AdamW lr {LR:g}, {case.precision}, "
        f"{repetitions} pairs"
    )

    # Untimed: the equality check (it also warms up both paths).
    recorder = _LossRecorder()
    _, engine_model = engine_run(workload, case.steps, folder, (recorder,), case.precision, device)
    hand_losses: list[float] = []
    _, hand_model = hand_run(workload, case.steps, hand_losses, case.precision, device)
    mismatches = sum(a != b for a, b in zip(recorder.losses, hand_losses, strict=True))
    worst = max(abs(a - b) for a, b in zip(recorder.losses, hand_losses, strict=True))
    weights = _same_weights(engine_model, hand_model)
    same = "identical" if mismatches == 0 else f"DIFFERENT at {mismatches} steps (max |diff| {worst:.3g})"
    print(f"  per-step losses engine vs hand: {same}; final weights identical: {weights}")

    times = interleaved(
        {
            "engine": lambda: engine_run(
                workload, case.steps, folder, precision=case.precision, device=device
            )[0],
            "hand": lambda: hand_run(workload, case.steps, precision=case.precision, device=device)[0],
        },
        repetitions,
        label=case.label,
    )
    engine, hand = median(times["engine"]), median(times["hand"])
    paired = paired_ratio(times["engine"], times["hand"])
    ratio = paired.median
    overhead_us = paired_difference(times["engine"], times["hand"]) / case.steps * 1e6
    print(
        f"  engine {engine:.3f}s ({spread(times['engine'])})  hand {hand:.3f}s ({spread(times['hand'])})\n"
        f"  engine/hand {paired}, target <= {case.target}; ratio of the medians {engine / hand:.4f}\n"
        f"  overhead {overhead_us:.1f} us/step of {hand / case.steps * 1e6:.0f} us/step  [{load()}]"
    )
    return [
        Result(NAME, f"{case.label} engine/hand", ratio, "{:.4f}", f"<= {case.target}", ratio <= case.target),
        Result(NAME, f"{case.label} engine/hand 95% CI", paired.low, f"{{:.4f}}..{paired.high:.4f}"),
        Result(NAME, f"{case.label} overhead/step", overhead_us, "{:.1f} us"),
        Result(NAME, f"{case.label} engine median", engine, "{:.3f} s"),
        Result(NAME, f"{case.label} hand median", hand, "{:.3f} s"),
        Result(
            NAME,
            f"{case.label} loss mismatches",
            mismatches,
            f"{{:.0f}} of {case.steps}",
            "0",
            mismatches == 0,
        ),
    ]


def run(device: str = "cpu") -> list[Result]:
    """Every case on ``device`` (``cuda``: the same comparison on a GPU, where the engine's copy of
    each batch to the device and the hand loop's are the same ``.to(device)``)."""
    torch.set_num_threads(THREADS)
    results: list[Result] = []
    with one_core() as pinned, tempfile.TemporaryDirectory(prefix="tuner-bench-") as tmp:
        print(
            f"== {NAME}: engine vs hand-written loop on {device}, torch.set_num_threads({THREADS}), {pinned}"
        )
        for case in CASES:
            results += run_case(case, Path(tmp), device=device)
    return results


def main() -> None:
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu", help="cpu (default) or cuda: the same cases on a GPU")
    device = parser.parse_args().device
    if device.startswith("cuda") and not torch.cuda.is_available():
        print(f"{NAME}: --device {device}, but no CUDA device is visible: nothing measured")
        return
    report(NAME, run(device))


if __name__ == "__main__":
    main()
