"""What top-3 checkpointing at every eval costs a training run.

Both sides train digits MLP with the same evaluator (built as ``run.py``'s ``build_evaluator``
does), at the default eval interval, with the callbacks ``run.py`` adds (objective tracker, CSV
and predictions logs, progress on a non-terminal console; TensorBoard off). The only difference:
one adds ``CheckpointCallback(keep_best=3)``, the other has no checkpoint callback at all.
Runs alternate, pinned to one core (the background checkpoint writer shares the training's
core, so its cost cannot hide on the other one), as many short pairs; the figure is the median
of the per-pair ratios with its 95% confidence interval (see ``_common``). Each run gets a fresh
folder.

Run alone: ``python -m benchmarks.checkpoint_cost``.
"""

from __future__ import annotations

import copy
import io
import shutil
import tempfile
from pathlib import Path
from typing import Any

import torch
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
from tuner.spec import StudySpec
from tuner.train.build import build_workload
from tuner.train.checkpoints import LATEST, CheckpointCallback
from tuner.train.data import StepBatches
from tuner.train.evaluation import Evaluator
from tuner.train.events import Callback
from tuner.train.loggers import CsvLogger, PredictionsLogger
from tuner.train.loop import Trainer
from tuner.train.objective import ObjectiveTracker
from tuner.train.optimizers import build_optimizer
from tuner.train.progress import ProgressCallback
from tuner.train.rng import derive_seed
from tuner.train.run_parts import build_evaluator, cross_entropy_per_item
from tuner.train.schedules import build_schedule
from tuner.workloads import Workload

NAME = "checkpoint_cost"
THREADS = 1
REPETITIONS = 31
STEPS = 500  # 5 evals (and checkpoints) at the default eval_every of 100; ~0.6 s a run here
KEEP_BEST = 3
TARGET = 1.05
RUN_SEED = 7


class _TimedCheckpoint(CheckpointCallback):
    """``CheckpointCallback`` that records how long each ``on_checkpoint`` takes (~1 us extra)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.seconds: list[float] = []

    @property
    def state_key(self) -> str:  # saved under the real callback's key: same checkpoint contents
        return CheckpointCallback.__name__

    def on_checkpoint(self, loop: Any) -> None:
        elapsed = stopwatch()
        super().on_checkpoint(loop)
        self.seconds.append(elapsed())


class _Bench:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.spec = StudySpec.model_validate(
            {
                "name": "bench-checkpoints",
                "workload": {"name": "digits-mlp"},
                "training": {"max_train_steps": STEPS, "device": "cpu", "tensorboard": False},
            }
        )
        self.workload: Workload = build_workload(
            self.spec, root, init_seed=derive_seed(self.spec.seed, "init")
        )
        self.evaluator: Evaluator = build_evaluator(self.workload, self.spec, torch.device("cpu"))
        self.runs = 0
        self.checkpoint_seconds: list[float] = []
        self.checkpoint_bytes = 0
        self.checkpoints_per_run = 0

    def run(self, checkpoints: bool) -> float:
        spec, training = self.spec, self.spec.training
        folder = self.root / f"run-{self.runs}"
        self.runs += 1
        model = copy.deepcopy(self.workload.model)
        tracker = ObjectiveTracker(spec.objective.metric, spec.objective.direction)
        checkpointer = _TimedCheckpoint(folder / "checkpoints", tracker, KEEP_BEST) if checkpoints else None
        callbacks: list[Callback] = [
            tracker,
            *([checkpointer] if checkpointer else []),
            CsvLogger(folder / "metrics.csv", self.evaluator.output_names(), training.log_every),
            PredictionsLogger(folder / "predictions.csv"),
            ProgressCallback(
                Console(file=io.StringIO()),
                refresh_every=training.log_every,
                headline=[spec.objective.metric],
                label=spec.name,
            ),
        ]
        trainer = Trainer(
            model=model,
            batches=StepBatches(
                self.workload.train_data, training.batch_size, derive_seed(spec.seed, "data")
            ),
            loss_fn=self.workload.loss_fn or cross_entropy_per_item,
            optimizer=build_optimizer(training.optimizer, model.parameters()),
            schedule=build_schedule(training.schedule, STEPS),
            base_lr=training.optimizer.lr,
            max_train_steps=STEPS,
            eval_every=training.eval_every,
            evaluator=self.evaluator,
            callbacks=callbacks,
            grad_clip_norm=training.grad_clip_norm,
            augment=self.workload.augment,
        )
        torch.manual_seed(RUN_SEED)
        elapsed = stopwatch()
        trainer.fit()
        seconds = elapsed()
        if checkpointer is not None:
            self.checkpoint_seconds += checkpointer.seconds
            self.checkpoints_per_run = len(checkpointer.seconds)
            self.checkpoint_bytes = (folder / "checkpoints" / LATEST).stat().st_size
        shutil.rmtree(folder)
        return seconds


def run(repetitions: int = REPETITIONS) -> list[Result]:
    torch.set_num_threads(THREADS)
    with one_core() as pinned, tempfile.TemporaryDirectory(prefix="tuner-bench-") as tmp:
        bench = _Bench(Path(tmp))
        training = bench.spec.training
        print(
            f"== {NAME}: digits MLP, {STEPS} steps, eval every {training.eval_every}, "
            f"top-{KEEP_BEST} checkpoints vs none, {repetitions} pairs, "
            f"torch.set_num_threads({THREADS}), {pinned}; run folders in {tempfile.gettempdir()}"
        )
        bench.run(True), bench.run(False)  # warm-up, untimed
        bench.checkpoint_seconds.clear()
        times = interleaved(
            {"checkpoints": lambda: bench.run(True), "none": lambda: bench.run(False)},
            repetitions,
            label="checkpoint",
        )
    with_ckpt, without = median(times["checkpoints"]), median(times["none"])
    paired = paired_ratio(times["checkpoints"], times["none"])
    ratio = paired.median
    per_checkpoint_ms = median(bench.checkpoint_seconds) * 1e3
    derived_ms = (
        paired_difference(times["checkpoints"], times["none"]) / max(bench.checkpoints_per_run, 1) * 1e3
    )
    size_kb = bench.checkpoint_bytes / 1024
    print(
        f"  with checkpoints {with_ckpt:.3f}s ({spread(times['checkpoints'])})  "
        f"none {without:.3f}s ({spread(times['none'])})\n"
        f"  checkpoints/none {paired}, target <= {TARGET}; ratio of the medians "
        f"{with_ckpt / without:.4f}  [{load()}]\n"
        f"  {bench.checkpoints_per_run} checkpoints per run, "
        f"latest.pt {size_kb:.0f} KiB, {per_checkpoint_ms:.2f} ms per checkpoint "
        f"(median of on_checkpoint; {derived_ms:.2f} ms from the per-pair wall-time difference)"
    )
    return [
        Result(NAME, "top-3 checkpoints/none", ratio, "{:.4f}", f"<= {TARGET}", ratio <= TARGET),
        Result(NAME, "top-3 checkpoints/none 95% CI", paired.low, f"{{:.4f}}..{paired.high:.4f}"),
        Result(NAME, "ms per checkpoint", per_checkpoint_ms, "{:.2f} ms"),
        Result(NAME, "checkpoint file size", size_kb, "{:.0f} KiB"),
        Result(NAME, "with checkpoints median", with_ckpt, "{:.3f} s"),
        Result(NAME, "no checkpoints median", without, "{:.3f} s"),
    ]


def main() -> None:
    report(NAME, run())


if __name__ == "__main__":
    main()
