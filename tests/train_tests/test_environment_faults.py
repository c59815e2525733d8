"""A bad environment is the user's to fix, not a bug in tuner: one clear line and exit 2.

Real faults: a read-only file system (a ``ro`` tmpfs: ``chmod`` does not stop root), a full one
(a small tmpfs filled up), and a workload that runs out of memory. Exit 70 stays for tuner's own bugs.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.orchestrate_tests.conftest import run_tuner, toy_study
from tests.report_tests.test_write_next import AT_TOP, commented_study, fill_round1

EXIT_ENVIRONMENT = 2


@contextlib.contextmanager
def tmpfs(folder: Path, options: str) -> Iterator[Path]:
    """A tmpfs at ``folder`` with mount ``options`` (e.g. ``ro,size=1m``), unmounted afterwards."""
    folder.mkdir(parents=True, exist_ok=True)
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(folder)], capture_output=True, check=False
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.decode().strip()}")
    try:
        yield folder
    finally:
        subprocess.run(["umount", "-l", str(folder)], check=False)


def _one_clear_line(result: subprocess.CompletedProcess[str], *words: str) -> None:
    assert result.returncode == EXIT_ENVIRONMENT, result.stdout + result.stderr
    assert "internal error" not in result.stderr and "Traceback" not in result.stderr, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(lines) == 1, result.stderr
    for word in words:
        assert word in lines[0], lines[0]


@pytest.fixture
def read_only(tmp_path: Path) -> Iterator[Path]:
    with tmpfs(tmp_path / "read-only", "ro,size=1m") as folder:
        yield folder


@pytest.mark.parametrize(
    "command",
    [
        ["train", "study.yaml", "--no-progress"],
        ["run-round", "study.yaml", "--round", "1"],
        ["sweep-lr", "study.yaml"],
    ],
)
def test_a_read_only_output_folder_is_one_line_and_exit_2(
    tmp_path: Path, read_only: Path, command: list[str]
) -> None:
    study = toy_study(tmp_path / "study")
    result = run_tuner(*command[:1], str(study), *command[2:], "--output-dir", str(read_only))
    _one_clear_line(result, "cannot write", str(read_only), "read-only")


def test_init_into_a_read_only_folder_is_one_line_and_exit_2(read_only: Path) -> None:
    result = run_tuner("init", "digits-mlp", str(read_only / "study.yaml"))
    _one_clear_line(result, "cannot write", str(read_only), "read-only")


def test_write_next_into_a_read_only_folder_is_one_line_and_exit_2(tmp_path: Path, read_only: Path) -> None:
    built = commented_study(tmp_path / "study")
    fill_round1(built, AT_TOP, best_step=20)  # the report suggests moving the LR range up
    write_next = ["--write-next", str(read_only / "next.yaml")]
    result = run_tuner("report", str(built.path), "--output-dir", str(built.output_dir), *write_next)
    _one_clear_line(result, "cannot write", str(read_only), "read-only")


@pytest.mark.parametrize("room_kb", [0, 24])
def test_train_on_a_full_disk_says_disk_full_and_exits_2(tmp_path: Path, room_kb: int) -> None:
    """No room at all (the run folder cannot be made) and a little (the first checkpoint fails)."""
    study = toy_study(tmp_path / "study")
    with tmpfs(tmp_path / "full", "size=1m") as disk:
        filler = disk / "filler"
        with contextlib.suppress(OSError):
            filler.write_bytes(b"\0" * (1024 * 1024 - room_kb * 1024))
        result = run_tuner("train", str(study), "--no-progress", "--output-dir", str(disk))
        _one_clear_line(result, "disk full", str(disk))


@pytest.mark.parametrize("fail", ["oom", "alloc"])
def test_train_out_of_memory_says_so_and_suggests_a_smaller_batch(tmp_path: Path, fail: str) -> None:
    """``oom``: the workload raises MemoryError; ``alloc``: torch's CPU allocator refuses 400 TB."""
    study = toy_study(tmp_path / "study", options={"fail": fail, "fail_at_step": 3})
    result = run_tuner("train", str(study), "--no-progress", "--output-dir", str(tmp_path / "runs"))
    _one_clear_line(result, "out of memory", "batch_size")
    assert os.path.exists(tmp_path / "runs")


#: ddp_workload whose rank 1 runs out of memory while it builds the workload
OOM_ON_RANK_1 = """

_ddp_build = build


def build(ctx):
    if os.environ.get("RANK") == "1":
        raise MemoryError("rank 1 could not allocate its batch")
    return _ddp_build(ctx)
"""


def test_a_rank_out_of_memory_in_a_two_process_train_says_so(tmp_path: Path) -> None:
    from tests.train_tests.test_distributed import HERE, ddp_study

    study = ddp_study(tmp_path / "study")
    workload = (HERE / "ddp_workload.py").read_text() + OOM_ON_RANK_1
    (tmp_path / "study" / "ddp_workload.py").write_text(workload)
    result = run_tuner("train", str(study), "--no-progress", "--output-dir", str(tmp_path / "runs"))
    _one_clear_line(result, "out of memory", "rank 1", "batch_size")
