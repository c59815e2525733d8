"""A storage password never reaches a file, a trial attribute, a log or a printed command.

Each test runs real commands with a canary password in the storage URL and then searches every
byte the run left behind (the whole output folder, SQLite's database included) and, on
PostgreSQL, every study and trial attribute in the storage.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests._processes import spawn
from tests.orchestrate_tests.conftest import load_phase, run_tuner, sqlite_url, toy_study, tuner_env
from tuner.spec import redact_storage_url

CANARY = "CANARY123"
# The test server trusts any password, so the canary is accepted as a real one.
PG_WITH_CANARY = f"postgresql+psycopg://postgres:{CANARY}@127.0.0.1:5432/test"


def _files_with_canary(folder: Path) -> list[str]:
    found = []
    for path in folder.rglob("*"):
        if path.is_file() and CANARY.encode() in path.read_bytes():
            found.append(str(path.relative_to(folder)))
    return found


def _with_password(url: str, password: str) -> str:
    """``TUNER_TEST_POSTGRES_URL`` with ``password`` in it (replacing any password there)."""
    return re.sub(r"://([^/@:]*)(:[^@/]*)?@", rf"://\1:{password}@", url, count=1)


def _attrs_with_canary(study: object) -> list[str]:
    # system attributes are gone from Optuna 5's public API; the SQLite file itself is grepped too
    found = [f"study.{k}" for k, v in study.user_attrs.items() if CANARY in repr(v)]
    for trial in study.trials:
        attrs = {**trial.user_attrs, **getattr(trial, "system_attrs", {}), **trial.params}
        found += [f"trial {trial.number}.{k}" for k, v in attrs.items() if CANARY in repr(v)]
    return found


def test_train_keeps_the_study_file_password_out_of_the_run_folder(tmp_path: Path) -> None:
    study = toy_study(tmp_path / "s", storage=PG_WITH_CANARY)
    output = tmp_path / "runs"
    done = run_tuner(
        "train", str(study), "--set", "max_train_steps=10", "--output-dir", str(output), "--no-progress"
    )
    assert done.returncode == 0, done.stderr
    assert CANARY not in done.stdout + done.stderr
    assert (output / "toy" / "train" / "run-001" / "config.yaml").exists()
    assert _files_with_canary(output) == []
    config = (output / "toy" / "train" / "run-001" / "config.yaml").read_text()
    assert "postgres:***@127.0.0.1" in config  # the rest of the URL is still there to read


def test_a_password_given_with_set_is_masked_in_command_txt(tmp_path: Path) -> None:
    study = toy_study(tmp_path / "s")
    output = tmp_path / "runs"
    done = run_tuner(
        "train", str(study), "--set", f"storage={PG_WITH_CANARY}", "--set", "max_train_steps=10",
        "--output-dir", str(output), "--no-progress",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert _files_with_canary(output) == []


def test_run_round_on_sqlite_with_a_password_in_the_study_file(tmp_path: Path) -> None:
    """``$TUNER_STORAGE`` (SQLite here) beats the study's URL, which still must not leak."""
    study = toy_study(tmp_path / "s", storage=PG_WITH_CANARY, round1={"trials": 2})
    output = tmp_path / "runs"
    env = tuner_env(TUNER_STORAGE=sqlite_url(output))
    done = run_tuner(
        "run-round", str(study), "--round", "1", "--workers", "1", "--output-dir", str(output), env=env
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert CANARY not in done.stdout + done.stderr
    assert (output / "toy" / "study.db").exists()
    assert _files_with_canary(output) == []
    phase = load_phase(sqlite_url(output), "toy")
    assert len(phase.trials) == 2
    assert _attrs_with_canary(phase) == []


@pytest.mark.postgres
def test_run_round_on_postgres_with_a_canary_password(
    tmp_path: Path, postgres_url: str, unique_name: str
) -> None:
    url = _with_password(postgres_url, CANARY)
    study = toy_study(tmp_path / "s", name=unique_name, storage=url, round1={"trials": 2})
    output = tmp_path / "runs"
    done = run_tuner("run-round", str(study), "--round", "1", "--output-dir", str(output))
    assert done.returncode == 0, done.stdout + done.stderr
    assert CANARY not in done.stdout + done.stderr
    assert "postgres:***@" in done.stderr  # the header: it did run on the URL with the password
    assert _files_with_canary(output) == []
    phase = load_phase(url, unique_name)
    assert len(phase.trials) == 2
    assert _attrs_with_canary(phase) == []


def test_a_rotated_password_keeps_the_run_resumable(tmp_path: Path) -> None:
    """The run folder's config hash (and the phase's) ignore the password, not the rest of the URL."""
    from tuner.playbook.config_check import defining_fields, differing_fields
    from tuner.spec import load_study
    from tuner.train.run_folder import config_hash

    study = toy_study(tmp_path, storage=PG_WITH_CANARY)

    def spec(url: str):
        return load_study(study, [f"storage={url}"]).spec

    old, new = spec(PG_WITH_CANARY), spec(PG_WITH_CANARY.replace(CANARY, "rotated"))
    assert config_hash(old) == config_hash(new)
    old_fields, new_fields = (defining_fields(s.model_dump_for_files()) for s in (old, new))
    assert differing_fields(old_fields, new_fields) == []  # a worker with the new password may join
    assert config_hash(old) != config_hash(spec(PG_WITH_CANARY.replace("/test", "/other")))


@pytest.mark.parametrize(
    ("url", "redacted"),
    [
        ("postgresql://me:s3cret@db:5432/x", "postgresql://me:***@db:5432/x"),
        ("postgresql://me:p@ss@db/x", "postgresql://me:***@db/x"),  # an unencoded @
        ("postgresql://me@db/x", "postgresql://me@db/x"),
        (
            "postgresql://db/x?user=me&password=s3cret&sslmode=require",
            "postgresql://db/x?user=me&password=***&sslmode=require",
        ),
        ("sqlite:////tmp/a:b@c/study.db", "sqlite:////tmp/a:b@c/study.db"),
        # characters SQLAlchemy accepts in a password, unencoded (they used to pass unmasked)
        ("postgresql://me:pa/ss@db/x", "postgresql://me:***@db/x"),
        ("postgresql://me:pa?s#s@db/x", "postgresql://me:***@db/x"),
    ],
)
def test_redact_storage_url(url: str, redacted: str) -> None:
    from tuner.orchestrate import redact_url

    assert redact_storage_url(url) == redacted
    assert redact_url(url) == redacted  # headers and errors mask exactly what the run folders do


def _command_lines_mentioning(text: str) -> list[str]:
    """Every running process's command line that mentions ``text`` (what ``ps`` would show)."""
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            words = cmdline.read_bytes().split(b"\0")
        except OSError:
            continue
        line = " ".join(word.decode(errors="replace") for word in words)
        if text in line:
            found.append(line)
    return found


@pytest.mark.postgres
def test_a_storage_set_on_run_round_never_reaches_the_workers_command_lines(
    tmp_path: Path, postgres_url: str, unique_name: str
) -> None:
    import subprocess
    import sys
    import time

    url = _with_password(postgres_url, CANARY)
    study = toy_study(tmp_path / "s", name=unique_name, options={"step_sleep_s": 0.05}, round1={"trials": 2})
    output = tmp_path / "runs"
    command = spawn(  # its own process group, killed with its workers if the test fails
        [sys.executable, "-m", "tuner", "run-round", str(study), "--round", "1", "--workers", "2",
         "--set", f"storage={url}", "--output-dir", str(output), "--no-progress"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=tuner_env(),
    )  # fmt: skip
    workers: list[str] = []
    try:
        while command.poll() is None:
            workers += [line for line in _command_lines_mentioning(str(study)) if " worker " in line]
            time.sleep(0.1)
    finally:
        command.kill()
    assert command.returncode == 0
    assert workers, "no worker was seen running"
    assert not [line for line in workers if CANARY in line]
