"""The input pipeline: ``training.data_workers`` DataLoader workers read the step-indexed stream.

What must hold: the batches are exactly those read on the training thread (indices and tensors,
random draws in ``__getitem__`` included), a stream started at step k (a resume) or asked out of
order is the straight stream, metadata after ``(inputs, targets)`` never reaches collation, and
no worker process outlives the run, however it ends.

The datasets are ``tests/train_tests/item_workload.py`` (digits read item by item). Commands run
with ``OMP_NUM_THREADS=1``: with workers the engine takes their cores off torch's intra-op
threads, and a different thread count may change an evaluation sum's last bits; one thread on
both sides compares the data alone.
"""

from __future__ import annotations

import contextlib
import csv
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
import yaml
from torch.utils.data import Dataset, TensorDataset, default_collate

from tests._processes import PATIENCE_S, spawn
from tests.train_tests.conftest import write_study
from tests.train_tests.item_workload import build
from tuner.errors import WorkloadCodeError
from tuner.train import StepBatches, read_status
from tuner.train.data import epoch_seed
from tuner.workloads import WorkloadContext

HERE = Path(__file__).parent
STEPS = 40


def _items(**options: Any) -> Dataset:
    return build(WorkloadContext(options={"hidden_sizes": [8], **options}, seed=0)).train_data


def _children() -> set[int]:
    """This process's live child processes (``/proc``: no psutil)."""
    found: set[int] = set()
    for task in Path("/proc/self/task").iterdir():
        with contextlib.suppress(FileNotFoundError):  # a thread that ended meanwhile (a queue feeder)
            found |= {int(pid) for pid in (task / "children").read_text().split()}
    return found


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state != "Z"


def _todays_stream(dataset: Dataset, batch_size: int, data_seed: int, steps: int) -> list[tuple[Any, ...]]:
    """``(indices, inputs, targets)`` per step as StepBatches built them before workers existed:
    a seeded permutation per epoch, last partial batch dropped, items collated on this thread."""
    size = len(dataset)  # type: ignore[arg-type]
    per_epoch = size // batch_size
    stream = []
    for step in range(steps):
        epoch, position = divmod(step, per_epoch)
        order = torch.randperm(size, generator=torch.Generator().manual_seed(epoch_seed(data_seed, epoch)))
        indices = order[position * batch_size : (position + 1) * batch_size]
        inputs, targets = default_collate([dataset[i][:2] for i in indices.tolist()])
        stream.append((indices, inputs, targets))
    return stream


@pytest.mark.parametrize("workers", [0, 2])
def test_batches_are_those_of_the_training_thread(workers: int) -> None:
    dataset = _items()
    batches = StepBatches(dataset, 256, data_seed=7, data_workers=workers)
    steps = batches.steps_per_epoch + 3  # across an epoch boundary
    before = _children()
    try:
        for step, (indices, inputs, targets) in enumerate(_todays_stream(dataset, 256, 7, steps)):
            assert torch.equal(batches.indices(step), indices)
            got_inputs, got_targets = batches.get(step)
            assert torch.equal(got_inputs, inputs) and torch.equal(got_targets, targets)
        assert len(_children() - before) == workers
    finally:
        batches.close()
    assert _children() == before


def test_a_stream_started_at_step_k_or_asked_out_of_order_is_the_straight_stream() -> None:
    dataset = _items()
    straight = StepBatches(dataset, 128, data_seed=3)
    expected = [straight.get(step) for step in range(16)]
    resumed = StepBatches(dataset, 128, data_seed=3, data_workers=2, prefetch_batches=3)
    try:
        # a resume at 5, then a caller that goes back, repeats a step and jumps ahead
        for step in [5, 6, 7, 2, 3, 3, 12, 13, 14, 15, 0]:
            inputs, targets = resumed.get(step)
            assert torch.equal(inputs, expected[step][0]) and torch.equal(targets, expected[step][1]), step
    finally:
        resumed.close()


