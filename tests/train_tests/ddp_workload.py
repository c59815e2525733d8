"""A tiny batch-norm + dropout workload for multi-process tests; its options pick a failure.

Options: ``init_dir`` (each rank saves its freshly built model's parameters there, as
``init-rank<R>.pt``: the initial weights must be the same on every rank), ``step_sleep_s``,
``fail_rank`` + ``fail_at_step`` + ``fail`` (``raise``, ``kill`` or ``kill_agent``: that rank
raises, SIGKILLs itself, or SIGKILLs its torchrun agent, at that training step), ``marker_dir``
(fail only once: a retry succeeds), ``show_env`` (print that environment variable), ``items``
(the training data as a plain ``Dataset`` of ``(inputs, target, {"id": i})`` items, read like a
user's dataset: by DataLoader workers when ``data_workers`` asks; the same examples
as the default ``TensorDataset``).
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import torch
from torch.utils.data import Dataset, TensorDataset

from tuner.workloads import Workload, WorkloadContext


class _Net(torch.nn.Module):
    def __init__(self, options: dict) -> None:
        super().__init__()
        self.body = torch.nn.Sequential(
            torch.nn.Linear(6, 16), torch.nn.BatchNorm1d(16), torch.nn.ReLU(), torch.nn.Dropout(0.2)
        )
        self.head = torch.nn.Linear(16, 3)
        self.options = options
        self.steps = 0

    def forward(self, inputs: torch.Tensor) -> torch.Tensor:
        if self.training:
            self.steps += 1
            self._maybe_fail()
            if self.options.get("step_sleep_s"):
                time.sleep(float(self.options["step_sleep_s"]))
        return self.head(self.body(inputs))

    def _maybe_fail(self) -> None:
        options = self.options
        if "fail_rank" not in options or os.environ.get("RANK") != str(options["fail_rank"]):
            return
        if self.steps != int(options.get("fail_at_step", 1)):
            return
        if "marker_dir" in options:
            marker = Path(options["marker_dir"]) / "failed-once"
            if marker.exists():
                return
            marker.touch()
        if options.get("fail") == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
        if options.get("fail") == "kill_agent":  # a node lost: its torchrun agent, and so its ranks
            os.kill(os.getppid(), signal.SIGKILL)
            time.sleep(60)
        raise ValueError(f"ddp workload fails on rank {os.environ['RANK']}")


class _Items(Dataset):
    def __init__(self, data: TensorDataset) -> None:
        self.inputs, self.targets = data.tensors

    def __len__(self) -> int:
        return len(self.targets)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor, dict]:
        return self.inputs[index], self.targets[index], {"id": index}


def build(ctx: WorkloadContext) -> Workload:
    generator = torch.Generator().manual_seed(ctx.seed)
    inputs = torch.randn(150, 6, generator=generator)
    targets = (inputs[:, 0] > 0).long() + (inputs[:, 1] > 0.5).long()
    model = _Net(dict(ctx.options))
    print(f"built the model in process {os.getpid()}", flush=True)
    if "show_env" in ctx.options:  # where the rank runs (e.g. SLURM_STEP_ID: in srun's step)
        name = ctx.options["show_env"]
        print(f"env {name}={os.environ.get(name)}", flush=True)
    for line in range(int(ctx.options.get("chatter", 0))):  # both ranks print at once
        print(f"chatter {line} from rank {os.environ.get('RANK', 0)} " + "x" * 60, flush=True)
    if "init_dir" in ctx.options:
        torch.save(
            model.state_dict(), Path(ctx.options["init_dir"]) / f"init-rank{os.environ.get('RANK', 0)}.pt"
        )
    train = TensorDataset(inputs[:120], targets[:120])
    return Workload(
        model=model,
        train_data=_Items(train) if ctx.options.get("items") else train,
        eval_data=TensorDataset(inputs[120:], targets[120:]),
        num_classes=3,
    )
