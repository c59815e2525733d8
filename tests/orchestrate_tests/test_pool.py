"""Local worker processes outlive a failing progress view."""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

import pytest

from tuner.orchestrate.pool import LocalPool, LocalWorker


def test_an_error_in_the_view_does_not_kill_the_workers(tmp_path: Path) -> None:
    marker = tmp_path / "finished"
    code = f"import time, pathlib; time.sleep(1.5); pathlib.Path({str(marker)!r}).touch()"
    pool = LocalPool(
        lambda worker: [sys.executable, "-c", code], [LocalWorker("w0")], env={}, log_dir=tmp_path / "logs"
    )
    pool.start()

    def broken_view() -> None:
        raise OSError("the storage is unreachable")

    codes = pool.wait(tick=broken_view, tick_s=0.1)
    assert codes == {"w0": 0}  # it ran to its end: not killed
    assert marker.exists()
    assert pool.tick_errors and all(isinstance(e, OSError) for e in pool.tick_errors)


def test_a_worker_killed_by_the_stop_it_was_sent_is_interrupted_one_that_dies_alone_is_not(
    tmp_path: Path,
) -> None:
    """Ctrl-C while a worker still imports (before ``tuner worker`` counts signals): the SIGTERM
    the pool forwards kills it by default. That is the stop that was asked for (130, what a
    worker stopped cleanly exits with), not a crash ("died of SIGTERM", exit 70: a CI failure).
    A worker that dies of a SIGTERM nobody here sent stays a death by SIGTERM."""
    starting = "import time; time.sleep(30)"  # no handler yet: as while importing
    pool = LocalPool(
        lambda worker: [sys.executable, "-c", starting], [LocalWorker("w0")], env={}, log_dir=tmp_path / "a"
    )
    pool.start()
    os.kill(os.getpid(), signal.SIGINT)  # the user's Ctrl-C, counted by the pool
    assert pool.wait(tick=lambda: None, tick_s=0.1) == {"w0": 130}
    alone = "import os, signal; os.kill(os.getpid(), signal.SIGTERM)"
    pool = LocalPool(
        lambda worker: [sys.executable, "-c", alone], [LocalWorker("w0")], env={}, log_dir=tmp_path / "b"
    )
    pool.start()
    assert pool.wait(tick=lambda: None, tick_s=0.1) == {"w0": -signal.SIGTERM}


def test_without_workers_or_devices_a_cpu_machine_gets_one_worker_per_core_within_the_caps(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The default the tests' ``tuner_args`` leaves out (it gives them one worker)."""
    import os

    from tuner.orchestrate import local_workers

    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")  # no GPU visible, on any machine

    cores = len(os.sched_getaffinity(0))
    default = local_workers(workers=None, devices=None, max_parallel=None, budget=100)
    assert len(default) == cores and len({w.label for w in default}) == cores
    assert all(w.threads == 1 for w in default) or cores == 1
    assert len(local_workers(workers=None, devices=None, max_parallel=1, budget=100)) == 1
    assert len(local_workers(workers=None, devices=None, max_parallel=None, budget=1)) == 1


def test_a_process_confined_to_one_core_gets_one_worker_of_one_thread(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``taskset``, a Slurm job's or a container's cpuset: the cores it may use, not the machine's."""
    import os

    from tuner.orchestrate import local_workers

    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {min(before)})
    try:
        [alone] = local_workers(workers=None, devices=None, max_parallel=None, budget=100)
        [given] = local_workers(workers=1, devices=None, max_parallel=None, budget=100)
    finally:
        os.sched_setaffinity(0, before)
    assert alone.threads == given.threads == 1 and given.env["OMP_NUM_THREADS"] == "1"
