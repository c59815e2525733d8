"""PostgreSQL under fire: the workers' connections are terminated again and again mid-phase,
directly or behind a gRPC storage proxy (whose own connections are then the ones cut: the workers
get ``UNKNOWN`` from it, waited out like a dropped connection).

Only this test's connections are terminated (they carry a unique ``application_name``): other
tests share the server.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests._processes import wait_for as _wait_for
from tests._warm_processes import spawn_warm_tuner
from tests.orchestrate_tests.conftest import (
    delete_phases,
    load_phase,
    serving_proxy,
    start_tuner,
    toy_study,
    tuner_env,
)
from tuner.orchestrate.budget import counted, slot_key
from tuner.playbook import start_round
from tuner.spec import load_study


def _terminate_loop(admin_url: str, app: str, stop: threading.Event, period_s: float) -> list[int]:
    """Every ``period_s``: ``pg_terminate_backend`` of every connection named ``app``."""
    from sqlalchemy import create_engine, text

    engine = create_engine(admin_url, isolation_level="AUTOCOMMIT")
    killed: list[int] = []
    with engine.connect() as connection:
        while not stop.wait(period_s):
            rows = connection.execute(
                text(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                    "WHERE application_name = :app AND pid <> pg_backend_pid()"
                ),
                {"app": app},
            ).fetchall()
            killed.append(len(rows))
    engine.dispose()
    return killed


@contextlib.contextmanager
def _storage_for_workers(url: str, through: str) -> Iterator[str]:
    """``url`` itself, or the ``grpc://`` of a proxy of its own in front of it."""
    if through == "postgresql":
        yield url
        return
    with serving_proxy(url, workers=2) as proxy_url:
        yield proxy_url


@pytest.mark.postgres
@pytest.mark.parametrize("through", ["postgresql", "grpc"])
def test_terminated_connections_lose_no_worker_and_count_nothing_twice(
    tmp_path: Path, output_dir: Path, postgres_url: str, unique_name: str, through: str
) -> None:
    separator = "&" if "?" in postgres_url else "?"
    with _storage_for_workers(f"{postgres_url}{separator}application_name={unique_name}", through) as url:
        _phase_under_fire(tmp_path, output_dir, postgres_url, unique_name, url)


def _phase_under_fire(
    tmp_path: Path, output_dir: Path, postgres_url: str, unique_name: str, url: str
) -> None:
    study = toy_study(
        tmp_path,
        name=unique_name,
        options={"step_sleep_s": 0.02},
        round1={"trials": 12, "steps": 30, "max_failed": 1},
    )
    # the phase is started here (not through the chaos); only the workers' connections are cut
    start_round(load_study(study), "round-1", output_dir, storage_url=postgres_url)
    env = tuner_env(TUNER_STORAGE=url, TUNER_STORAGE_RETRY_LOG=str(tmp_path / "retries.log"), TUNER_DEBUG="1")
    stop = threading.Event()
    killed: list[int] = []
    chaos = threading.Thread(
        target=lambda: killed.extend(_terminate_loop(postgres_url, unique_name, stop, 0.7)), daemon=True
    )
    workers = [
        spawn_warm_tuner("worker", str(study), "--phase", "round-1", "--output-dir", str(output_dir),
                    "--label", f"w{index}", "--threads", "1", env=env)
        for index in range(2)
    ]  # fmt: skip
    statuses = output_dir / unique_name / "round-1" / ".workers"
    _wait_for(lambda: len(list(statuses.glob("w*.json"))) == 2, 120, "both workers to serve the phase")
    chaos.start()  # mid-phase: the workers' start-up (tuner/cli) is not what is tested here
    outputs = []
    try:
        for worker in workers:
            output, _ = worker.communicate(timeout=300)
            outputs.append((worker.returncode, output))
    finally:
        stop.set()
        chaos.join(timeout=30)
        for worker in workers:
            worker.kill()
    try:
        for code, output in outputs:
            assert code == 0, output  # no worker died
            assert "Traceback" not in output and "internal error" not in output, output
        assert sum(killed) >= 3, killed  # the chaos really hit the workers
        log = tmp_path / "retries.log"  # behind the proxy its connection pool may mask every cut
        retried = log.read_text().splitlines() if log.exists() else []
        print(f"{sum(killed)} connections terminated; {len(retried)} storage retries;",
              sum("lost while held" in line for line in retried), "phase locks lost")  # fmt: skip
        trials = load_phase(postgres_url, unique_name).trials
        assert len({t.number for t in trials}) == len(trials)
        # the rule every reader applies (``budget.counted``): of the trials of one (slot, attempt),
        # the lowest-numbered not marked a duplicate. With a lock lost, two workers may both have
        # created and run one; the later is marked, unless it finished before it could be
        live = counted(trials)
        complete = [t.user_attrs["slot"] for t in live if t.state.name == "COMPLETE"]
        shown = [(t.number, t.state.name, slot_key(t), t.user_attrs.get("duplicate_of")) for t in trials]
        print(shown)  # whole, where a failed assert's message is cut
        assert sorted(complete) == list(range(12)), shown
        live_keys = {slot_key(t) for t in live}
        assert all(slot_key(t) in live_keys for t in trials if t not in live), shown  # duplicates only
        assert not [t for t in trials if t.state.name in ("RUNNING", "WAITING")]
        # no live trial was declared dead: nothing was marked killed (the workers never died)
        killed_live = [t for t in live if t.user_attrs.get("failure_reason") == "killed"]
        if killed_live:  # seen in 1 of 5 full runs once: keep what a diagnosis needs
            for trial in killed_live:
                print(
                    trial.number,
                    trial.datetime_start,
                    trial.datetime_complete,
                    trial.system_attrs,
                    trial.user_attrs,
                )
            for index, (_, output) in enumerate(outputs):
                print(f"--- worker w{index} (TUNER_DEBUG=1) ---\n" + "\n".join(output.splitlines()[-150:]))
        assert not killed_live
    finally:
        delete_phases(postgres_url, unique_name)