def _global_rng_states() -> tuple[Any, ...]:
    numpy_state = np.random.get_state()
    return torch.get_rng_state(), numpy_state[1].copy(), numpy_state[2], random.getstate()


def _same_states(a: tuple[Any, ...], b: tuple[Any, ...]) -> bool:
    return torch.equal(a[0], b[0]) and np.array_equal(a[1], b[1]) and a[2:] == b[2:]


def test_random_draws_of_items_do_not_depend_on_workers_and_leave_the_training_rng_alone() -> None:
    dataset = _items(noise=True)
    on_thread = StepBatches(dataset, 64, data_seed=5)
    in_workers = StepBatches(dataset, 64, data_seed=5, data_workers=2)
    try:
        for step in [0, 1, 2, 3, 1]:
            states = _global_rng_states()
            inputs, _ = on_thread.get(step)
            assert _same_states(states, _global_rng_states())  # dropout's stream did not move
            assert torch.equal(inputs, in_workers.get(step)[0]), step
        clean = StepBatches(_items(), 64, data_seed=5).get(0)[0]
        assert not torch.equal(on_thread.get(0)[0], clean)  # the noise is really there
    finally:
        in_workers.close()


class _WithMetadata(Dataset):
    """Items ``(x, y, metadata)``; ``metadata(i)`` makes what follows the pair."""

    def __init__(self, kind: str) -> None:
        self.kind = kind

    def __len__(self) -> int:
        return 40

    def __getitem__(self, index: int) -> tuple[Any, ...]:
        extra: Any = f"file-{index}.png" if self.kind == "name" else {"id": index, "tags": [1] * (index % 4)}
        return torch.full((3,), float(index)), index % 2, extra


@pytest.mark.parametrize("kind", ["name", "dict"])
@pytest.mark.parametrize("workers", [0, 2])
def test_metadata_after_inputs_and_targets_is_dropped_before_collation(kind: str, workers: int) -> None:
    dataset = _WithMetadata(kind)
    if kind == "dict":  # what collating the whole items did: ragged metadata cannot be batched
        with pytest.raises(RuntimeError, match="equal size"):
            default_collate([dataset[i] for i in range(8)])
    batches = StepBatches(dataset, 8, data_seed=1, data_workers=workers)
    try:
        for step in range(3):
            inputs, targets = batches.get(step)
            indices = batches.indices(step)
            assert torch.equal(inputs[:, 0], indices.float()) and torch.equal(targets, indices % 2)
    finally:
        batches.close()


class _Ragged(Dataset):
    """Every third item's inputs are shorter: they cannot be stacked."""

    def __len__(self) -> int:
        return 30

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        return torch.zeros(2 if index % 3 == 0 else 5), 1


def test_items_that_do_not_stack_are_named_the_same_way_with_or_without_workers() -> None:
    messages = []
    for workers in (0, 2):
        batches = StepBatches(_Ragged(), 10, data_seed=0, data_workers=workers)
        try:
            with pytest.raises(WorkloadCodeError) as raised:
                batches.get(0)
        finally:
            batches.close()
        messages.append(str(raised.value))
    assert messages[0] == messages[1]
    assert re.fullmatch(
        r"the workload's inputs do not stack into a batch: item \d+ has inputs of shape \(\d,\), "
        r"item \d+ of shape \(\d,\); pad or crop them to one shape in __getitem__ \(or give the "
        r"workload a collate\)",
        messages[0],
    )


def test_a_tensor_dataset_is_indexed_on_the_training_thread_even_with_workers() -> None:
    data = TensorDataset(torch.arange(100.0).reshape(50, 2), torch.arange(50) % 3)
    batches = StepBatches(data, 10, data_seed=2, data_workers=2)
    before = _children()
    inputs, targets = batches.get(4)
    assert not batches.uses_workers and _children() == before
    indices = batches.indices(4)
    assert torch.equal(inputs, data.tensors[0][indices]) and torch.equal(targets, data.tensors[1][indices])


# -- through the command ------------------------------------------------------------------------


