"""digits-mlp whose datasets are NOT TensorDatasets (input-pipeline tests; copied next to a study).

Items are read one at a time, as ``(inputs, targets, {"id", "name", "tags"})``: the metadata dict
has strings and ragged lists that ``default_collate`` cannot batch. Options (besides digits-mlp's
``hidden_sizes`` and ``dropout``), all about the training split:

- ``item_sleep_s``: each read sleeps this long (a slow disk);
- ``noise``: each read adds noise drawn from torch's, numpy's and Python's global RNGs;
- ``fail``: each read raises ``ValueError`` (a broken dataset);
- ``pid_dir``: each process that reads writes a file named by its pid there, holding its
  parent's pid (which processes read the data, and are they gone?);
- ``pause_file`` / ``pause_at``: training forward number ``pause_at`` waits while ``pause_file``
  exists (after creating ``pause_file.waiting``): a signal then lands at a known step.
"""

from __future__ import annotations

import os
import random
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.utils.data import Dataset

from tuner.workloads import Workload, WorkloadContext
from tuner.workloads.digits import build_mlp


class Items(Dataset):
    def __init__(self, tensors: tuple[torch.Tensor, ...], options: dict[str, Any], train: bool) -> None:
        self.inputs, self.targets = tensors
        options = options if train else {}
        self.sleep_s = float(options.get("item_sleep_s", 0.0))
        self.noise = bool(options.get("noise", False))
        self.fail = bool(options.get("fail", False))
        self.pid_dir = options.get("pid_dir")
        self._recorded: int | None = None

    def __len__(self) -> int:
        return len(self.inputs)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor, dict[str, Any]]:
        if self.pid_dir and self._recorded != os.getpid():
            self._recorded = os.getpid()
            # whole or not there: a reader polling the folder must never see an empty file (CI:
            # ``int('')`` in test_workers_die_with_a_training_process_killed_by_sigkill)
            partial = Path(self.pid_dir).parent / f".pid-{os.getpid()}.partial"
            partial.write_text(str(os.getppid()))
            os.replace(partial, Path(self.pid_dir, str(os.getpid())))
        if self.sleep_s:
            time.sleep(self.sleep_s)
        if self.fail:
            raise ValueError(f"item {index} is unreadable")
        inputs = self.inputs[index]
        if self.noise:
            shift = float(np.random.rand()) + random.random()
            inputs = inputs + 0.05 * torch.randn(inputs.shape) + 0.01 * shift
        return inputs, self.targets[index], {"id": index, "name": f"row-{index}", "tags": [0] * (index % 3)}


class Pausable(torch.nn.Module):
    def __init__(self, inner: torch.nn.Module, pause_file: str | None, pause_at: int) -> None:
        super().__init__()
        self.inner, self.pause_file, self.pause_at, self.calls = inner, pause_file, pause_at, 0

    def forward(self, inputs: torch.Tensor) -> torch.Tensor:
        if self.training:
            self.calls += 1
            if self.pause_file and self.calls == self.pause_at and os.path.exists(self.pause_file):
                Path(self.pause_file + ".waiting").touch()
                while os.path.exists(self.pause_file):
                    time.sleep(0.01)
        return self.inner(inputs)


def build(ctx: WorkloadContext) -> Workload:
    mlp_options = {k: v for k, v in ctx.options.items() if k in ("hidden_sizes", "dropout")}
    ours = {k: v for k, v in ctx.options.items() if k not in mlp_options}
    workload = build_mlp(WorkloadContext(options=mlp_options, seed=ctx.seed, base_dir=ctx.base_dir))
    workload.train_data = Items(workload.train_data.tensors, ours, train=True)  # type: ignore[attr-defined]
    workload.eval_data = Items(workload.eval_data.tensors, ours, train=False)  # type: ignore[attr-defined]
    workload.model = Pausable(workload.model, ours.get("pause_file"), int(ours.get("pause_at", 0)))
    return workload
