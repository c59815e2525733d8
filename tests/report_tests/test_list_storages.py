"""``tuner list`` against storages beyond the output folder's own SQLite files: a shared
PostgreSQL, a URL with a password (never written down), relative paths remembered from
elsewhere, and storages that are missing, broken, empty or unreachable (one line, exit 2)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.report_tests.builders import add_trial, described_study
from tests.spec_tests._support import invoke, plain, single_error

pytestmark = pytest.mark.usefixtures("clean_env")


@pytest.mark.postgres
def test_a_shared_postgresql_storage_lists_each_of_its_studies(
    postgres_url: str, unique_name: str, tmp_path: Path
) -> None:
    names = [f"{unique_name}-a", f"{unique_name}-b"]
    for value, name in zip((0.3, 0.2), names, strict=True):
        built = described_study(
            tmp_path / name, tmp_path / "runs", f"shared {name}", storage=postgres_url, name=name
        )
        add_trial(built.start("round-1"), 0, value, {"optimizer.lr": 0.1}, best_step=20)
    result = invoke("list", "--storage", postgres_url, "--json")
    assert result.exit_code == 0, result.output
    rows = {row["study"]: row for row in json.loads(result.stdout) if row["study"] in names}
    assert sorted(rows) == names
    assert [rows[n]["best"]["value"] for n in names] == [0.3, 0.2]
    assert rows[names[0]]["notes"] == f"shared {names[0]}"
    assert {row["storage"] for row in rows.values()} == {postgres_url}  # no password in this URL
    text = plain(invoke("list", "--storage", postgres_url).stdout)
    assert all(f"━━ {name} " in text for name in names)


@pytest.mark.postgres
def test_a_password_in_the_storage_url_never_reaches_the_pointer(
    postgres_url: str, unique_name: str, tmp_path: Path
) -> None:
    with_password = postgres_url.replace("postgres@", "postgres:s3cret-pw@", 1)  # trust auth: accepted
    assert with_password != postgres_url
    built = described_study(tmp_path / "s", tmp_path / "runs", "pw", storage=with_password, name=unique_name)
    add_trial(built.start("round-1"), 0, 0.1, {"optimizer.lr": 0.1}, best_step=20)
    text = (tmp_path / "runs" / unique_name / "storage.json").read_text()
    assert "s3cret-pw" not in text and json.loads(text)["needs_password"] is True
    result = invoke("list", "--output-dir", str(tmp_path / "runs"))
    assert result.exit_code == 2 and "s3cret-pw" not in result.output
    assert f"study {unique_name}: its storage postgresql+psycopg://postgres:***@" in plain(result.stderr)
    # report by the study's name, no storage given: the pointer cannot be used, and it says why
    from tuner.orchestrate import redact_url

    message = single_error(invoke("report", unique_name, "--output-dir", str(tmp_path / "runs")))
    assert message.endswith(
        f"storage.json names {redact_url(with_password)}, whose password "
        "tuner never writes down: give it with --storage URL, or keep it in ~/.pgpass or $PGPASSWORD "
        "(docs: Scaling out, Secrets)"
    ), message


def _garbage_db(tmp_path: Path) -> list[str]:
    (tmp_path / "runs" / "x").mkdir(parents=True)
    (tmp_path / "runs" / "x" / "study.db").write_bytes(bytes(range(256)) * 40)
    return ["--output-dir", str(tmp_path / "runs")]


def _empty_storage(tmp_path: Path) -> list[str]:
    from tuner.orchestrate import open_storage

    url = f"sqlite:///{tmp_path / 'empty.db'}"
    open_storage(url)  # Optuna's tables, no study
    return ["--storage", url]


@pytest.mark.parametrize(
    ("arguments", "expected"),
    [
        (lambda tmp: ["--storage", "sqlite:////nonexistent.db"], "no study storage at /nonexistent.db"),
        (
            lambda tmp: ["--output-dir", str(tmp / "nowhere")],
            "no study storage under {tmp}/nowhere (no such folder)",
        ),
        (
            lambda tmp: ["--output-dir", str(tmp)],  # a folder without a study.db at any depth
            "no study storage under {tmp} (no study.db nor storage.json in it or its folders)",
        ),
        (_garbage_db, "cannot read storage sqlite:///{tmp}/runs/x/study.db: "),
        (_empty_storage, "storage sqlite:///{tmp}/empty.db holds no tuner study"),
    ],
    ids=["missing-sqlite", "missing-folder", "no-study-db", "garbage-db", "no-study"],
)
def test_bad_storage_is_one_line_and_exit_2(arguments: Any, expected: str, tmp_path: Path) -> None:
    result = invoke("list", *arguments(tmp_path))
    message = single_error(result)
    assert message.startswith(expected.format(tmp=tmp_path)), message
    assert "s3cret-pw" not in result.output


def test_a_server_that_refuses_is_waited_for_then_one_line_without_its_password() -> None:
    """As a database restart is (``$TUNER_STORAGE_OUTAGE_S``, here 1 s): said at once, then one
    error line naming the storage, its password masked."""
    url = "postgresql://tuner:s3cret-pw@127.0.0.1:9/db"
    result = invoke("list", "--storage", url, env={"TUNER_STORAGE_OUTAGE_S": "1"})
    assert result.exit_code == 2, result.output
    warning, error = plain(result.stderr).strip().splitlines()
    assert warning.startswith("warning: storage unreachable since") and "waiting up to 1 s" in warning
    assert error.startswith("error: storage postgresql://tuner:***@127.0.0.1:9/db unreachable since")
    assert "s3cret-pw" not in result.output


def test_a_relative_storage_path_is_remembered_from_anywhere(tmp_path: Path, monkeypatch: Any) -> None:
    """``journal:///j.log`` is relative to where the phase ran; ``tuner list`` runs elsewhere."""
    from tuner.orchestrate.storage_pointer import read_pointer, remember_storage, study_storage_files

    monkeypatch.chdir(tmp_path)
    remember_storage(Path("runs"), "rel", "journal:///shared/j.log")
    remember_storage(Path("runs"), "default", f"sqlite:///{(tmp_path / 'runs/default/study.db')}")
    found = study_storage_files(tmp_path / "runs").pointers
    [pointer] = [read_pointer(path) for path in found]  # none for the default
    assert (pointer.study, pointer.url) == ("rel", f"journal:///{tmp_path}/shared/j.log")