def _study(folder: Path, **options: Any) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copy(HERE / "item_workload.py", folder / "item_workload.py")
    study = write_study(folder, max_train_steps=STEPS, eval_every=20, log_every=5, batch_size=16)
    config = yaml.safe_load(study.read_text())
    config["workload"] = {
        "name": "item_workload.py:build",
        "options": {"hidden_sizes": [32], "dropout": 0.1, "noise": True, **options},
    }
    study.write_text(yaml.safe_dump(config, sort_keys=False))
    return study


def _env() -> dict[str, str]:
    return {**os.environ, "TUNER_DEBUG": "", "OMP_NUM_THREADS": "1"}


def _train(study: Path, runs: Path, workers: int) -> subprocess.Popen[str]:
    """``tuner train`` in a process group of its own (with its workers), as a terminal runs it."""
    command = [sys.executable, "-m", "tuner", "train", str(study), "--output-dir", str(runs), "--no-progress"]
    return spawn(
        [*command, "--set", f"data_workers={workers}"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=_env(),
        start_new_session=True,
    )


def _run_dir(runs: Path) -> Path:
    return runs / "engine-test" / "train" / "run-001"


def _metrics(run_dir: Path) -> list[dict[str, str]]:
    with (run_dir / "metrics.csv").open() as handle:
        return [{k: v for k, v in row.items() if k != "elapsed_s"} for row in csv.DictReader(handle)]


def _readers(pid_dir: Path) -> dict[int, int]:
    """pid -> parent pid of every process that read a training item."""
    return {int(path.name): int(path.read_text()) for path in pid_dir.iterdir()}


def _worker_pids(pid_dir: Path, parent: int) -> list[int]:
    return [pid for pid, ppid in _readers(pid_dir).items() if ppid == parent]


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The run folder of the study read on the training thread (data_workers 0)."""
    folder = tmp_path_factory.mktemp("reference")
    runs = folder / "runs"
    process = _train(_study(folder, item_sleep_s=0.0005), runs, workers=0)
    _, err = process.communicate(timeout=2 * PATIENCE_S)
    assert process.returncode == 0, err
    return _run_dir(runs)


def test_train_with_two_workers_writes_the_same_metrics_and_leaves_no_process(
    tmp_path: Path, reference: Path
) -> None:
    pid_dir = tmp_path / "pids"
    pid_dir.mkdir()
    process = _train(_study(tmp_path, item_sleep_s=0.0005, pid_dir=str(pid_dir)), tmp_path / "runs", 2)
    _, err = process.communicate(timeout=2 * PATIENCE_S)
    assert process.returncode == 0, err
    assert _metrics(_run_dir(tmp_path / "runs")) == _metrics(reference)
    workers = _worker_pids(pid_dir, process.pid)
    assert len(workers) == 2  # (the CLI itself reads the training split too: its evaluation)
    assert not any(_alive(pid) for pid in workers)


def test_a_run_stopped_with_ctrl_c_resumes_with_workers_to_the_same_numbers(
    tmp_path: Path, reference: Path
) -> None:
    pid_dir, pause = tmp_path / "pids", tmp_path / "pause"
    pid_dir.mkdir()
    pause.touch()
    study = _study(tmp_path, item_sleep_s=0.0005, pid_dir=str(pid_dir), pause_file=str(pause), pause_at=13)
    runs = tmp_path / "runs"
    process = _train(study, runs, 2)
    waiting, deadline = Path(f"{pause}.waiting"), time.monotonic() + PATIENCE_S
    while not waiting.exists() and time.monotonic() < deadline and process.poll() is None:
        time.sleep(0.02)
    assert waiting.exists(), process.communicate()[1]
    # Ctrl-C: SIGINT to the whole process group, workers included; it lands during step 13, and
    # the run stops cleanly after it (a worker killed by it would make the next batch fail)
    os.killpg(process.pid, signal.SIGINT)
    pause.unlink()
    _, err = process.communicate(timeout=PATIENCE_S)
    assert process.returncode == 130, err
    status = read_status(_run_dir(runs))
    assert status["status"] == "interrupted" and status["step"] == 13
    first_workers = _worker_pids(pid_dir, process.pid)
    assert len(first_workers) == 2 and not any(_alive(pid) for pid in first_workers)

    rerun = _train(study, runs, 2)  # the loader starts at step 13 this time
    out, err = rerun.communicate(timeout=2 * PATIENCE_S)
    assert rerun.returncode == 0 and "resumed from step 13" in out, err
    assert _metrics(_run_dir(runs)) == _metrics(reference)
    assert not any(_alive(pid) for pid in _worker_pids(pid_dir, rerun.pid))


@pytest.mark.parametrize("workers", [0, 2])
def test_a_dataset_that_raises_is_blamed_at_its_line_with_or_without_workers(
    tmp_path: Path, workers: int
) -> None:
    pid_dir = tmp_path / "pids"
    pid_dir.mkdir()
    process = _train(_study(tmp_path, fail=True, pid_dir=str(pid_dir)), tmp_path / "runs", workers)
    _, err = process.communicate(timeout=2 * PATIENCE_S)
    assert process.returncode == 2
    assert "the workload raised ValueError: item" in err and "is unreadable at " in err
    assert "item_workload.py:" in err and "in __getitem__" in err and "Traceback" not in err
    run_dir = _run_dir(tmp_path / "runs")
    status = read_status(run_dir)
    assert status["status"] == "failed" and status["message"].startswith("the workload raised ValueError")
    assert 'raise ValueError(f"item {index} is unreadable")' in (run_dir / "error.log").read_text()
    assert not any(_alive(pid) for pid in _readers(pid_dir))


def test_workers_die_with_a_training_process_killed_by_sigkill(tmp_path: Path) -> None:
    pid_dir = tmp_path / "pids"
    pid_dir.mkdir()
    process = _train(_study(tmp_path, item_sleep_s=0.05, pid_dir=str(pid_dir)), tmp_path / "runs", 2)
    deadline = time.monotonic() + PATIENCE_S
    while len(_worker_pids(pid_dir, process.pid)) < 2 and time.monotonic() < deadline:
        time.sleep(0.02)
    workers = _worker_pids(pid_dir, process.pid)
    assert len(workers) == 2
    process.kill()  # no clean-up code runs in the training process
    process.communicate(timeout=PATIENCE_S)
    deadline = time.monotonic() + 120
    while any(_alive(pid) for pid in workers) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(_alive(pid) for pid in workers)


def test_a_run_round_trial_reads_with_workers_forked_from_its_trial_process(tmp_path: Path) -> None:
    """A trial is a process forked from the worker; its DataLoader workers are forked from it."""
    pid_dir = tmp_path / "pids"
    pid_dir.mkdir()
    study = _study(tmp_path, item_sleep_s=0.0005, pid_dir=str(pid_dir))
    config = yaml.safe_load(study.read_text())
    config["training"]["data_workers"] = 2
    config["search_space"] = {"optimizer.lr": {"type": "float", "low": 1e-3, "high": 1e-2, "log": True}}
    config["rounds"] = {"round1": {"trials": 1, "steps": 20}}
    study.write_text(yaml.safe_dump(config, sort_keys=False))
    env = {k: v for k, v in _env().items() if k not in ("TUNER_STORAGE", "TUNER_OUTPUT_DIR")}
    done = subprocess.run(
        [sys.executable, "-m", "tuner", "run-round", str(study), "--round", "1", "--workers", "1",
         "--output-dir", str(tmp_path / "runs"), "--no-progress"],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    [status_file] = (tmp_path / "runs").rglob("status.json")
    assert read_status(status_file.parent)["status"] == "completed"
    readers = _readers(pid_dir)  # the trial process (its evaluation) and its 2 DataLoader workers
    workers = [pid for pid, parent in readers.items() if parent in readers]
    assert len(workers) == 2 and len(readers) == 3
    [trial] = {readers[pid] for pid in workers}
    assert readers[trial] != os.getpid()  # the trial was forked by the run-round command, not by us
    assert not any(_alive(pid) for pid in readers)
