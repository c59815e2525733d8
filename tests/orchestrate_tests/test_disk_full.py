"""A disk that fills up during round 1 (a real, small tmpfs): the command says "disk full: <path>"
and exits 2, spends no retry on it, leaves no trial RUNNING, and a re-run once space is freed
completes the round without losing a slot."""

from __future__ import annotations

import contextlib
import errno
import os
import signal
import subprocess
from pathlib import Path

import pytest

from tests.orchestrate_tests.conftest import load_phase, run_tuner, sqlite_url, start_tuner, toy_study

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="mounting a tmpfs needs root")

STARTED_WAIT_S = 180.0
EXIT_WAIT_S = 180.0


@pytest.fixture
def small_disk(tmp_path: Path) -> object:
    mount = tmp_path / "small-disk"
    mount.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16m", "tmpfs", str(mount)], check=True)
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def _fill(disk: Path) -> Path:
    """Write until the file system refuses: not one byte is left."""
    filler = disk / "filler"
    handle = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        for size in (1 << 20, 1 << 12, 1):
            try:
                while True:
                    os.write(handle, b"\0" * size)
            except OSError as error:
                assert error.errno == errno.ENOSPC
    finally:
        os.close(handle)
    return filler


@pytest.mark.parametrize("storage_on_the_full_disk", [True, False], ids=["sqlite-full", "sqlite-elsewhere"])
def test_disk_full_during_round_1_is_named_ends_with_exit_2_and_a_rerun_completes(
    tmp_path: Path, small_disk: Path, storage_on_the_full_disk: bool
) -> None:
    """The storage on the full disk: a commit fails first (the reported case). Elsewhere: the
    trial's own checkpoint write fails first."""
    output_dir = small_disk / "runs"
    url = sqlite_url(output_dir) if storage_on_the_full_disk else f"sqlite:///{tmp_path / 'study.db'}"
    # slow steps: trials are mid-run when the disk fills; 2 workers like the reported case
    study = toy_study(tmp_path / "study", options={"step_sleep_s": 0.05})
    args = (
        "run-round", str(study), "--round", "1", "--workers", "2", "--trials", "6",
        "--max-retries", "0", "--output-dir", str(output_dir), "--storage", url,
    )  # fmt: skip
    process = start_tuner(*args, start_new_session=True)
    phase_dir = output_dir / "toy" / "round-1"
    try:
        deadline = STARTED_WAIT_S
        while not list(phase_dir.glob("trial-*/checkpoints/index.json")):  # a trial has checkpointed
            assert process.poll() is None, process.communicate()[0]
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(0.2)
            deadline -= 0.2
            assert deadline > 0, "no trial ever checkpointed"
        filler = _fill(small_disk)
        output, _ = process.communicate(timeout=EXIT_WAIT_S)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    assert process.returncode == 2, output
    assert f"error: disk full: {small_disk}" in output, output
    assert "interrupted at" not in output and "internal error" not in output, output
    filler.unlink()
    trials = load_phase(url, "toy").trials
    assert not [t.number for t in trials if t.state.name == "RUNNING"]
    assert all(int(t.user_attrs.get("retries_used", 0)) == 0 for t in trials)
    # space is back: the same command completes every slot (with --max-retries 0, a retry spent
    # on the full disk would have lost its slot for good)
    again = run_tuner(*args)
    assert again.returncode == 0, again.stdout + again.stderr
    trials = load_phase(url, "toy").trials
    assert {t.user_attrs["slot"] for t in trials if t.state.name == "COMPLETE"} == set(range(6))
