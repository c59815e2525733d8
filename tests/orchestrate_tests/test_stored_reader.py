"""``stored.open_reader`` reads Optuna's tables with plain SQL: what it returns is what Optuna's own
API returns for the same trials, parameter types included (a choice by its index, an int, a float)."""

from __future__ import annotations

from pathlib import Path

import optuna
import pytest

from tuner.orchestrate.stored import open_reader


@pytest.fixture
def sqlite_study(tmp_path: Path) -> str:
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    url = f"sqlite:///{tmp_path / 'study.db'}"
    study = optuna.create_study(
        study_name="toy/round-1", storage=url, sampler=optuna.samplers.RandomSampler(0)
    )

    def objective(trial: optuna.Trial) -> float:
        lr = trial.suggest_float("optimizer.lr", 1e-4, 1.0, log=True)
        trial.suggest_float("workload.dropout", 0.0, 0.5, step=0.1)
        trial.suggest_int("workload.width", 16, 256, log=True)
        trial.suggest_int("training.batch_size", 8, 64, step=8)
        trial.suggest_categorical("optimizer.name", ["sgd", "adamw", None, True, 3, 2.5])
        trial.set_user_attr("slot", trial.number)
        trial.set_user_attr("nested", {"a": [1, 2.5, None]})
        return lr

    study.optimize(objective, n_trials=25)
    return url


def test_the_sql_reader_returns_what_optunas_api_returns(sqlite_study: str) -> None:
    expected = optuna.load_study(study_name="toy/round-1", storage=sqlite_study).get_trials()
    with open_reader(sqlite_study) as reader:
        assert reader.fast  # plain SELECTs, not Optuna's API
        phase = reader.read_phase("toy", "round-1")
    assert phase is not None and len(phase.trials) == len(expected) == 25
    for ours, theirs in zip(phase.trials, expected, strict=True):
        assert ours.number == theirs.number and ours.state == theirs.state.name
        assert ours.value == theirs.value
        assert ours.params == theirs.params
        assert {k: type(v) for k, v in ours.params.items()} == {k: type(v) for k, v in theirs.params.items()}
        assert ours.user_attrs == theirs.user_attrs
    seen = {trial.params["optimizer.name"] for trial in phase.trials}
    assert len(seen) > 3  # the choices, as themselves (None, True, 3 and 2.5 among them)


@pytest.mark.parametrize(
    "url",
    [
        "sqlite:///runs/toy/study.db",
        "sqlite:////abs/runs/toy/study.db",
        "sqlite:///a b/étude.db",
        "sqlite:///runs/study.db?timeout=30",
        "sqlite:///runs/caf%C3%A9.db",
        "sqlite://",
        "sqlite:///:memory:",
    ],
)
def test_an_sqlite_urls_file_is_the_one_sqlalchemys_parser_reads(url: str) -> None:
    """Plain ``sqlite:///PATH`` URLs are read without SQLAlchemy; the file is the one its engine opens."""
    from sqlalchemy.engine import make_url

    from tuner.orchestrate.storage_url import parse_storage_url

    database = make_url(url).database
    expected = None if database in (None, "", ":memory:") else Path(database)
    assert parse_storage_url(url).sqlite_file == expected


def test_a_report_of_an_sqlite_study_imports_neither_sqlalchemy_nor_optuna(sqlite_study: str) -> None:
    """What a report of an SQLite file needs is the standard library's ``sqlite3``: importing
    SQLAlchemy and Optuna (half a second together) is left to commands that write."""
    import json
    import subprocess
    import sys

    script = (
        "import sys, json\n"
        "from tuner.orchestrate.stored import open_reader\n"
        "from tuner.report import build_report, read_study, report_json\n"
        f"with open_reader({sqlite_study!r}) as reader:\n"
        "    json.dumps(report_json(build_report(read_study(reader, 'toy'))))\n"
        "print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in ('sqlalchemy', 'optuna'))))\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == []


@pytest.mark.parametrize(
    ("content", "said"),
    [
        ("tables", "holds no Optuna studies (no tuner study has run there)"),
        ("bytes", "is not a database"),
    ],
    ids=["another-programs-database", "not-a-database"],
)
def test_a_report_of_an_sqlite_file_that_is_not_a_study_is_one_line(
    tmp_path: Path, content: str, said: str
) -> None:
    import sqlite3

    from tests.spec_tests._support import invoke, single_error

    path = tmp_path / "other.db"
    if content == "tables":
        with sqlite3.connect(path) as connection:
            connection.execute("CREATE TABLE notes (text TEXT)")
    else:
        path.write_bytes(bytes(range(256)) * 20)
    line = single_error(invoke("report", "s", "--storage", f"sqlite:///{path}"))
    assert said in line and str(path) in line
