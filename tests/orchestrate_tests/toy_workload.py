"""A tiny workload whose failures are chosen by its options (orchestration tests only).

Options: ``step_sleep_s`` (slow steps, to kill trials mid-run), ``fail`` (``raise``,
``raise_at_step``, ``segfault``, ``hang``, ``hang_once``, ``oom``, ``alloc``, ``nan``,
``crash_once``), ``fail_at_step``, ``marker_dir`` (where ``crash_once`` and ``hang_once``
remember they already happened), ``diverge`` (NaN loss when true),
``nan_above_weight`` (NaN loss once a weight's magnitude exceeds it: a large learning rate diverges),
``fit_at_steps`` (``[[lr, step], ...]``: with that learning rate the model fits the data, every
prediction right, from that step on; other learning rates never fit. The model reads its learning
rate off a clock parameter that plain SGD moves by exactly the learning rate at the first step).
"""

from __future__ import annotations

import ctypes
import os
import time
from pathlib import Path

import torch
from torch.utils.data import TensorDataset

from tuner.workloads import Workload, WorkloadContext

if os.environ.get("TOY_IMPORT_LOG"):  # which processes import the user's code (a test asks)
    with open(os.environ["TOY_IMPORT_LOG"], "a") as log:
        log.write(f"{os.getpid()} {os.getppid()}\n")


class _Toy(torch.nn.Module):
    def __init__(self, sleep_s: float, fit_at_steps: list[list[float]] | None = None) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(4, 2)
        self.sleep_s = sleep_s
        self.fit_at_steps = [(float(lr), int(step)) for lr, step in fit_at_steps or []]
        if self.fit_at_steps:
            self.clock = torch.nn.Parameter(torch.zeros(()))  # SGD adds the learning rate each step
            self.register_buffer("trained_steps", torch.zeros((), dtype=torch.long))
            self.register_buffer("lr_seen", torch.zeros(()))

    def clock_loss(self) -> torch.Tensor:
        """Zero, with a gradient of -1 on the clock."""
        return self.clock.detach() - self.clock

    def forward(self, inputs: torch.Tensor) -> torch.Tensor:
        if self.sleep_s and self.training:
            time.sleep(self.sleep_s)
        if not self.fit_at_steps:
            return self.linear(inputs)
        if self.training:
            if int(self.trained_steps) == 1:
                self.lr_seen.fill_(float(self.clock.detach()))
            self.trained_steps += 1
            return self.linear(inputs)
        fit_step = next(
            (step for lr, step in self.fit_at_steps if abs(lr - float(self.lr_seen)) <= 1e-4 * lr), None
        )
        if fit_step is not None and int(self.trained_steps) >= fit_step:
            score = (inputs[:, 0] + inputs[:, 1]) * 100
            return torch.stack([-score, score], dim=1)
        return torch.zeros(inputs.shape[0], 2)


def build(ctx: WorkloadContext) -> Workload:
    options = ctx.options
    fail = options.get("fail", "")
    if fail == "raise":
        raise ValueError("toy workload asked to fail")
    generator = torch.Generator().manual_seed(ctx.seed)
    inputs = torch.randn(96, 4, generator=generator)
    targets = (inputs[:, 0] + inputs[:, 1] > 0).long()
    calls = {"n": 0}
    fail_at = int(options.get("fail_at_step", 1))
    diverge, nan_above_weight = options.get("diverge"), options.get("nan_above_weight")
    marker = Path(options.get("marker_dir", ".")) / f"crashed-{os.getpid()}"

    def loss_fn(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        losses = torch.nn.functional.cross_entropy(logits, target, reduction="none")
        if not torch.is_grad_enabled():  # evaluation
            return losses
        calls["n"] += 1
        blown_up = nan_above_weight is not None and bool(
            model.linear.weight.abs().max() > float(nan_above_weight)
        )
        if diverge or blown_up or (fail == "nan" and calls["n"] >= fail_at):
            return losses * float("nan")
        if calls["n"] == fail_at:
            if fail == "raise_at_step":
                raise RuntimeError(f"toy workload fails at step {fail_at}")
            if fail == "segfault":
                ctypes.string_at(0)
            if fail == "hang":
                time.sleep(3600)
            if fail == "hang_once" and not list(Path(options["marker_dir"]).glob("hung-*")):
                (Path(options["marker_dir"]) / f"hung-{os.getpid()}").touch()
                time.sleep(3600)
            if fail == "oom":
                raise MemoryError("toy workload out of memory")
            if fail == "alloc":  # a real failed allocation: 400 TB, refused by the allocator
                torch.empty(10**14)
            if fail == "crash_once":
                done = list(Path(options["marker_dir"]).glob("crashed-*"))
                if not done:
                    marker.touch()
                    raise RuntimeError("toy workload crashes once")
        if model.fit_at_steps:
            losses = losses + model.clock_loss()
        return losses

    model = _Toy(float(options.get("step_sleep_s", 0.0)), options.get("fit_at_steps"))
    return Workload(
        model=model,
        train_data=TensorDataset(inputs[:64], targets[:64]),
        eval_data=TensorDataset(inputs[64:], targets[64:]),
        num_classes=2,
        loss_fn=loss_fn,
    )
