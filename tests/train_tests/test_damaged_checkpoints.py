"""Damaged checkpoints through ``tuner train``'s resume: a truncated ``latest.pt``, random bytes in
its middle, an unsafe pickle. Each is skipped with one line that names it and says why, and the run
continues from the newest checkpoint that verifies (its sha256 was recorded when it was written).

The damage replaces the file (as a bad copy or a partial download does): a ``best-step…pt`` that
was a hard link to the same ``latest.pt`` keeps its intact bytes.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

from tests.orchestrate_tests.conftest import run_tuner, toy_study
from tuner.train import read_status

STEPS, CRASH_AT = 40, 35


def _train(study: Path, runs: Path) -> subprocess.CompletedProcess[str]:
    return run_tuner("train", str(study), "--no-progress", "--output-dir", str(runs))


@pytest.fixture(scope="module")
def crashed_once(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder with a study and a run that crashed once at step 35 (checkpoints at 10, 20, 30):
    resumable, and it crashes no more. Trained once; each test damages its own copy."""
    folder = tmp_path_factory.mktemp("crashed")
    markers = folder / "markers"
    markers.mkdir()
    options = {"fail": "crash_once", "fail_at_step": CRASH_AT, "marker_dir": str(markers)}
    study = toy_study(folder / "study", options=options, max_train_steps=STEPS, keep_best_checkpoints=2)
    first = _train(study, folder / "runs")
    assert first.returncode == 2, first.stdout + first.stderr
    assert (folder / "runs" / "toy" / "train" / "run-001" / "checkpoints" / "latest.pt").exists()
    return folder


@pytest.fixture
def crashed(crashed_once: Path, tmp_path: Path) -> tuple[Path, Path, Path]:
    """This test's copy of ``crashed_once``: the study, its output folder and the run folder."""
    folder = tmp_path / "crashed"
    shutil.copytree(crashed_once, folder)  # a best checkpoint hard-linked to latest.pt: a copy now
    runs = folder / "runs"
    return folder / "study" / "study.yaml", runs, runs / "toy" / "train" / "run-001"


def _replace(path: Path, damage: Callable[[bytes], bytes]) -> None:
    data = damage(path.read_bytes())
    path.unlink()  # a new file: the hard-linked best checkpoint keeps the intact bytes
    path.write_bytes(data)


def _newest_best(run_dir: Path) -> int:
    return max(int(p.name[len("best-step") : -3]) for p in (run_dir / "checkpoints").glob("best-step*.pt"))


def _resumes_from_the_best_and_says_why(
    study: Path, runs: Path, run_dir: Path, *reason: str
) -> subprocess.CompletedProcess[str]:
    best_step = _newest_best(run_dir)
    result = _train(study, runs)
    assert result.returncode == 0, result.stdout + result.stderr
    skipped = [line for line in result.stderr.splitlines() if "skipped" in line]
    assert len(skipped) == 1, result.stderr
    assert "latest.pt" in skipped[0] and f"best-step{best_step:08d}.pt" in skipped[0], skipped[0]
    for word in reason:
        assert word in skipped[0], skipped[0]
    assert f"resumed from step {best_step}" in result.stdout, result.stdout
    assert "weights_only" not in result.stdout + result.stderr
    assert read_status(run_dir)["status"] == "completed"
    assert not (runs / "toy" / "train" / "run-002").exists()
    return result


def test_a_truncated_latest_checkpoint_falls_back_to_the_newest_intact_one(crashed) -> None:
    study, runs, run_dir = crashed
    _replace(run_dir / "checkpoints" / "latest.pt", lambda data: data[: len(data) // 2])
    _resumes_from_the_best_and_says_why(study, runs, run_dir, "damaged")


def test_random_bytes_in_the_middle_are_caught_by_the_checksum(crashed) -> None:
    study, runs, run_dir = crashed
    middle = len((run_dir / "checkpoints" / "latest.pt").read_bytes()) // 2

    def scribble(data: bytes) -> bytes:
        return data[:middle] + os.urandom(5000) + data[middle + 5000 :]

    _replace(run_dir / "checkpoints" / "latest.pt", scribble)
    _resumes_from_the_best_and_says_why(study, runs, run_dir, "damaged", "sha256")


@pytest.mark.parametrize("manifest", ["truncated", "missing"])
def test_a_damaged_checksums_file_does_not_let_a_damaged_checkpoint_load_unverified(
    crashed, manifest
) -> None:
    """checksums.json cut short (or deleted) and random bytes in latest.pt: the digests' copy in
    index.json still catches it, and the run resumes from the newest intact best checkpoint
    (not from garbage weights that would "diverge" and be blamed on the LR)."""
    study, runs, run_dir = crashed
    checksums = run_dir / "checkpoints" / "checksums.json"
    if manifest == "truncated":
        checksums.write_text(checksums.read_text()[:20])
    else:
        checksums.unlink()
    middle = len((run_dir / "checkpoints" / "latest.pt").read_bytes()) // 2
    _replace(
        run_dir / "checkpoints" / "latest.pt",
        lambda data: data[:middle] + os.urandom(5000) + data[middle + 5000 :],
    )
    _resumes_from_the_best_and_says_why(study, runs, run_dir, "damaged", "sha256")


def test_an_unsafe_pickle_is_refused_without_torchs_advice(crashed) -> None:
    """A run folder of an older tuner (no checksums) whose latest.pt would run code on load."""
    study, runs, run_dir = crashed
    (run_dir / "checkpoints" / "checksums.json").unlink()
    index = json.loads((run_dir / "checkpoints" / "index.json").read_text())
    (run_dir / "checkpoints" / "index.json").write_text(
        json.dumps({k: v for k, v in index.items() if k != "digests"})
    )
    latest = run_dir / "checkpoints" / "latest.pt"
    latest.unlink()
    torch.save({"step": 3, "payload": os.system}, latest)  # a global: unpickling would import it
    _resumes_from_the_best_and_says_why(study, runs, run_dir, "refused")


def test_no_intact_checkpoint_is_one_line_and_exit_2(crashed) -> None:
    study, runs, run_dir = crashed
    for checkpoint in (run_dir / "checkpoints").glob("*.pt"):
        _replace(checkpoint, lambda data: data[:100])
    result = _train(study, runs)
    assert result.returncode == 2, result.stdout + result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "--fresh" in errors[0] and "latest.pt" in errors[0], result.stderr
    assert "internal error" not in result.stderr and "Traceback" not in result.stderr
