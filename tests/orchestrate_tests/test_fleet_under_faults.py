"""A fleet under every fault at once, as one test: 8 worker processes on two "machines" (two
output folders), one through the gRPC proxy, the other directly on PostgreSQL, while

- the database connections of both (the proxy's and the direct workers') are cut every second;
- the proxy is killed (SIGKILL) and started again on its port;
- a worker of the direct machine is killed with SIGKILL, its trial process with it;
- one worker's clock runs 10 minutes fast.

It must end by itself: every slot completed once, none lost, no worker but the killed one
failing, and no worker waiting longer than the heartbeat grace plus the outage it rode out.
``benchmarks/fleet_faults.py`` runs the same at a larger size and reports its figures.
"""

from __future__ import annotations

import itertools
import math
import os
import signal
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from tests._processes import finish, wait_for
from tests._warm_processes import spawn_warm_tuner
from tests.orchestrate_tests.conftest import delete_phases, load_phase, toy_study, tuner_env
from tests.orchestrate_tests.test_chaos import _assert_each_slot_done_once
from tests.orchestrate_tests.test_chaos_postgres import _terminate_loop

pytestmark = pytest.mark.postgres

# the CI size; ``benchmarks/fleet_faults.py`` runs this test larger (``TUNER_TEST_FLEET_SLOTS``)
SLOTS = int(os.environ.get("TUNER_TEST_FLEET_SLOTS", "24"))
WORKERS_EACH = 4
PROXY_DOWN_S = 2.0  # from the proxy's kill to its start again


def _serving(folder: Path, study: str) -> int:
    """How many workers of this machine have written their status file (they serve the phase)."""
    return len(list((folder / study / "round-1" / ".workers").glob("*.json")))


def grace_beyond_the_proxy_outage_s(proxy_start_s: float) -> int:
    """The heartbeat grace of the fleet's workers: 6 s, or more when the proxy's outage may last
    longer. Workers on the database do not meet the proxy's outage, so they look for stale trials
    through it, and a proxied trial whose beats are held up for a grace (and two beats more, to be
    confirmed) is failed as ``killed`` though it is alive. The outage is ``PROXY_DOWN_S`` plus the
    proxy's start again and the clients' reconnection: on a loaded machine (the full suite on 2
    cores) a live trial was failed so. It is taken as twice ``PROXY_DOWN_S`` plus the first
    start, measured on the spot; the lost worker's trial is then found that much later."""
    return max(6, math.ceil(2 * (PROXY_DOWN_S + proxy_start_s)))


def longest_gap_s(trials: list[Any]) -> float:
    """The longest time any worker went between two trials it ended (or from its first start),
    by the storage's stamps: how long a worker stood still."""
    by_worker: dict[str, list[float]] = {}
    for trial in trials:
        if trial.datetime_complete is None or trial.datetime_start is None:
            continue
        marks = by_worker.setdefault(str(trial.user_attrs.get("worker")), [])
        marks += [trial.datetime_start.timestamp(), trial.datetime_complete.timestamp()]
    gaps = [0.0]
    for marks in by_worker.values():
        ordered = sorted(marks)
        gaps += [b - a for a, b in itertools.pairwise(ordered)]
    return max(gaps)


