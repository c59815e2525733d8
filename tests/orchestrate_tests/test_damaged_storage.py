"""A damaged ``study.db`` (garbage written into its middle) is said to be damaged, with the way
to recover it, by every command that opens it: never read as if fine, never a bug's exit 70."""

from __future__ import annotations

import random
import sqlite3
from pathlib import Path

from tests.orchestrate_tests.conftest import run_tuner, toy_study


def _damage(database: Path) -> None:
    """Random bytes over two pages in the middle of the file, as a failing disk or a bad copy
    leaves them. They are those of a table the report does not read (it used to exit 0 there)."""
    with sqlite3.connect(database) as connection:
        connection.execute("PRAGMA wal_checkpoint(TRUNCATE)")  # everything in the file itself
        page_size = connection.execute("PRAGMA page_size").fetchone()[0]
        (page,) = connection.execute(
            "SELECT rootpage FROM sqlite_master WHERE name = 'trial_system_attributes'"
        ).fetchone()
    assert 0.2 < page * page_size / database.stat().st_size < 0.8  # in the middle
    with database.open("r+b") as handle:
        handle.seek((page - 1) * page_size)
        handle.write(random.Random(0).randbytes(2 * page_size))
    with sqlite3.connect(database) as connection:
        try:
            verdict = connection.execute("PRAGMA integrity_check").fetchone()[0]
        except sqlite3.DatabaseError as error:  # so damaged that the check cannot walk it
            verdict = str(error)
    assert verdict != "ok"


def test_every_command_says_a_damaged_study_db_is_damaged_and_how_to_recover(
    tmp_path: Path, output_dir: Path
) -> None:
    study = toy_study(tmp_path, round1={"trials": 6, "steps": 20})
    ran = run_tuner("run-round", str(study), "--round", "1", "--workers", "1", "--output-dir",
                    str(output_dir), "--no-progress")  # fmt: skip
    assert ran.returncode == 0, ran.stdout + ran.stderr
    database = output_dir / "toy" / "study.db"
    _damage(database)
    for command in (
        ["report", str(study)],
        ["list"],
        ["run-round", str(study), "--round", "1", "--trials", "8", "--workers", "1", "--no-progress"],
        ["run-round", str(study), "--round", "2", "--workers", "1", "--no-progress"],
    ):
        again = run_tuner(*command, "--output-dir", str(output_dir))
        stderr = again.stderr.strip()
        assert again.returncode == 2, f"{command}: {again.returncode}\n{again.stdout}\n{stderr}"
        assert len(stderr.splitlines()) == 1, stderr
        assert "is damaged" in stderr and ".recover" in stderr and "study.db" in stderr, stderr
