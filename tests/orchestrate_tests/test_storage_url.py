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


def _one_line_exit_2(ran: object) -> str:
    stderr = ran.stderr.strip()  # type: ignore[attr-defined]
    assert ran.returncode == 2, ran.stdout + stderr  # type: ignore[attr-defined]
    assert len(stderr.splitlines()) == 1 and "internal error" not in stderr, stderr
    return stderr


def test_a_storage_path_under_a_file_is_one_line_exit_2(tmp_path: Path, output_dir: Path) -> None:
    study = toy_study(tmp_path, round1={"trials": 1, "steps": 5})
    (tmp_path / "afile").write_text("not a folder")
    url = f"sqlite:///{tmp_path / 'afile' / 'study.db'}"
    ran = run_tuner("run-round", str(study), "--round", "1", "--workers", "1", "--output-dir",
                    str(output_dir), "--no-progress", "--storage", url)  # fmt: skip
    assert "afile" in _one_line_exit_2(ran) and "not a folder" in ran.stderr


def test_an_in_memory_sqlite_storage_is_refused(tmp_path: Path, output_dir: Path) -> None:
    study = toy_study(tmp_path, round1={"trials": 1, "steps": 5})
    for url in ("sqlite://", "sqlite:///:memory:"):
        ran = run_tuner("run-round", str(study), "--round", "1", "--workers", "1", "--output-dir",
                        str(output_dir), "--no-progress", "--storage", url)  # fmt: skip
        assert "sqlite:///PATH" in _one_line_exit_2(ran) and "memory" in ran.stderr


def test_a_study_name_over_64_characters_is_refused_naming_the_limit(tmp_path: Path) -> None:
    study = toy_study(tmp_path, name="a" * 65)
    assert "at most 64 characters" in _one_line_exit_2(run_tuner("validate", str(study)))
    fits = toy_study(tmp_path / "fits", name="b" * 64)
    assert run_tuner("validate", str(fits), "--no-build").returncode == 0
