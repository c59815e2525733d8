"""Many workers on one phase: SQLite on one machine, PostgreSQL as several machines would use it."""

from __future__ import annotations

import re
import statistics
from pathlib import Path

import pytest

from tests._processes import finish
from tests.orchestrate_tests.conftest import (
    load_phase,
    run_tuner,
    sqlite_url,
    start_tuner,
    toy_study,
    tuner_env,
)
from tuner.playbook import start_round
from tuner.spec import load_study

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
def test_eight_tuner_worker_processes_on_postgresql(
    tmp_path: Path, output_dir: Path, postgres_url: str, unique_name: str
) -> None:
    study = toy_study(
        tmp_path, name=unique_name, round1={"trials": MANY, "max_failed": 1, **SHORT}, eval_every=5
    )
    env = tuner_env(TUNER_STORAGE=postgres_url)
    start_round(load_study(study), "round-1", output_dir, storage_url=postgres_url)
    workers = [
        start_tuner("worker", str(study), "--phase", "round-1", "--output-dir", str(output_dir),
                    "--label", f"machine{index}", "--threads", "1", env=env)
        for index in range(8)
    ]  # fmt: skip
    outputs = []

    def trials_done() -> int:
        return sum(t.state.is_finished() for t in load_phase(postgres_url, unique_name).trials)

    for worker in workers:  # as long as trials keep finishing: a busy machine is slow, not stuck
        output, _ = finish(worker, trials_done, what="a worker")
        outputs.append(output)
        assert worker.returncode == 0, output
    try:
        trials = load_phase(postgres_url, unique_name).trials
        assert sorted(t.number for t in trials) == list(range(MANY))  # none duplicated, none missing
        assert {t.state.name for t in trials} == {"COMPLETE"}
        ran = {t.user_attrs["worker"] for t in trials}  # a late worker may find nothing left
        assert len(ran) >= 2 and ran <= {f"machine{index}" for index in range(8)}
        assert not STORAGE_TROUBLE.search("".join(outputs))
    finally:
        import optuna

        optuna.delete_study(study_name=f"{unique_name}/round-1", storage=postgres_url)
