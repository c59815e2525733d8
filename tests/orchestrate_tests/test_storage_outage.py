"""A PostgreSQL outage longer than the old 7.75 s of retries (a server restart, a failover): the
workers wait it out, say so in one line, and the round completes. The server is real; a TCP proxy
in front of it is stopped and started again (every connection cut, new ones refused)."""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy.engine import make_url

from tests._processes import wait_for as _wait_for
from tests.orchestrate_tests.conftest import delete_phases, load_phase, start_tuner, toy_study, tuner_env
from tests.orchestrate_tests.tcp_proxy import TcpProxy

OUTAGE_S = 15  # twice the old window, a fraction of the default one
WINDOW_S = "45"  # TUNER_STORAGE_OUTAGE_S for these tests: longer than the outage, shorter than the default


@pytest.fixture
def proxy(postgres_url: str) -> Iterator[TcpProxy]:
    server = make_url(postgres_url)
    running = TcpProxy((server.host or "127.0.0.1", server.port or 5432))
    running.start()
    yield running
    running.stop()


def _through(postgres_url: str, proxy: TcpProxy) -> str:
    return make_url(postgres_url).set(host="127.0.0.1", port=proxy.port).render_as_string(hide_password=False)


@pytest.mark.postgres
def test_a_round_rides_out_a_database_outage_and_says_it_waits(
    tmp_path: Path, output_dir: Path, postgres_url: str, unique_name: str, proxy: TcpProxy
) -> None:
    study = toy_study(tmp_path, name=unique_name, options={"step_sleep_s": 0.05},
                      round1={"trials": 6, "steps": 60, "max_failed": 1})  # fmt: skip
    env = tuner_env(TUNER_STORAGE=_through(postgres_url, proxy), TUNER_STORAGE_OUTAGE_S=WINDOW_S)
    command = start_tuner("run-round", str(study), "--round", "1", "--workers", "2", "--output-dir",
                          str(output_dir), "--no-progress", env=env, start_new_session=True)  # fmt: skip
    try:

        def one_complete() -> bool:
            with contextlib.suppress(KeyError, Exception):
                return any(t.state.name == "COMPLETE" for t in load_phase(postgres_url, unique_name).trials)
            return False

        _wait_for(one_complete, 240, "a first trial to complete")
        proxy.stop()
        time.sleep(OUTAGE_S)  # the outage itself: a fixed length is the point
        proxy.start()
        output, _ = command.communicate(timeout=300)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(command.pid, signal.SIGKILL)
    try:
        workers = output_dir / unique_name / "round-1" / ".workers"
        logs = "".join(path.read_text() for path in sorted(workers.glob("*.log")))
        print(output, logs)  # shown on failure, and with -s
        assert command.returncode == 0, output + logs
        assert "Traceback" not in output + logs and "StorageInternalError" not in output + logs, output + logs
        assert "storage unreachable since" in logs, logs  # each worker said it waited, in one line
        trials = load_phase(postgres_url, unique_name).trials
        assert not [t for t in trials if t.state.name in ("RUNNING", "WAITING")]
        counted = [t for t in trials if "duplicate_of" not in t.user_attrs]
        assert sorted(t.user_attrs["slot"] for t in counted if t.state.name == "COMPLETE") == list(range(6))
    finally:
        delete_phases(postgres_url, unique_name)


@pytest.mark.postgres
def test_a_worker_started_during_an_outage_waits_for_the_database(
    tmp_path: Path, output_dir: Path, postgres_url: str, unique_name: str, proxy: TcpProxy
) -> None:
    """It used to die at once ("Connection refused"): a worker may start while the server restarts."""
    import subprocess
    import sys

    from tuner.playbook import start_round
    from tuner.spec import load_study

    study = toy_study(tmp_path, name=unique_name, round1={"trials": 2, "steps": 10})
    start_round(load_study(study), "round-1", output_dir, storage_url=postgres_url)
    proxy.stop()
    env = tuner_env(TUNER_STORAGE=_through(postgres_url, proxy), TUNER_STORAGE_OUTAGE_S=WINDOW_S)
    log = tmp_path / "worker.log"
    with log.open("w") as sink:
        worker = subprocess.Popen(
            [sys.executable, "-m", "tuner", "worker", str(study), "--phase", "round-1", "--output-dir",
             str(output_dir), "--label", "w0", "--threads", "1"],
            stdout=sink, stderr=subprocess.STDOUT, env=env, start_new_session=True,
        )  # fmt: skip
    try:

        def waits_or_ended() -> bool:
            return "storage unreachable since" in log.read_text() or worker.poll() is not None

        _wait_for(waits_or_ended, 240, "the worker to say it waits")
        time.sleep(OUTAGE_S / 2)  # well past the moment it used to die
        assert worker.poll() is None, log.read_text()
        proxy.start()
        worker.wait(timeout=300)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(worker.pid, signal.SIGKILL)
    try:
        output = log.read_text()
        assert worker.returncode == 0, output
        assert "storage reachable again" in output and "Traceback" not in output, output
        said = [line for line in output.splitlines() if "unreachable" in line]
        assert said[0].startswith("warning: storage unreachable since"), output
        trials = load_phase(postgres_url, unique_name).trials
        assert sorted(t.state.name for t in trials) == ["COMPLETE", "COMPLETE"]
    finally:
        delete_phases(postgres_url, unique_name)


@pytest.mark.postgres
@pytest.mark.parametrize("command", ["run-round", "report"])
def test_run_round_and_report_started_during_an_outage_wait_for_the_database(
    tmp_path: Path,
    output_dir: Path,
    postgres_url: str,
    unique_name: str,
    proxy: TcpProxy,
    command: str,
) -> None:
    """They said "cannot open storage ... Connection refused" within a second; now they wait it
    out as the workers do, say so once, and go on when the server is back."""
    import subprocess
    import sys

    from tuner.playbook import start_round
    from tuner.spec import load_study

    study = toy_study(tmp_path, name=unique_name, round1={"trials": 2, "steps": 10})
    start_round(load_study(study), "round-1", output_dir, storage_url=postgres_url)
    proxy.stop()
    env = tuner_env(TUNER_STORAGE=_through(postgres_url, proxy), TUNER_STORAGE_OUTAGE_S=WINDOW_S)
    args = {
        "run-round": ["run-round", str(study), "--round", "1", "--workers", "1", "--no-progress"],
        "report": ["report", str(study)],
    }[command]
    log = tmp_path / "command.log"
    with log.open("w") as sink:
        started = subprocess.Popen(
            [sys.executable, "-m", "tuner", *args, "--output-dir", str(output_dir)],
            stdout=sink, stderr=subprocess.STDOUT, env=env, start_new_session=True,
        )  # fmt: skip
    try:

        def waits_or_ended() -> bool:
            return "storage unreachable since" in log.read_text() or started.poll() is not None

        _wait_for(waits_or_ended, 240, f"{command} to say it waits")
        assert started.poll() is None, log.read_text()
        proxy.start()
        started.wait(timeout=300)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(started.pid, signal.SIGKILL)
    try:
        output = log.read_text()
        assert started.returncode == 0, output
        assert "cannot open storage" not in output and "Traceback" not in output, output
        said = [line for line in output.splitlines() if "unreachable" in line]
        assert said[0].startswith("warning: storage unreachable since"), output
        assert (
            f"study        {unique_name}" in output if command == "report" else "round-1: 2/2 done" in output
        )
    finally:
        delete_phases(postgres_url, unique_name)
