"""The progress view never takes the work down: ``run-round`` losing its storage connection.

A real fault on the real PostgreSQL: the command's own connections are terminated
(``pg_terminate_backend``, found by the command's TCP ports, so the workers and other tests are
untouched) while its role may not log in again. The workers keep their connections and go on.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.orchestrate_tests.conftest import load_phase, start_tuner, toy_study, tuner_env

WAIT_S = 180  # generous: a loaded machine


def _local_tcp_ports(pid: int) -> set[int]:
    """The local ports of process ``pid``'s TCP sockets (its database connections)."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = fd.readlink()
        except OSError:
            continue
        if str(target).startswith("socket:["):
            inodes.add(str(target)[len("socket:[") : -1])
    ports = set()
    for table in ("tcp", "tcp6"):
        try:
            rows = Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            fields = row.split()
            if fields[9] in inodes:
                ports.add(int(fields[1].rsplit(":", 1)[1], 16))
    return ports


class _Output:
    """A command's output as it comes (``WarmTuner.output``: its log, read again at each look)."""

    def __init__(self, process: Any) -> None:
        self.process = process

    def text(self) -> str:
        return str(self.process.output())

    def all_of_it(self) -> str:
        """Everything, once the process has exited (its log is complete then)."""
        return self.text()


def _wait_for(condition: Callable[[], bool], what: str, process: Any, output: _Output) -> None:
    deadline = time.monotonic() + WAIT_S
    while not condition():
        if process.poll() is not None:
            output.all_of_it()  # let the reader catch up before reporting
            if condition():
                return
            raise AssertionError(f"run-round ended before {what}:\n{output.text()}")
        assert time.monotonic() < deadline, f"timed out waiting for {what}:\n{output.text()}"
        time.sleep(0.1)


@pytest.fixture
def admin(postgres_url: str) -> Iterator[Any]:
    from sqlalchemy import create_engine

    engine = create_engine(postgres_url, isolation_level="AUTOCOMMIT")
    yield engine
    engine.dispose()


@pytest.fixture
def login_role(admin: Any) -> Iterator[str]:
    """A role of this test alone, so that refusing its logins touches no other test."""
    from sqlalchemy import text

    role = f"tuner_view_{uuid.uuid4().hex[:10]}"
    with admin.connect() as connection:
        connection.execute(text(f"CREATE ROLE {role} LOGIN SUPERUSER"))
    yield role
    with admin.connect() as connection:
        connection.execute(
            text(f"SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = '{role}'")
        )
        connection.execute(text(f"REASSIGN OWNED BY {role} TO CURRENT_USER"))
        connection.execute(text(f"DROP OWNED BY {role}"))
        connection.execute(text(f"DROP ROLE {role}"))


def _cut_off(admin: Any, role: str, pid: int) -> int:
    """Refuse new logins of ``role`` and terminate process ``pid``'s connections; how many."""
    from sqlalchemy import text

    ports = sorted(_local_tcp_ports(pid))
    with admin.connect() as connection:
        connection.execute(text(f"ALTER ROLE {role} NOLOGIN"))
        rows = connection.execute(
            text(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE usename = :role AND client_port = ANY(:ports)"
            ),
            {"role": role, "ports": ports},
        ).fetchall()
    return len(rows)


def _reconnect(admin: Any, role: str) -> None:
    from sqlalchemy import text

    with admin.connect() as connection:
        connection.execute(text(f"ALTER ROLE {role} LOGIN"))


@pytest.mark.postgres
def test_losing_the_storage_leaves_the_workers_running_and_the_view_stale(
    tmp_path: Path, postgres_url: str, unique_name: str, admin: Any, login_role: str
) -> None:
    from sqlalchemy.engine import make_url

    url = make_url(postgres_url).set(username=login_role, password=None)
    url = url.update_query_dict({"application_name": unique_name}).render_as_string(hide_password=False)
    study = toy_study(tmp_path, name=unique_name, options={"step_sleep_s": 0.1}, round1={"trials": 6})
    output_dir = tmp_path / "runs"
    # the final outcome read waits an outage out for $TUNER_STORAGE_OUTAGE_S (120 s by default)
    # before it says it cannot read it: 15 s keeps the test short and still outlasts the view's
    # first, short outage
    command = start_tuner(
        "run-round", str(study), "--round", "1", "--workers", "2",
        "--output-dir", str(output_dir), "--storage", url,
        env=tuner_env(TUNER_STORAGE_OUTAGE_S="15"),
    )  # fmt: skip
    output = _Output(command)
    try:
        _wait_for(lambda: "complete" in output.text(), "a first trial to complete", command, output)
        # a short outage: the view goes stale, then comes back; the workers never notice
        assert _cut_off(admin, login_role, command.pid) >= 1
        _wait_for(lambda: "storage unreachable since" in output.text(), "the stale view", command, output)
        _reconnect(admin, login_role)
        _wait_for(lambda: "storage reachable again" in output.text(), "the view to recover", command, output)
        # an outage that lasts until the command ends: the workers finish the phase regardless,
        # the command says it cannot read the outcome and exits 1 (it kills nothing)
        assert output.text().count("  complete  ") < 6, "the phase ended too soon for the second outage"
        _cut_off(admin, login_role, command.pid)
        command.wait(timeout=WAIT_S)
    finally:
        if command.poll() is None:
            command.kill()
            command.wait()
        _reconnect(admin, login_role)
    text = output.all_of_it()
    assert command.returncode == 1, text
    assert "Traceback" not in text
    assert "showing the last view; the workers go on" in text
    assert "error: cannot read the outcome of round-1 from the storage" in text
    assert "Run the same command again once the storage is reachable" in text
    assert "worker cpu" not in text  # no worker crashed
    trials = load_phase(postgres_url, unique_name).trials
    assert len(trials) == 6 and {t.state.name for t in trials} == {"COMPLETE"}, [t.state for t in trials]
    for log in (output_dir / unique_name / "round-1" / ".workers").glob("*.log"):
        assert "error" not in log.read_text(), log.read_text()
