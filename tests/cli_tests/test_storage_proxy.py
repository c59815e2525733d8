"""``tuner storage-proxy``: Optuna's gRPC proxy in front of PostgreSQL, read by ``report`` and
``list`` through ``grpc://``; what it refuses, and how it stops."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests._processes import spawn, wait_for
from tests.orchestrate_tests.conftest import run_tuner, tuner_env
from tests.report_tests.builders import add_trial, study
from tuner.orchestrate.storage_proxy import threads_for


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _start_proxy(storage: str, port: int, *extra: str) -> tuple[subprocess.Popen[str], list[str]]:
    """The proxy, once it says it serves; its output lines so far (read on as it runs)."""
    process = spawn(
        [sys.executable, "-m", "tuner", "storage-proxy", "--storage", storage, "--port", str(port), *extra],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=tuner_env(),
    )  # fmt: skip
    assert process.stdout is not None
    lines = [process.stdout.readline()]  # the first line: serving, or why not
    assert "storage-proxy: serving" in lines[0], lines[0] + process.stdout.read()
    return process, lines


def _one_error_line(done: subprocess.CompletedProcess[str], expected: str) -> None:
    assert done.returncode == 2, done.stdout + done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and expected in lines[0] and "Traceback" not in done.stderr, done.stderr


def test_threads_grow_with_the_workers_expected_within_bounds() -> None:
    assert [threads_for(n) for n in (1, 100, 1000, 2500, 100_000)] == [8, 8, 10, 25, 64]


@pytest.mark.postgres
def test_report_and_list_read_through_the_proxy_as_from_postgresql_and_ctrl_c_stops_it(
    postgres_url: str, unique_name: str, tmp_path: Path
) -> None:
    built = study(tmp_path / "s", name=unique_name, storage=postgres_url)
    phase = built.start("round-1")
    for slot, (value, lr) in enumerate([(0.3, 0.01), (0.1, 0.1), (0.2, 1.0)]):
        add_trial(phase, slot, value, {"optimizer.lr": lr}, best_step=20)
    # a password in the database URL (trust authentication ignores it) is never shown
    secret_url = postgres_url.replace("://postgres@", "://postgres:s3cret-pw@")
    assert secret_url != postgres_url
    port = _free_port()
    proxy, lines = _start_proxy(secret_url, port, "--health-every", "0.5")
    grpc_url = f"grpc://127.0.0.1:{port}"

    direct = run_tuner("report", str(built.path), "--storage", postgres_url, "--json")
    through = run_tuner("report", str(built.path), "--storage", grpc_url, "--json")
    assert direct.returncode == 0 and through.returncode == 0, direct.stderr + through.stderr
    expected, got = json.loads(direct.stdout), json.loads(through.stdout)
    assert (got.pop("storage"), expected.pop("storage")) == (grpc_url, postgres_url)
    assert got == expected  # the same report, trial for trial
    listed = run_tuner("list", "--storage", grpc_url, "--json")
    assert listed.returncode == 0, listed.stderr
    row = next(r for r in json.loads(listed.stdout) if r["study"] == unique_name)
    assert row["best"]["value"] == 0.1 and row["storage"] == grpc_url

    assert proxy.stdout is not None
    wait_for(lambda: "the database answers in" in (lines.append(proxy.stdout.readline()) or lines[-1]),
             what="a health line", process=proxy)  # fmt: skip
    proxy.send_signal(signal.SIGINT)
    rest, _ = proxy.communicate(timeout=60)
    output = "".join(lines) + rest
    assert proxy.returncode == 0 and "storage-proxy: stopped" in output, output
    assert "s3cret-pw" not in output and "postgres:***@" in output, output


def test_an_address_where_no_proxy_answers_is_waited_for_then_one_line(tmp_path: Path) -> None:
    """As a proxy being restarted is: said at once (a warning), waited for up to
    ``$TUNER_STORAGE_OUTAGE_S``, then one error line naming the address."""
    from tests.orchestrate_tests.conftest import tuner_env

    started = time.monotonic()
    port = _free_port()
    done = run_tuner(
        "list", "--storage", f"grpc://127.0.0.1:{port}", env=tuner_env(TUNER_STORAGE_OUTAGE_S="2")
    )
    assert done.returncode == 2, done.stdout + done.stderr
    warning, error = done.stderr.strip().splitlines()
    assert warning.startswith("warning: storage unreachable since") and "waiting up to 2 s" in warning
    assert (
        error.startswith("error: storage unreachable since")
        and f"no answer at grpc://127.0.0.1:{port}" in error
    )
    assert time.monotonic() - started < 60  # waits seconds, not gRPC's default forever
    _one_error_line(run_tuner("list", "--storage", "grpc://me:pw@host:1"), "is not a gRPC proxy address")


def test_the_proxy_refuses_other_machines_unless_allowed_and_a_port_in_use(tmp_path: Path) -> None:
    storage = f"sqlite:///{tmp_path / 'study.db'}"
    remote = run_tuner("storage-proxy", "--storage", storage, "--host", "0.0.0.0", "--port", "1")
    _one_error_line(remote, "--host 0.0.0.0 lets other machines reach the proxy, which has no TLS")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        in_use = run_tuner("storage-proxy", "--storage", storage, "--port", str(port))
    _one_error_line(in_use, f"cannot listen on 127.0.0.1:{port} (Address already in use)")
    _one_error_line(run_tuner("storage-proxy"), "give the database to serve")


def test_allow_remote_says_once_what_listening_elsewhere_exposes(tmp_path: Path) -> None:
    """``--allow-remote`` with another ``--host``: one warning line before it listens (here the
    port is taken, so it then stops with its one error line instead of serving)."""
    storage = f"sqlite:///{tmp_path / 'study.db'}"
    with socket.socket() as taken:
        taken.bind(("0.0.0.0", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = run_tuner(
            "storage-proxy", "--storage", storage, "--host", "0.0.0.0", "--allow-remote", "--port", str(port)
        )
    assert done.returncode == 2, done.stdout + done.stderr
    warnings = [line for line in done.stderr.splitlines() if line.startswith("warning:")]
    assert warnings == [
        f"warning: listening on 0.0.0.0:{port} with no TLS and no authentication: anyone who reaches "
        "this port can read and change every study in the database"
    ], done.stderr
    assert "Traceback" not in done.stderr
