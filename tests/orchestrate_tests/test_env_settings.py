"""Settings of the machine read from the environment (``env_settings``): a value that is not
what the setting takes is one line and exit 2, never a silent default nor a traceback."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.orchestrate_tests.conftest import run_tuner, toy_study, tuner_env
from tuner.errors import UsageError


@pytest.mark.parametrize("raw", ["abc", "-1", "nan"])
def test_a_lock_wait_that_is_not_seconds_is_one_line(raw: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from tuner.orchestrate.locks import LOCK_WAIT_ENV, lock_wait_s

    monkeypatch.setenv(LOCK_WAIT_ENV, raw)
    with pytest.raises(UsageError) as caught:
        lock_wait_s()
    assert str(caught.value) == (f"${LOCK_WAIT_ENV}={raw!r}: expected a number of seconds >= 0 (default 30)")
    monkeypatch.setenv(LOCK_WAIT_ENV, " 2.5 ")
    assert lock_wait_s() == 2.5


def test_heartbeat_settings_are_whole_seconds_at_least_two_beats_of_grace(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from tuner.orchestrate.heartbeat import GRACE_ENV, HEARTBEAT_ENV, heartbeat_settings

    monkeypatch.delenv(GRACE_ENV, raising=False)
    monkeypatch.setenv(HEARTBEAT_ENV, "2")
    assert heartbeat_settings() == (2, 24)  # twelve beats of grace by default
    monkeypatch.setenv(HEARTBEAT_ENV, "0.4")
    monkeypatch.setenv(GRACE_ENV, "1")
    assert heartbeat_settings() == (1, 2)  # rounded up; never less than two beats


@pytest.mark.parametrize("name", ["TUNER_HEARTBEAT_S", "TUNER_HEARTBEAT_GRACE_S"])
def test_a_heartbeat_setting_that_is_not_seconds_ends_a_worker_with_one_line(
    tmp_path: Path, name: str
) -> None:
    """A typo in a deployment's heartbeat setting was a ValueError out of ``tuner worker``:
    exit 70, "internal error". Read before any connection is made, so no server is needed."""
    study = toy_study(tmp_path)
    done = run_tuner(
        "worker", str(study), "--phase", "round-1", "--storage", "postgresql://nobody@127.0.0.1:9/none",
        env=tuner_env(**{name: "5s"}),
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    default = 5 if name == "TUNER_HEARTBEAT_S" else 12  # twelve of the tests' 1 s beats
    assert done.stderr.strip().splitlines() == [
        f"error: ${name}='5s': expected a number of seconds >= 0 (default {default})"
    ]


WORKER_SETTINGS = [
    "TUNER_HEARTBEAT_S",
    "TUNER_HEARTBEAT_GRACE_S",
    "TUNER_STORAGE_OUTAGE_S",
    "TUNER_PHASE_LOCK_WAIT_S",
]


@pytest.mark.parametrize("name", WORKER_SETTINGS)
def test_run_round_refuses_a_bad_worker_setting_before_it_creates_or_starts_anything(
    tmp_path: Path, output_dir: Path, name: str
) -> None:
    """run-round created the phase and started its workers, which exited 2 on a bad heartbeat
    setting; a setting they read only on PostgreSQL or in an outage (the lock wait, the outage
    window) went unnoticed on SQLite until the day it mattered."""
    study = toy_study(tmp_path)
    args = ("run-round", str(study), "--round", "1", "--output-dir", str(output_dir))
    done = run_tuner(*args, env=tuner_env(**{name: "5s"}))
    assert done.returncode == 2, done.stdout + done.stderr
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith(f"error: ${name}='5s': expected a number of seconds >= 0"), line
    assert not (output_dir / "toy").exists()  # no phase, no worker log: nothing to clean up


@pytest.mark.parametrize("name", ["TUNER_STORAGE_OUTAGE_S", "TUNER_PHASE_LOCK_WAIT_S"])
def test_a_worker_on_sqlite_refuses_a_bad_setting_it_would_read_only_later(tmp_path: Path, name: str) -> None:
    """On SQLite the lock wait is never read and the outage window only in an outage: a typo
    there stayed silent until the day it mattered."""
    study = toy_study(tmp_path)
    done = run_tuner(
        "worker", str(study), "--phase", "round-1", "--storage", f"sqlite:///{tmp_path}/none.db",
        env=tuner_env(**{name: "5s"}),
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith(f"error: ${name}='5s': expected a number of seconds >= 0"), line
    assert not (tmp_path / "none.db").exists()