@pytest.mark.postgres
@pytest.mark.parametrize("through", ["postgresql", "grpc", "journal"])
def test_two_machines_one_killed_its_trial_starts_over_on_the_other(
    tmp_path: Path, postgres_url: str, unique_name: str, through: str
) -> None:
    """``run-round`` here, ``tuner worker`` on "another machine" (its own output folder), both
    on the database, both through one proxy, or both on one journal file (a shared file system,
    as NFS would give two machines)."""
    if through == "journal":
        journal = f"journal:///{tmp_path / 'study.log'}"
        _one_machine_lost(tmp_path, journal, unique_name, journal)
        return
    with _storage_for_workers(postgres_url, through) as url:
        _one_machine_lost(tmp_path, postgres_url, unique_name, url)


def _one_machine_lost(tmp_path: Path, postgres_url: str, unique_name: str, url: str) -> None:
    """``postgres_url``: where the test reads the phase (the database, or the journal itself)."""
    import json

    from tests._processes import wait_for as _wait_for
    from tuner.orchestrate import count_trials

    here, there = tmp_path / "here", tmp_path / "there"
    study = toy_study(
        tmp_path / "study",
        name=unique_name,
        options={"step_sleep_s": 0.03},
        round1={"trials": 4, "steps": 60, "max_failed": 1},
    )
    env = tuner_env(TUNER_STORAGE=url, TUNER_HEARTBEAT_GRACE_S="4")
    command = start_tuner(
        "run-round", str(study), "--round", "1", "--workers", "1", "--output-dir", str(here), "--no-progress",
        env=env,
    )  # fmt: skip

    def phase_exists() -> bool:
        try:
            load_phase(postgres_url, unique_name)
            return True
        except KeyError:
            return False

    try:
        _wait_for(phase_exists, 120, "the phase")
        machine = spawn_warm_tuner(
            "worker",
            str(study),
            "--phase",
            "round-1",
            "--output-dir",
            str(there),
            "--label",
            "there",
            env=env,
        )
        status_file = there / unique_name / "round-1" / ".workers" / "there.json"

        def busy() -> int | None:
            try:
                status = json.loads(status_file.read_text())
            except (OSError, ValueError):
                return None
            return (
                status["trial"]
                if status.get("state") == "training" and 10 <= status.get("step", 0) <= 40
                else None
            )

        number = _wait_for(busy, 120, "the other machine mid-trial")
        machine.send_signal(signal.SIGKILL)  # the machine is lost (its trial dies with it)
        machine.wait()
        output, _ = command.communicate(timeout=240)
        assert command.returncode == 0, output
        trials = load_phase(postgres_url, unique_name).trials
        lost = trials[number]
        assert lost.state.name == "FAIL" and lost.user_attrs["failure_reason"] == "killed"
        assert lost.user_attrs["retried"] and lost.user_attrs["worker"] == "there"
        (retry,) = [t for t in trials if t.user_attrs.get("retry_of") == number]
        assert retry.state.name == "COMPLETE" and retry.user_attrs["worker"] != "there"
        # no shared folder: the retry started over in a folder of this machine
        assert Path(retry.user_attrs["run_dir"]).is_relative_to(here.resolve())
        assert not retry.user_attrs.get("resumed_from_step")
        counts = count_trials(trials)
        assert (counts.slots, counts.completed, counts.failed) == (4, 4, 0)  # max_failed 1 never hit
        assert len({t.number for t in trials}) == len(trials)
    finally:
        command.kill()
        delete_phases(postgres_url, unique_name)