def test_a_fleet_under_cut_connections_a_restarted_proxy_a_killed_worker_and_a_fast_clock_ends_by_itself(
    tmp_path: Path, postgres_url: str, unique_name: str
) -> None:
    from tests.cli_tests.test_storage_proxy import _free_port, _start_proxy
    from tuner.playbook import start_round
    from tuner.spec import load_study

    study = toy_study(
        tmp_path / "study",
        name=unique_name,
        options={"step_sleep_s": 0.05},
        round1={"trials": SLOTS, "steps": 20, "max_failed": 3},
        eval_every=5,
        log_every=5,
    )
    separator = "&" if "?" in postgres_url else "?"
    cut = f"{postgres_url}{separator}application_name={unique_name}"  # the connections the chaos cuts
    start_round(load_study(study), "round-1", tmp_path / "direct", storage_url=postgres_url)
    port = _free_port()
    starting = time.monotonic()
    proxy, _ = _start_proxy(cut, port, "--workers", str(WORKERS_EACH))
    grace_s = grace_beyond_the_proxy_outage_s(time.monotonic() - starting)
    common = {"TUNER_HEARTBEAT_GRACE_S": str(grace_s), "TUNER_STORAGE_OUTAGE_S": "120"}
    machines = {"direct": cut, "proxied": f"grpc://127.0.0.1:{port}"}
    workers = {}
    for machine, url in machines.items():
        for index in range(WORKERS_EACH):
            label = f"{machine[0]}{index}"
            env = tuner_env(TUNER_STORAGE=url, **common)
            if label == "p3":
                env["TUNER_TEST_CLOCK_OFFSET_S"] = "600"  # 10 minutes fast
            workers[label] = spawn_warm_tuner(
                "worker", str(study), "--phase", "round-1", "--output-dir", str(tmp_path / machine),
                "--label", label, "--threads", "1", env=env,
            )  # fmt: skip
    stop = threading.Event()
    terminated: list[int] = []
    chaos = threading.Thread(
        target=lambda: terminated.extend(_terminate_loop(postgres_url, unique_name, stop, 1.0)), daemon=True
    )

    def completed() -> int:
        return sum(t.state.name == "COMPLETE" for t in load_phase(postgres_url, unique_name).trials)

    try:
        wait_for(
            lambda: sum(_serving(tmp_path / m, unique_name) for m in machines) == 2 * WORKERS_EACH,
            what="every worker to serve the phase",
        )
        chaos.start()
        wait_for(lambda: completed() >= 4, what="4 trials completed")
        victim = workers.pop("d0")  # a machine lost: the worker and its trial process, at once
        os.killpg(victim.pid, signal.SIGKILL)
        victim.wait(timeout=60)
        proxy.kill()
        down_from = time.monotonic()
        proxy.communicate(timeout=60)
        time.sleep(PROXY_DOWN_S)  # the proxied machine meets the outage
        proxy, _ = _start_proxy(cut, port, "--workers", str(WORKERS_EACH))
        down_s = time.monotonic() - down_from  # until it serves again (the clients reconnect after)
        outputs = {}
        for label, process in workers.items():
            outputs[label], _ = finish(process, completed, what=label)
        stop.set()
        chaos.join(timeout=30)
        for label, process in workers.items():
            assert process.returncode == 0, f"{label}: {outputs[label]}"
            said = outputs[label]
            assert "Traceback" not in said and "internal error" not in said, f"{label}: {said}"
        trials = load_phase(postgres_url, unique_name).trials
        _assert_each_slot_done_once(trials, SLOTS)
        killed = [t for t in trials if t.user_attrs.get("failure_reason") == "killed"]
        duplicates = [t for t in trials if t.user_attrs.get("duplicate_of") is not None]
        gap = longest_gap_s(trials)
        print(
            f"fleet: {SLOTS} slots completed once each; {len(trials)} trials ({len(killed)} killed and "
            f"retried, {len(duplicates)} duplicates set aside); {sum(terminated)} connections cut; "
            f"longest stall of a worker {gap:.1f} s; heartbeat grace {grace_s} s, proxy down {down_s:.1f} s"
        )
        assert sum(terminated) >= 3, terminated  # the chaos reached the fleet
        # the lost worker's trial, at most (it may have been between two)
        assert len(killed) <= 1, ([(t.number, t.user_attrs.get("worker")) for t in killed], grace_s, down_s)
        assert gap < 120, gap  # the heartbeat grace and the proxy's restart, never "for ever"
    finally:
        stop.set()
        proxy.send_signal(signal.SIGINT)
        try:
            proxy.communicate(timeout=60)
        finally:
            proxy.kill()
        delete_phases(postgres_url, unique_name)
