"""A storage URL is parsed once (``tuner.orchestrate.storage_url``): a query string, a missing
path, a parent that is a file, a study name too long for the database: each is what it says."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from tests.orchestrate_tests.conftest import run_tuner, toy_study, tuner_env


def test_an_sqlite_url_with_a_query_string_is_one_wal_database(tmp_path: Path, output_dir: Path) -> None:
    study = toy_study(tmp_path, round1={"trials": 2, "steps": 10})
    database = tmp_path / "store" / "study.db"
    url = f"sqlite:///{database}?timeout=30"
    ran = run_tuner("run-round", str(study), "--round", "1", "--workers", "1", "--output-dir",
                    str(output_dir), "--no-progress", env=tuner_env(TUNER_STORAGE=url))  # fmt: skip
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert sorted(p.name for p in database.parent.iterdir() if "?" in p.name) == []  # no stray file
    with sqlite3.connect(database) as connection:
        assert connection.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    for command in (["report", "toy"], ["list"]):
        read = run_tuner(*command, "--storage", url, "--output-dir", str(output_dir))
        assert read.returncode == 0, read.stdout + read.stderr
        assert "?" not in read.stdout.split("storage", 1)[1].splitlines()[0], read.stdout
