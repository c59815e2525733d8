"""Local workers: one process per GPU (``CUDA_VISIBLE_DEVICES`` set for each), or N on CPU.

Each local worker is a ``tuner worker`` process, exactly what a user starts by hand on another
machine, so one code path serves both. They run in their own session (a Ctrl-C reaches them
once, forwarded by us, not twice) and die with us (no orphan keeps a GPU busy).
"""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from tuner.errors import UsageError
from tuner.orchestrate._process import SignalFlag

DIE_WITH_PARENT_ENV = "TUNER_DIE_WITH_PARENT"


@dataclass(frozen=True)
class LocalWorker:
    label: str
    env: dict[str, str] = field(default_factory=dict)
    threads: int | None = None


def _visible_gpus() -> list[str]:
    """GPU ids this process may use, without initialising CUDA here (workers do that)."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        return [device for device in visible.split(",") if device.strip() and device.strip() != "-1"]
    import torch

    return [str(index) for index in range(torch.cuda.device_count())]


def local_workers(
    *, workers: int | None, devices: Sequence[str] | None, max_parallel: int | None, budget: int
) -> list[LocalWorker]:
    """The workers to start here.

    ``--devices 0,1`` -> one per listed GPU; ``--workers N`` -> N CPU workers sharing the cores;
    neither -> one per visible GPU, else one per core (capped by ``max_parallel`` and the budget).
    """
    if workers is not None and devices:
        raise UsageError("give --workers (CPU) or --devices (GPUs), not both")
    if workers is not None and workers < 1:
        raise UsageError(f"--workers must be at least 1, got {workers}")
    gpus = list(devices) if devices else ([] if workers is not None else _visible_gpus())
    if gpus:
        return [LocalWorker(f"cuda{gpu}", {"CUDA_VISIBLE_DEVICES": gpu}) for gpu in gpus]
    cores = os.cpu_count() or 1
    count = workers if workers is not None else min(cores, max_parallel or cores, budget)
    threads = max(1, cores // count)
    return [
        LocalWorker(f"cpu{index}", {"CUDA_VISIBLE_DEVICES": "", "OMP_NUM_THREADS": str(threads)}, threads)
        for index in range(count)
    ]


def run_local_workers(
    command_for: Callable[[LocalWorker], list[str]],
    workers: Sequence[LocalWorker],
    *,
    env: dict[str, str],
    log_dir: Path,
    tick: Callable[[], None],
    tick_s: float = 1.0,
) -> dict[str, int]:
    """Start the workers, call ``tick`` every ``tick_s`` until all have exited; their exit codes.

    A first SIGINT/SIGTERM is forwarded once (each worker stops its trial with a checkpoint);
    a second one is forwarded again (workers then kill their trials at once).
    Side effects: ``log_dir/<label>.log`` holds each worker's output.
    """
    log_dir.mkdir(parents=True, exist_ok=True)
    processes: dict[str, subprocess.Popen[bytes]] = {}
    with SignalFlag() as flag:
        for worker in workers:
            with (log_dir / f"{worker.label}.log").open("ab") as log:
                processes[worker.label] = subprocess.Popen(
                    command_for(worker),
                    env={**os.environ, **env, **worker.env, DIE_WITH_PARENT_ENV: "1"},
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                    start_new_session=True,
                )
        forwarded = 0
        try:
            while any(process.poll() is None for process in processes.values()):
                tick()
                while forwarded < min(flag.count, 2):
                    forwarded += 1
                    for process in processes.values():
                        if process.poll() is None:
                            process.send_signal(signal.SIGTERM)
                flag.sleep(tick_s)
        finally:
            for process in processes.values():  # only if we ourselves are dying of an error
                if process.poll() is None:
                    process.kill()
                    process.wait()
        tick()
    return {label: process.returncode for label, process in processes.items()}
