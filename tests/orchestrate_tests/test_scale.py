"""Many workers on one phase: SQLite on one machine, PostgreSQL as several machines would use it."""

from __future__ import annotations

import re
import statistics
from pathlib import Path

import pytest

from tests.orchestrate_tests.conftest import (
    delete_phases,
    load_phase,
    run_tuner,
    sqlite_url,
    toy_study,
    tuner_env,
)

STORAGE_TROUBLE = re.compile(r"database is locked|OperationalError|StorageInternalError|Traceback", re.I)
SHORT = {"steps": 10}
# enough that the workers claim side by side, several times each (the suite must stay under 10 minutes)
MANY = 32


def _worker_logs(output_dir: Path, study: str) -> str:
    folder = output_dir / study / "round-1" / ".workers"
    return "".join(path.read_text() for path in folder.glob("*.log"))


def test_four_workers_share_sqlite_without_database_locked(tmp_path: Path, output_dir: Path) -> None:
    study = toy_study(tmp_path, round1={"trials": MANY, "max_failed": 1, **SHORT}, eval_every=5)
    args = ("run-round", str(study), "--round", "1", "--workers", "4", "--output-dir", str(output_dir))
    retry_log = tmp_path / "storage-retries.log"  # every error with_retries absorbed, however quietly
    done = run_tuner(*args, env=tuner_env(TUNER_STORAGE_RETRY_LOG=str(retry_log)))  # no deadline of its own
    assert done.returncode == 0, done.stdout + done.stderr
    retried = retry_log.read_text() if retry_log.exists() else ""
    assert "locked" not in retried, retried
    trials = load_phase(sqlite_url(output_dir), "toy").trials
    assert [t.number for t in trials] == list(range(MANY))
    assert {t.state.name for t in trials} == {"COMPLETE"}
    # trials ran side by side (a worker that warms up after the others claimed every trial
    # rightly runs none: CI saw 3 of 4 on a busy machine)
    assert len({t.user_attrs["worker"] for t in trials}) >= 2
    assert not STORAGE_TROUBLE.search(_worker_logs(output_dir, "toy") + done.stderr)


def test_a_workers_memory_stays_flat_over_twenty_trials(tmp_path: Path, output_dir: Path) -> None:
    study = toy_study(tmp_path, round1={"trials": 20, **SHORT})
    done = run_tuner(
        "run-round", str(study), "--round", "1", "--workers", "1", "--output-dir", str(output_dir)
    )
    assert done.returncode == 0, done.stdout + done.stderr
    rss = [t.user_attrs["worker_rss_mb"] for t in load_phase(sqlite_url(output_dir), "toy").trials]
    assert len(rss) == 20
    # each trial trains in its own process: the worker's memory does not grow with the trials
    assert max(rss[5:]) - statistics.median(rss[2:5]) < 8.0, rss


@pytest.mark.postgres
def test_eight_worker_processes_on_postgresql(
    tmp_path: Path, output_dir: Path, postgres_url: str, unique_name: str
) -> None:
    # eight worker processes claim side by side through PostgreSQL's row locks, as on eight
    # machines; run-round forks them from one warm process (a `tuner worker` started by hand runs
    # the same worker code, after importing torch itself: 3 CPU s each that this test would spend
    # on nothing it checks; tests/playbook_tests/test_rounds.py runs one that way)
    study = toy_study(
        tmp_path, name=unique_name, round1={"trials": MANY, "max_failed": 1, **SHORT}, eval_every=5
    )
    try:
        done = run_tuner(
            "run-round", str(study), "--round", "1", "--workers", "8", "--output-dir", str(output_dir),
            env=tuner_env(TUNER_STORAGE=postgres_url),
        )  # fmt: skip
        assert done.returncode == 0, done.stdout + done.stderr
        assert "8 workers" in done.stderr, done.stderr
        trials = load_phase(postgres_url, unique_name).trials
        assert sorted(t.number for t in trials) == list(range(MANY))  # none duplicated, none missing
        assert {t.state.name for t in trials} == {"COMPLETE"}
        ran = {t.user_attrs["worker"].split("@")[0] for t in trials}  # a late worker may find nothing left
        assert len(ran) >= 2 and ran <= {f"cpu{index}" for index in range(8)}, ran
        assert not STORAGE_TROUBLE.search(_worker_logs(output_dir, unique_name) + done.stderr)
    finally:
        delete_phases(postgres_url, unique_name)
