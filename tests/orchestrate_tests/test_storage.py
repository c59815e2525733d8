"""Storage: SQLite in WAL mode by default, real PostgreSQL where CI provides it, no password shown."""

from __future__ import annotations

import os
import sqlite3
import subprocess
from pathlib import Path

import pytest

from tests._processes import spawn
from tuner.errors import UsageError
from tuner.orchestrate import default_storage_url, open_storage, redact_url, resolve_storage_url


def test_redact_hides_the_password_only() -> None:
    assert (
        redact_url("postgresql://alice:s3cret@db.example:5432/tuning")
        == "postgresql://alice:***@db.example:5432/tuning"
    )
    assert redact_url("sqlite:////tmp/x/study.db") == "sqlite:////tmp/x/study.db"


def test_default_storage_is_a_wal_sqlite_file_under_the_output_folder(tmp_path: Path) -> None:
    import optuna

    url = default_storage_url(tmp_path / "runs", "digits")
    assert url == f"sqlite:///{tmp_path / 'runs' / 'digits' / 'study.db'}"
    storage = open_storage(url)
    study = optuna.create_study(study_name="digits/train", storage=storage)
    study.optimize(lambda trial: trial.suggest_float("x", 0, 1), n_trials=3)
    with sqlite3.connect(tmp_path / "runs" / "digits" / "study.db") as connection:
        assert connection.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert len(optuna.load_study(study_name="digits/train", storage=url).trials) == 3


def test_env_overrides_the_study_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TUNER_STORAGE", raising=False)
    assert resolve_storage_url("postgresql://h/db", tmp_path, "s") == "postgresql://h/db"
    assert resolve_storage_url(None, tmp_path, "s") == default_storage_url(tmp_path, "s")
    monkeypatch.setenv("TUNER_STORAGE", "sqlite:////elsewhere.db")
    assert resolve_storage_url("postgresql://h/db", tmp_path, "s") == "sqlite:////elsewhere.db"


def test_a_study_folders_pointer_is_used_when_no_storage_is_given(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """After ``run-round --storage URL``, ``report`` and round 2 with no storage find the study:
    below the environment and the study file, above the default, unless its file exists."""
    from tuner.orchestrate.storage_pointer import remember_storage

    monkeypatch.delenv("TUNER_STORAGE", raising=False)
    journal = f"journal:///{tmp_path / 'j.log'}"
    remember_storage(tmp_path, "s", journal)
    assert resolve_storage_url(None, tmp_path, "s") == journal
    assert resolve_storage_url("postgresql://h/db", tmp_path, "s") == "postgresql://h/db"
    assert resolve_storage_url(None, tmp_path, "other") == default_storage_url(tmp_path, "other")
    remember_storage(tmp_path, "p", "postgresql://me:pw@h/db")  # its password is not kept: unusable
    assert resolve_storage_url(None, tmp_path, "p") == default_storage_url(tmp_path, "p")
    (tmp_path / "s" / "study.db").touch()  # the default file, once it exists, is the study's
    assert resolve_storage_url(None, tmp_path, "s") == default_storage_url(tmp_path, "s")
    monkeypatch.setenv("TUNER_STORAGE", "sqlite:////elsewhere.db")
    assert resolve_storage_url(None, tmp_path, "s") == "sqlite:////elsewhere.db"


def test_a_connection_error_never_shows_the_password() -> None:
    with pytest.raises(UsageError) as caught:
        open_storage("postgresql://alice:hunter2@127.0.0.1:1/nowhere")
    message = str(caught.value)
    assert "hunter2" not in message and "alice:***@127.0.0.1:1/nowhere" in message
    assert "\n" not in message


@pytest.mark.postgres
def test_postgres_storage_round_trip(postgres_url: str, unique_name: str) -> None:
    import optuna

    study = optuna.create_study(study_name=f"{unique_name}/round-1", storage=open_storage(postgres_url))
    study.optimize(lambda trial: trial.suggest_float("x", 0, 1) ** 2, n_trials=4)
    again = optuna.load_study(study_name=f"{unique_name}/round-1", storage=open_storage(postgres_url))
    assert [t.number for t in again.trials] == [0, 1, 2, 3]
    optuna.delete_study(study_name=f"{unique_name}/round-1", storage=open_storage(postgres_url))


_OPEN_SCRIPT = """
import sys
from tuner.orchestrate.storage import new_rdb_storage, open_storage
url, how = sys.argv[1], sys.argv[2]
print("ready", flush=True)
sys.stdin.readline()  # go: every process creates the tables at the same instant
if how == "proxy":  # as ``tuner storage-proxy`` builds its storage
    new_rdb_storage(url, engine_kwargs={"pool_size": 2, "max_overflow": 0})
else:
    open_storage(url)
print("ok", flush=True)
"""


def _open_at_once(url: str, hows: tuple[str, ...], retry_log: Path) -> list[str]:
    """One process per ``hows`` entry opens ``url`` (``worker``: ``open_storage``; ``proxy``: as
    the proxy builds its storage), all released by one "go" once all have imported; asserts each
    opened it, returns the storage errors they retried (``$TUNER_STORAGE_RETRY_LOG``)."""
    import sys

    processes = [
        spawn(
            [sys.executable, "-c", _OPEN_SCRIPT, url, how],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, "TUNER_STORAGE_RETRY_LOG": str(retry_log)},
        )
        for how in hows
    ]
    for process in processes:
        assert process.stdout is not None
        assert process.stdout.readline() == "ready\n", process.communicate()[1]
    for process in processes:
        assert process.stdin is not None
        process.stdin.write("go\n")
        process.stdin.flush()
    for process in processes:
        out, err = process.communicate(timeout=120)
        assert process.returncode == 0, err
        assert out == "ok\n"
    return retry_log.read_text().splitlines() if retry_log.exists() else []


