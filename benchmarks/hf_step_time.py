"""tuner's step on a Hugging Face model against a hand loop and against Hugging Face's ``Trainer``.

The model is examples/hf-gpt2's: a 2-layer GPT-2 built from a config, on tuner's character
corpus, dict items (``input_ids``, ``attention_mask``, ``labels``), the model's own loss.

- **tuner**: ``Trainer`` with the workload's scorer (``model(**batch)``, its ``loss``), the default
  callbacks (CSV log, progress) and no evaluator, AdamW at a constant LR;
- **hand**: the same batches in the same order (the engine's seeded per-epoch permutation,
  collated by ``default_collate``), ``model(**batch).loss``, ``zero_grad``, ``backward``,
  ``loss.item()``, ``step``: the loop a user writes;
- **HF Trainer**: ``transformers.Trainer`` with ``max_steps``, the same batch size and LR,
  constant schedule, no eval, no saving, no logging until the end, on the CPU; its own
  ``RandomSampler`` and ``default_data_collator``. Timed from its first step's start (a callback)
  to the end of training, so its set-up is left out.

All three alternate, pinned to one core; each figure is the median of per-round ratios with its
95% interval (``_common``). Targets: tuner / hand <= 1.05; tuner / HF Trainer is reported.

Run alone: ``python -m benchmarks.hf_step_time`` (needs ``transformers``: ``pip install -e .[hf]``).
"""

from __future__ import annotations

import copy
import importlib.util
import io
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
from rich.console import Console

from benchmarks._common import Result, interleaved, median, one_core, paired_ratio, report, spread
from tuner.spec import OptimizerSpec, ScheduleSegment
from tuner.train.data import StepBatches
from tuner.train.loggers import CsvLogger
from tuner.train.loop import Trainer
from tuner.train.optimizers import build_optimizer
from tuner.train.progress import ProgressCallback
from tuner.train.run_parts import build_scorer
from tuner.train.schedules import build_schedule
from tuner.workloads import Workload, WorkloadContext

NAME = "hf_step_time"
EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "hf-gpt2" / "workload.py"
BATCH_SIZE = 16
STEPS = 60
LR = 1e-3
DATA_SEED = 1234
REPETITIONS = 9
TARGET = 1.05


def _workload() -> Workload:
    spec = importlib.util.spec_from_file_location("hf_gpt2_workload", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    torch.manual_seed(0)
    return module.build(WorkloadContext(options={}, seed=0, base_dir=EXAMPLE.parent))


def tuner_run(workload: Workload, folder: Path) -> float:
    model = copy.deepcopy(workload.model)
    trainer = Trainer(
        model=model,
        batches=StepBatches(workload.train_data, BATCH_SIZE, DATA_SEED),
        scorer=build_scorer(workload, num_classes=workload.num_classes),
        optimizer=build_optimizer(OptimizerSpec(name="adamw", lr=LR), model),
        schedule=build_schedule([ScheduleSegment(shape="constant")], STEPS),
        base_lr=LR,
        max_train_steps=STEPS,
        eval_every=STEPS,
        callbacks=[
            CsvLogger(folder / "metrics.csv", [], 10),
            ProgressCallback(Console(file=io.StringIO()), refresh_every=10),
        ],
    )
    start = time.perf_counter()
    trainer.fit()
    return (time.perf_counter() - start) / STEPS


def hand_run(workload: Workload) -> float:
    from torch.utils.data import default_collate

    model = copy.deepcopy(workload.model)
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=LR)
    order = StepBatches(workload.train_data, BATCH_SIZE, DATA_SEED)  # the same batches, by index
    start = time.perf_counter()
    for step in range(STEPS):
        batch = default_collate([workload.train_data[i] for i in order.indices(step).tolist()])
        loss = model(**batch).loss
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        loss.item()
        optimizer.step()
    return (time.perf_counter() - start) / STEPS


def hf_trainer_run(workload: Workload, folder: Path) -> float:
    from transformers import Trainer as HfTrainer
    from transformers import TrainerCallback, TrainingArguments

    class _Clock(TrainerCallback):
        started = 0.0

        def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            if state.global_step == 0 and not self.started:
                self.started = time.perf_counter()

    clock = _Clock()
    arguments = TrainingArguments(
        output_dir=str(folder / "hf"),
        max_steps=STEPS,
        per_device_train_batch_size=BATCH_SIZE,
        learning_rate=LR,
        lr_scheduler_type="constant",
        weight_decay=0.0,
        logging_steps=STEPS,
        save_strategy="no",
        eval_strategy="no",
        report_to=[],
        use_cpu=True,
        dataloader_num_workers=0,
        disable_tqdm=True,
        seed=DATA_SEED,
    )
    trainer = HfTrainer(
        model=copy.deepcopy(workload.model),
        args=arguments,
        train_dataset=workload.train_data,
        callbacks=[clock],
    )
    trainer.train()
    return (time.perf_counter() - clock.started) / STEPS


def run() -> list[Result]:
    if importlib.util.find_spec("transformers") is None:
        print(f"== {NAME}: transformers is not installed (pip install -e .[hf]): nothing measured")
        return [Result(NAME, "tuner/hand (GPT-2)", float("nan"), "{:.4f}", f"<= {TARGET}", None)]
    torch.set_num_threads(1)
    workload = _workload()
    with one_core() as pinned, tempfile.TemporaryDirectory(prefix="tuner-bench-") as tmp:
        folder = Path(tmp)
        print(f"== {NAME}: GPT-2 (2 layers) step time, batch {BATCH_SIZE}, {STEPS} steps, {pinned}")
        tuner_run(workload, folder), hand_run(workload), hf_trainer_run(workload, folder)  # warm up
        times = interleaved(
            {
                "tuner": lambda: tuner_run(workload, folder),
                "hand": lambda: hand_run(workload),
                "hf": lambda: hf_trainer_run(workload, folder),
            },
            REPETITIONS,
            label="GPT-2",
        )
    to_hand, to_hf = paired_ratio(times["tuner"], times["hand"]), paired_ratio(times["tuner"], times["hf"])
    for key in ("tuner", "hand", "hf"):
        print(f"  {key:6s} {median(times[key]) * 1e3:.2f} ms/step ({spread(times[key])})")
    print(f"  tuner/hand {to_hand}, target <= {TARGET}\n  tuner/HF Trainer {to_hf}")
    return [
        Result(
            NAME, "tuner/hand (GPT-2)", to_hand.median, "{:.4f}", f"<= {TARGET}", to_hand.median <= TARGET
        ),
        Result(NAME, "tuner/hand 95% CI", to_hand.low, f"{{:.4f}}..{to_hand.high:.4f}"),
        Result(NAME, "tuner/HF Trainer (GPT-2)", to_hf.median, "{:.4f}"),
        Result(NAME, "tuner/HF Trainer 95% CI", to_hf.low, f"{{:.4f}}..{to_hf.high:.4f}"),
        Result(NAME, "tuner ms/step", median(times["tuner"]) * 1e3, "{:.2f} ms"),
    ]


def main() -> None:
    report(NAME, run())


if __name__ == "__main__":
    main()
