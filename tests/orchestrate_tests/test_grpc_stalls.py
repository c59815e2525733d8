"""The gRPC proxy never waits for ever, and never makes a worker wait for ever.

Optuna's cached storage, inside the proxy, holds one lock of its own for every study while some
of its database calls run. One such call waiting on a trial's row, locked by a session whose
client is frozen or gone, held up every request of every study behind it, for as long as that
session lived: the claims of a whole fleet stopped inside gRPC calls. Made to happen here on
purpose: a session of the test holds a trial's row (``SELECT ... FOR UPDATE``) and never lets go.

And a proxy that stops answering with its connection open (SIGSTOP: a machine frozen) ends each
of a worker's calls at the client's deadline; the worker waits the outage out, then says one line
and exits 2.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time
from typing import Any

import pytest

from tests._processes import kill_group, wait_for
from tests.orchestrate_tests.conftest import serving_proxy, tuner_env

pytestmark = pytest.mark.postgres


def _held_row(postgres_url: str, trial_id: int) -> Any:
    """A plain PostgreSQL session that locks trial ``trial_id``'s row and keeps it (its client
    frozen: the server sees a live session in a transaction)."""
    import psycopg

    plain = postgres_url.replace("postgresql+psycopg://", "postgresql://")
    holder = psycopg.connect(plain)
    holder.execute("SELECT trial_id FROM trials WHERE trial_id = %s FOR UPDATE", (trial_id,))
    return holder


def _waiting_on_a_lock(postgres_url: str) -> bool:
    """Whether a session of the server waits on a lock (the proxy's write, held up by the row)."""
    import psycopg

    with psycopg.connect(postgres_url.replace("postgresql+psycopg://", "postgresql://")) as probe:
        row = probe.execute("SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'").fetchone()
    return bool(row and row[0])


def test_a_row_locked_for_ever_stalls_one_call_for_the_lock_wait_and_no_other_study(
    postgres_url: str, unique_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    import optuna

    from tuner.orchestrate import open_storage

    monkeypatch.setenv("TUNER_PHASE_LOCK_WAIT_S", "3")  # the proxy's lock wait (it inherits it)
    with serving_proxy(postgres_url) as url:
        storage = open_storage(url)
        stuck = optuna.create_study(study_name=f"{unique_name}-a", storage=storage).ask()
        other = optuna.create_study(study_name=f"{unique_name}-b", storage=storage)
        other.ask()
        holder = _held_row(postgres_url, stuck._trial_id)
        try:
            outcome: dict[str, Any] = {}

            def write_the_locked_trial() -> None:
                started = time.monotonic()
                try:
                    open_storage(url).set_trial_param(
                        stuck._trial_id, "x", 0.5, optuna.distributions.FloatDistribution(0, 1)
                    )
                    outcome["written"] = True
                except Exception as error:  # the proxy's answer: the lock wait ran out
                    outcome["error"] = type(error).__name__
                outcome["after_s"] = time.monotonic() - started

            writer = threading.Thread(target=write_the_locked_trial, daemon=True)
            writer.start()
            # the write waits on the row, inside the proxy's own lock, before the other study reads
            wait_for(lambda: _waiting_on_a_lock(postgres_url) or outcome, what="the write to wait on the row")
            reader = threading.Thread(
                target=lambda: outcome.update(read=len(other.get_trials())), daemon=True
            )
            reader.start()
            reader.join(timeout=30)
            writer.join(timeout=30)
            # the row is still locked: the other study's read came back all the same
            assert outcome.get("read") == 1, outcome
            assert outcome.get("error") and not outcome.get("written"), outcome
            assert outcome["after_s"] < 20, outcome  # the 3 s lock wait, not the holder's life
        finally:
            holder.rollback()
            holder.close()


def test_a_frozen_proxy_ends_a_commands_calls_at_the_deadline_then_one_line_and_exit_2(
    postgres_url: str,
) -> None:
    from tests.cli_tests.test_storage_proxy import _free_port, _start_proxy

    port = _free_port()
    proxy, _ = _start_proxy(postgres_url, port)
    url = f"grpc://127.0.0.1:{port}"
    try:
        proxy.send_signal(signal.SIGSTOP)  # its port still accepts connections: nothing answers
        started = time.monotonic()
        stalled = subprocess.run(
            [sys.executable, "-m", "tuner", "list", "--storage", url],
            capture_output=True, text=True, timeout=120,
            env=tuner_env(TUNER_GRPC_CALL_TIMEOUT_S="1", TUNER_STORAGE_OUTAGE_S="4"),
        )  # fmt: skip
        took = time.monotonic() - started
    finally:
        proxy.send_signal(signal.SIGCONT)
        kill_group(proxy)
    assert stalled.returncode == 2, stalled.stdout + stalled.stderr
    warning, error = stalled.stderr.strip().splitlines()  # the wait said as it starts, then why it ended
    assert warning.startswith("warning: storage unreachable since ") and "(no answer at grpc://" in warning
    assert (
        error.startswith("error: storage unreachable since ")
        and "longer than $TUNER_STORAGE_OUTAGE_S (4 s)" in error
    )
    assert took < 60, took  # the outage window (4 s) and its last calls' deadlines, not for ever


def test_a_client_reaches_its_proxy_within_a_second_of_its_restart_after_a_long_outage(
    postgres_url: str,
) -> None:
    """A worker's client lives through a 20 s outage of its proxy, asking all along (as a worker's
    heartbeat does), and reaches the proxy started again on its port within about a second of its
    start. With gRPC's own backoff (1 s, then 1.6x each attempt, up to 120 s) it came back 8.3 s
    after the proxy (measured here), the later the longer the outage, while its trials' beats
    lapsed."""
    import grpc

    from tests.cli_tests.test_storage_proxy import _free_port, _start_proxy
    from tuner.orchestrate._optuna_adapter import RECONNECT_MAX_MS
    from tuner.orchestrate.storage import open_grpc_proxy

    port = _free_port()
    proxy, _ = _start_proxy(postgres_url, port, "--workers", "1")
    client = open_grpc_proxy("127.0.0.1", port)  # a worker's client, as its commands open it
    client.get_all_studies()
    kill_group(proxy)
    proxy.wait(timeout=60)
    down_until = time.monotonic() + 20.0
    while time.monotonic() < down_until:
        with pytest.raises(grpc.RpcError):
            client.get_all_studies()
        time.sleep(0.2)
    proxy, _ = _start_proxy(postgres_url, port, "--workers", "1")
    serving = time.monotonic()
    while True:
        try:
            client.get_all_studies()
            break
        except grpc.RpcError:
            assert time.monotonic() - serving < 30, "the client never reached the proxy again"
            time.sleep(0.05)
    back_s = time.monotonic() - serving
    client.close()
    kill_group(proxy)
    assert back_s <= RECONNECT_MAX_MS / 1000 * 1.2 + 0.5, back_s  # the cap, its jitter, a loaded machine
