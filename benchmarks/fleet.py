"""Many workers on one phase: throughput, turnaround, storage traffic and memory, by storage.

W = 1, 2, 4, 8, 16, 32 ``tuner worker`` processes (``tuner run-round --workers W``) serve one
round-1 phase of trivial trials: ``busy_workload.py``, 10 steps spinning ``BUSY_S`` in all, one
eval, one checkpoint (the training engine runs, no real training). Against PostgreSQL
(``TUNER_TEST_POSTGRES_URL``, else the local server) and against SQLite (W <= 8: one file, one
lock), through Optuna's gRPC storage proxy (``tuner storage-proxy``) in front of the same
PostgreSQL, and on an Optuna journal file (``journal:///``, W <= 8): through the proxy and on the
journal no lock passes, two workers may create one slot, and the one that lost yields
(``duplicates``: how many trials were created and failed so).

For each W:
- **trials/s**: trials over the span from the first trial's start to the last one's end (the
  command's start-up, W workers importing torch, left out; ``start-up`` says how long it took);
- **turnaround p50 / p99**: on each worker, from one trial's end to its next trial's start: the
  result written, the claim loop (lock, budgets, the new trial's creation) and the fork. It is what
  a claim costs as a worker sees it, queueing for the phase lock included;
- **storage transactions per trial** (PostgreSQL): ``pg_stat_database.xact_commit`` of the
  database over the command, divided by its trials. Every storage call is one transaction;
  the command's own progress view is counted too (a user runs it);
- **connections**: the most ``pg_stat_activity`` showed on the database, sampled every 0.2 s;
- **client-cache re-reads** (gRPC): how often a process read the whole study again because
  Optuna's proxy client had missed a trial (``_optuna_adapter.grpc_storage_proxy``), per trial;
  storage errors retried are said too (both from ``$TUNER_STORAGE_RETRY_LOG``);
- **worker RSS**: a working worker's resident memory (``worker_rss_mb``, recorded with each
  trial; median) against an idle one's: a ``tuner worker`` started on the finished phase, which
  finds nothing to claim (peak RSS of the whole process, from ``wait4``). An idle worker must not
  hold the torch import a trial needs.

And, on PostgreSQL, what a claim reads as a fleet grows: a claim reads the phase's trials under
the phase lock, and Optuna's storage re-reads every unfinished trial at each read (finished ones
are cached). ``read of R running trials`` times ``get_trials`` in a fresh process on a phase of R
RUNNING trials carrying what a running tuner trial carries (16 attributes, 5 reported values),
for R = ``RUNNING_TRIALS``; the slope is the cost of one running trial to every claim.

Trials per W: ``max(MIN_TRIALS, TRIALS_PER_WORKER x W)``, so each worker runs several.
On a 2-core machine W >= 4 measures contention more than scale: the figures say what one host's
storage round trips and locks cost; ``docs/design/scale.md`` extrapolates from them.

Run alone: ``python -m benchmarks.fleet [--workers 1,2,4] [--storages postgresql,grpc,sqlite,journal]``.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks._common import REPO_ROOT, Result, busy_study, load, report, stopwatch
from benchmarks.fleet_claim_read import RUNNING_TRIALS, claim_read_s

NAME = "fleet"
WORKER_COUNTS = (1, 2, 4, 8, 16, 32)
SQLITE_MAX_WORKERS = 8  # and a journal's: one file, one lock
FILE_STORAGES = ("sqlite", "journal")  # no server: no connections or transactions to count
LOCK_FREE = ("grpc", "journal")  # claims make duplicates and yield them
BUSY_S = 0.01  # a trial's objective: ~10 ms of spinning
STEPS = 10
MIN_TRIALS = 40
TRIALS_PER_WORKER = 8
DEFAULT_POSTGRES = "postgresql+psycopg://postgres@127.0.0.1:5432/test"


@dataclass(frozen=True)
class FleetRun:
    """What one command of W workers measured (``None``: not measurable on that storage)."""

    storage: str
    workers: int
    trials: int
    wall_s: float
    startup_s: float
    trials_per_s: float
    turnaround_p50_s: float
    turnaround_p99_s: float
    transactions_per_trial: float | None
    peak_connections: int | None
    worker_rss_mb: float
    idle_worker_rss_mb: float
    duplicates: int = 0  # trials that lost a race for their slot (no lock: the gRPC proxy)
    refused_samples: int = 0  # connection samples refused: the server at max_connections
    # studies read again whole because the proxy's client cache had missed a trial, and storage
    # errors retried, over every process of the command (``$TUNER_STORAGE_RETRY_LOG``)
    rereads: int = 0
    retried: int = 0


class _PostgresWatch:
    """Samples the database's connections (every 0.2 s) and counts its committed transactions."""

    def __init__(self, url: str) -> None:
        import sqlalchemy

        self.engine = sqlalchemy.create_engine(url, poolclass=sqlalchemy.pool.NullPool)
        self.peak = 0
        self.refused = 0  # samples the server refused: it was at max_connections
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _query(self, sql: str) -> int:
        import sqlalchemy

        with self.engine.connect() as connection:
            return int(connection.execute(sqlalchemy.text(sql)).scalar() or 0)

    def commits(self) -> int:
        # a new connection each time: a fresh statistics snapshot; the workers' backends have
        # flushed their counts when they exited (PostgreSQL 15 flushes at exit)
        return self._query("SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()")

    def _sample(self) -> None:
        import sqlalchemy

        while not self._stop.wait(0.2):
            try:
                count = self._query(
                    "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                    "AND pid <> pg_backend_pid()"
                )
            except sqlalchemy.exc.OperationalError as error:
                # "too many clients already" at W = 64: the server is full, which is the figure;
                # the workers hit the same wall (and wait it out as an outage)
                if "too many clients" not in str(error):
                    raise
                self.refused += 1
                continue
            self.peak = max(self.peak, count)

    def __enter__(self) -> _PostgresWatch:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()
        self.engine.dispose()


