"""Each trial records the code it ran: the study folder's git commit and whether it was dirty."""

from __future__ import annotations

import subprocess
from pathlib import Path

from tests.orchestrate_tests.conftest import load_phase, run_tuner, sqlite_url, toy_study


def _git(folder: Path, *args: str) -> str:
    done = subprocess.run(
        ["git", "-C", str(folder), "-c", "user.name=t", "-c", "user.email=t@example.com", *args],
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout.strip()


def test_trials_record_the_commit_and_a_dirty_tree(tmp_path: Path) -> None:
    code = tmp_path / "code"
    study = toy_study(code, round1={"trials": 1})
    _git(code, "init", "-q")
    _git(code, "add", "study.yaml", "toy_workload.py")
    _git(code, "commit", "-q", "-m", "the study")
    commit = _git(code, "rev-parse", "HEAD")
    output = tmp_path / "out"  # outside the checkout: the run folders do not make it dirty
    args = ["run-round", str(study), "--round", "1", "--workers", "1", "--output-dir", str(output)]
    assert run_tuner(*args).returncode == 0

    workload = code / "toy_workload.py"
    workload.write_text(workload.read_text() + "\n# an uncommitted change\n")
    study.write_text(study.read_text().replace("trials: 1", "trials: 2"))
    done = run_tuner(*args)
    assert done.returncode == 0, done.stderr

    trials = load_phase(sqlite_url(output), "toy").trials
    assert [(t.user_attrs["git_commit"], t.user_attrs["git_dirty"]) for t in trials] == [
        (commit, False),
        (commit, True),
    ]
    assert len(commit) == 40