def test_processes_opening_a_new_sqlite_storage_at_once_all_succeed(tmp_path: Path) -> None:
    """Regression: without a lock, simultaneous first opens raced to create the tables."""
    url = default_storage_url(tmp_path, "race")
    assert _open_at_once(url, ("worker",) * 4, tmp_path / "retries.log") == []  # the file lock: no race


@pytest.mark.postgres
def test_processes_creating_the_tables_of_an_empty_database_at_once_all_open_it(
    postgres_url: str, unique_name: str, tmp_path: Path
) -> None:
    """An empty PostgreSQL database: 6 processes (workers, and proxies as ``tuner storage-proxy``
    builds its storage) create Optuna's tables at the same instant. Plain ``RDBStorage`` failed
    20 times in 24 so (UniqueViolation on ``pg_type``, DuplicateTable): CI's first run on a new
    machine saw the proxy refuse to start. Each one opens the storage; the losers' retries are
    logged (``$TUNER_STORAGE_RETRY_LOG``), never raised."""
    from sqlalchemy import create_engine, make_url, text

    database = unique_name.replace("-", "_")
    admin = create_engine(postgres_url, isolation_level="AUTOCOMMIT")
    with admin.connect() as connection:
        connection.execute(text(f'CREATE DATABASE "{database}"'))
    url = make_url(postgres_url).set(database=database).render_as_string(hide_password=False)
    try:
        lost = _open_at_once(url, ("worker", "proxy") * 3, tmp_path / "retries.log")
        assert all("already exists" in line or "duplicate key" in line for line in lost), lost
    finally:
        with admin.connect() as connection:
            connection.execute(text(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)'))
        admin.dispose()


@pytest.mark.parametrize("backend", ["sqlite", "journal", "postgresql"])
def test_a_trials_attributes_are_written_together_and_refused_together_once_it_finished(
    tmp_path: Path, backend: str, unique_name: str
) -> None:
    """A trial's result attributes are one write on a database (``adapter.set_user_attrs``): all
    stored; on a trial finished meanwhile (by the stale check, or another worker), refused as the
    public call refuses one (``UpdateFinishedTrialError``, which the worker takes as "no longer
    ours"), and none of them written; a write that fails half-way leaves none of it. On a journal
    (no transactions) one call each, refused alike."""
    import optuna
    from optuna.exceptions import UpdateFinishedTrialError
    from optuna.trial import TrialState

    from tuner.orchestrate import _optuna_adapter as adapter

    if backend == "postgresql" and not os.environ.get("TUNER_TEST_POSTGRES_URL"):
        pytest.skip("TUNER_TEST_POSTGRES_URL is not set")
    url = {
        "sqlite": f"sqlite:///{tmp_path / 'study.db'}",
        "journal": f"journal:///{tmp_path / 'study.log'}",
        "postgresql": os.environ.get("TUNER_TEST_POSTGRES_URL", ""),
    }[backend]
    storage = open_storage(url)
    study = optuna.create_study(study_name=unique_name, storage=storage)
    trial_id = storage.create_new_trial(adapter.study_id(storage, study))
    adapter.set_user_attrs(storage, trial_id, {"train_s": 1.5, "best_step": 40, "final_step": 80})
    assert storage.get_trial(trial_id).user_attrs == {"train_s": 1.5, "best_step": 40, "final_step": 80}
    if backend != "journal":  # one transaction: a write that fails half-way leaves none of it
        with pytest.raises(TypeError):
            adapter.set_user_attrs(storage, trial_id, {"healthy": True, "error": object()})
        assert "healthy" not in storage.get_trial(trial_id).user_attrs
    storage.set_trial_state_values(trial_id, TrialState.FAIL)
    with pytest.raises(UpdateFinishedTrialError):
        adapter.set_user_attrs(storage, trial_id, {"worker_rss_mb": 300.0, "train_s": 9.0})
    assert storage.get_trial(trial_id).user_attrs == {"train_s": 1.5, "best_step": 40, "final_step": 80}
    if backend == "postgresql":
        optuna.delete_study(study_name=unique_name, storage=storage)


def test_a_storage_opened_again_skips_optunas_schema_check_and_one_made_again_has_its_tables(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Optuna checks a database's schema against its own at each open (most of an open's cost);
    a process that checked it once skips it after. A database deleted and made again meanwhile
    still gets its tables (made by this process's Optuna: compatible)."""
    import optuna

    real = optuna.storages.RDBStorage
    asked: list[bool] = []

    def spying(url: str, **kwargs: object) -> object:
        asked.append(bool(kwargs.get("skip_compatibility_check")))
        return real(url, **kwargs)

    monkeypatch.setattr(optuna.storages, "RDBStorage", spying)
    url = f"sqlite:///{tmp_path / 'study.db'}"
    first = open_storage(url)
    first.create_new_study([], "s")
    assert [s.study_name for s in open_storage(url).get_all_studies()] == ["s"]
    assert asked == [False, True]
    for path in tmp_path.glob("study.db*"):
        path.unlink()
    again = open_storage(url)
    assert again.get_all_studies() == [] and again.create_new_study([], "t") > 0