def _turnarounds(trials: list[Any]) -> list[float]:
    by_worker: dict[str, list[Any]] = {}
    for trial in sorted(trials, key=lambda t: t.datetime_start):
        by_worker.setdefault(trial.user_attrs["worker"], []).append(trial)
    return [
        (after.datetime_start - before.datetime_complete).total_seconds()
        for runs in by_worker.values()
        for before, after in itertools.pairwise(runs)
    ]


def _quantile(values: list[float], q: float) -> float:
    if len(values) < 2:
        return values[0] if values else float("nan")
    return statistics.quantiles(values, n=100, method="inclusive")[round(q * 100) - 1]


def _idle_worker_rss_mb(study: Path, output: Path, storage: str) -> float:
    """Peak RSS of a ``tuner worker`` that finds the phase finished (``wait4``'s ru_maxrss, KiB)."""
    process = subprocess.Popen(
        [sys.executable, "-m", "tuner", "worker", str(study), "--phase", "round-1",
         "--output-dir", str(output), "--storage", storage, "--quiet"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=REPO_ROOT,
    )  # fmt: skip
    _, status, usage = os.wait4(process.pid, 0)
    process.returncode = os.waitstatus_to_exitcode(status)
    if process.returncode != 0:
        raise RuntimeError(f"idle tuner worker exited {process.returncode}")
    return usage.ru_maxrss / 1024


def measure(storage_kind: str, workers: int, root: Path, postgres_url: str) -> FleetRun:
    trials = max(MIN_TRIALS, TRIALS_PER_WORKER * workers)
    folder = root / f"{storage_kind}-w{workers}"
    folder.mkdir(parents=True)
    name = f"bench-fleet-{storage_kind}-w{workers}-{uuid.uuid4().hex[:8]}"
    study = busy_study(folder, name, BUSY_S, STEPS, trials)
    output = folder / "runs"
    url = {
        "sqlite": f"sqlite:///{output / name / 'study.db'}",
        "journal": f"journal:///{output / name / 'study.log'}",
    }.get(storage_kind, postgres_url)
    with contextlib.ExitStack() as stack:
        if storage_kind == "grpc":
            url = stack.enter_context(_storage_proxy(postgres_url, workers))
        return _measure(storage_kind, workers, trials, name, study, output, url, postgres_url)


@contextlib.contextmanager
def _storage_proxy(postgres_url: str, workers: int) -> Any:
    """``tuner storage-proxy`` in front of ``postgres_url`` on a free port; its ``grpc://`` URL."""
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    proxy = subprocess.Popen(
        [sys.executable, "-m", "tuner", "storage-proxy", "--storage", postgres_url, "--port", str(port),
         "--workers", str(workers)],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=REPO_ROOT,
    )  # fmt: skip
    assert proxy.stdout is not None
    first = proxy.stdout.readline()
    if "serving" not in first:
        proxy.kill()
        raise RuntimeError(f"tuner storage-proxy did not start: {first}{proxy.stdout.read()}")
    try:
        yield f"grpc://127.0.0.1:{port}"
    finally:
        proxy.send_signal(2)  # Ctrl-C: it stops cleanly
        proxy.communicate(timeout=60)


def _measure(
    storage_kind: str,
    workers: int,
    trials: int,
    name: str,
    study: Path,
    output: Path,
    url: str,
    postgres_url: str,
) -> FleetRun:
    import optuna

    from tuner.orchestrate import open_storage  # a journal:/// URL is tuner's, not Optuna's
    from tuner.orchestrate.budget import DUPLICATE_ATTR, counted

    watch = _PostgresWatch(postgres_url) if storage_kind not in FILE_STORAGES else None
    commits_before = watch.commits() if watch else 0
    command = [
        sys.executable, "-m", "tuner", "run-round", str(study), "--round", "1", "--workers", str(workers),
        "--no-progress", "--output-dir", str(output), "--storage", url,
    ]  # fmt: skip
    absorbed = output / "storage-retries.log"  # what every process absorbed (``retry_log``)
    env = {**os.environ, "TUNER_STORAGE_RETRY_LOG": str(absorbed)}
    launched = time.time()
    elapsed = stopwatch()
    with watch or contextlib.nullcontext():
        done = subprocess.run(command, capture_output=True, text=True, cwd=REPO_ROOT, check=False, env=env)
    wall = elapsed()
    if done.returncode != 0:
        tail = done.stderr[-500:]
        raise RuntimeError(f"{storage_kind} W={workers}: run-round exited {done.returncode}: {tail}")
    transactions = (watch.commits() - commits_before) / trials if watch else None
    stored = postgres_url if storage_kind == "grpc" else url  # read behind the proxy
    phase = optuna.load_study(study_name=f"{name}/round-1", storage=open_storage(stored))
    done_trials = [t for t in counted(phase.trials) if t.state.name == "COMPLETE"]
    if len(done_trials) != trials:
        raise RuntimeError(f"{storage_kind} W={workers}: {len(done_trials)} of {trials} trials complete")
    first = min(t.datetime_start for t in done_trials)
    span = (max(t.datetime_complete for t in done_trials) - first).total_seconds()
    turnaround = _turnarounds(done_trials)
    idle_rss = _idle_worker_rss_mb(study, output, url)
    duplicates = sum(DUPLICATE_ATTR in t.user_attrs for t in phase.trials)
    absorbed_lines = absorbed.read_text().splitlines() if absorbed.exists() else []
    rereads = sum(line.startswith("reread:") for line in absorbed_lines)
    if storage_kind not in FILE_STORAGES:
        for study_name in (f"{name}/round-1", name):  # keep the shared database small
            with contextlib.suppress(KeyError):
                optuna.delete_study(study_name=study_name, storage=postgres_url)
    return FleetRun(
        storage=storage_kind,
        workers=workers,
        trials=trials,
        wall_s=wall,
        startup_s=first.timestamp() - launched,
        trials_per_s=trials / span,
        turnaround_p50_s=_quantile(turnaround, 0.5),
        turnaround_p99_s=_quantile(turnaround, 0.99),
        transactions_per_trial=transactions,
        peak_connections=watch.peak if watch else None,
        refused_samples=watch.refused if watch else 0,
        worker_rss_mb=statistics.median(t.user_attrs["worker_rss_mb"] for t in done_trials),
        idle_worker_rss_mb=idle_rss,
        duplicates=duplicates,
        rereads=rereads,
        retried=len(absorbed_lines) - rereads,
    )


def _line(run: FleetRun) -> str:
    extra = (
        f", {run.transactions_per_trial:.0f} transactions/trial, {run.peak_connections} connections"
        if run.transactions_per_trial is not None
        else ""
    )
    return (
        f"  {run.storage:10s} W={run.workers:2d}: {run.trials} trials in {run.wall_s:.1f}s "
        f"(start-up {run.startup_s:.1f}s), {run.trials_per_s:.1f} trials/s, turnaround "
        f"p50 {run.turnaround_p50_s * 1e3:.0f} ms p99 {run.turnaround_p99_s * 1e3:.0f} ms{extra}; "
        f"worker RSS {run.worker_rss_mb:.0f} MB working, {run.idle_worker_rss_mb:.0f} MB idle"
        + (f"; {run.duplicates} duplicate trials yielded" if run.storage in LOCK_FREE else "")
        + (f"; {run.rereads} client-cache re-reads of the study" if run.storage == "grpc" else "")
        + (f"; {run.retried} storage errors retried" if run.retried else "")
    )


def _results(run: FleetRun) -> list[Result]:
    tag = f"{run.storage} W={run.workers}"
    results = [
        Result(NAME, f"trials/s, {tag}", run.trials_per_s, "{:.1f}"),
        Result(NAME, f"turnaround p50, {tag}", run.turnaround_p50_s * 1e3, "{:.0f} ms"),
        Result(NAME, f"turnaround p99, {tag}", run.turnaround_p99_s * 1e3, "{:.0f} ms"),
    ]
    if run.transactions_per_trial is not None and run.peak_connections is not None:
        results += [
            Result(NAME, f"storage transactions/trial, {tag}", run.transactions_per_trial, "{:.0f}"),
            Result(NAME, f"connections at peak, {tag}", run.peak_connections, "{:.0f}"),
            Result(NAME, f"samples refused at max_connections, {tag}", run.refused_samples, "{:.0f}"),
        ]
    if run.storage in LOCK_FREE:
        results.append(Result(NAME, f"duplicate trials yielded, {tag}", run.duplicates, "{:.0f}"))
    if run.storage == "grpc":  # each a read of the whole study (``_optuna_adapter.grpc_storage_proxy``)
        results.append(
            Result(NAME, f"client-cache re-reads per trial, {tag}", run.rereads / run.trials, "{:.2f}")
        )
    if run.workers == 1:  # the same process whatever W: once per storage is enough
        results += [
            Result(NAME, f"working worker RSS, {run.storage}", run.worker_rss_mb, "{:.0f} MB"),
            Result(
                NAME,
                f"idle worker RSS (no torch), {run.storage}",
                run.idle_worker_rss_mb,
                "{:.0f} MB",
                "< working worker's",
                run.idle_worker_rss_mb < run.worker_rss_mb,
            ),
        ]
    return results


def run(
    worker_counts: tuple[int, ...] = WORKER_COUNTS,
    storages: tuple[str, ...] = ("postgresql", "grpc", "sqlite", "journal"),
) -> list[Result]:
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    postgres_url = os.environ.get("TUNER_TEST_POSTGRES_URL", DEFAULT_POSTGRES)
    print(f"== {NAME}: W tuner workers on one phase of ~{BUSY_S * 1e3:.0f} ms trials  [{load()}]")
    results: list[Result] = []
    with tempfile.TemporaryDirectory(prefix="tuner-fleet-") as tmp:
        for storage_kind in storages:
            for workers in worker_counts:
                if storage_kind in FILE_STORAGES and workers > SQLITE_MAX_WORKERS:
                    continue
                fleet = measure(storage_kind, workers, Path(tmp), postgres_url)
                print(_line(fleet), flush=True)
                results += _results(fleet)
    if "postgresql" in storages:
        reads = {running: claim_read_s(postgres_url, running) for running in RUNNING_TRIALS}
        slope = statistics.linear_regression(list(reads), list(reads.values())).slope
        for running, seconds in reads.items():
            print(f"  a claim's read of {running} running trials: {seconds * 1e3:.0f} ms", flush=True)
            results.append(
                Result(NAME, f"claim's read of {running} running trials", seconds * 1e3, "{:.0f} ms")
            )
        results.append(Result(NAME, "claim's read, per running trial", slope * 1e3, "{:.2f} ms"))
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", default=",".join(map(str, WORKER_COUNTS)), help="e.g. 1,2,4")
    parser.add_argument(
        "--storages", default="postgresql,grpc,sqlite,journal", help="postgresql, grpc, sqlite, journal"
    )
    args = parser.parse_args()
    counts = tuple(int(part) for part in args.workers.split(","))
    storages = tuple(part.strip() for part in args.storages.split(","))
    report(NAME, run(counts, storages))


if __name__ == "__main__":
    main()
