"""What the storage costs a trial: Optuna on SQLite as our workers use it, against raw sqlite3.

A trial, as a worker writes it: the slot's trial created with its point and bookkeeping
attributes (run folder, worker, reproduce command, code version…) in one call, heartbeat,
WAITING -> RUNNING, the ``healthy`` mark, and at the end its result attributes and ``tell``.
An intermediate report, as a worker writes it at every eval: ``trial.report`` + the
``last_checkpoint_step`` attribute. Optuna's RDB storage costs about the same per attribute
whether attributes come in one call or several: the figure follows the number of attributes.
Measured in 1 process and in 4 processes at once on one file, opened by
``tuner.orchestrate.open_storage`` (WAL, busy timeout, ``synchronous=NORMAL``). Baseline, same
folder, same run: raw ``sqlite3`` INSERT + COMMIT of one row, in WAL mode with
``synchronous=NORMAL`` and with the default ``FULL``.

Run alone: ``python -m benchmarks.storage_cost``.
"""

from __future__ import annotations

import multiprocessing
import sqlite3
import statistics
import tempfile
import time
from pathlib import Path

from benchmarks._common import Result, load, report, stopwatch

NAME = "storage_cost"
TRIALS_PER_PROCESS = 40
REPORTS_PER_TRIAL = 5
RAW_ROWS = 400
_START_ATTRS = {
    "run_dir": "",
    "worker": "host:1234",
    "max_train_steps": 100,
    "reproduce": "tuner train study.yaml --set optimizer.lr=0.01 --set max_train_steps=100",
    "git_commit": "0" * 40,
    "git_dirty": False,
}


def _raw_insert_ms(path: Path, synchronous: str) -> float:
    with sqlite3.connect(path) as connection:
        connection.execute("PRAGMA journal_mode=WAL")
        connection.execute(f"PRAGMA synchronous={synchronous}")
        connection.execute("CREATE TABLE IF NOT EXISTS rows (id INTEGER PRIMARY KEY, value REAL)")
        connection.commit()
        elapsed = stopwatch()
        for index in range(RAW_ROWS):
            connection.execute("INSERT INTO rows (value) VALUES (?)", (float(index),))
            connection.commit()
        return elapsed() / RAW_ROWS * 1e3


def _worker(url: str, study_name: str, trials: int, queue: multiprocessing.Queue) -> None:
    """One process writing ``trials`` trials the way ``tuner worker`` does; puts (trial_s, report_s)."""
    import optuna
    from optuna.distributions import FloatDistribution
    from optuna.trial import TrialState, create_trial

    from tuner.orchestrate import open_storage
    from tuner.orchestrate._optuna_adapter import trial_for_sampling

    storage = open_storage(url, heartbeat_interval_s=5, grace_period_s=20)
    study = optuna.load_study(study_name=study_name, storage=storage)
    study_id = storage.get_study_id_from_name(study_name)  # public, as the workers ask it
    trial_s, report_s = 0.0, 0.0
    started = time.time()
    for number in range(trials):
        elapsed = stopwatch()
        # a new slot as a worker starts it: point and bookkeeping in the write that creates it
        lr = FloatDistribution(1e-4, 1.0, log=True)
        template = create_trial(
            state=TrialState.WAITING,
            params={"optimizer.lr": 0.01},
            distributions={"optimizer.lr": lr},
            system_attrs={"fixed_params": {"optimizer.lr": 0.01}},
            user_attrs={"slot": number, "attempt": 0, **_START_ATTRS, "run_dir": f"/runs/trial-{number:04d}"},
        )
        trial_id = storage.create_new_trial(study_id, template_trial=template)
        storage.record_heartbeat(trial_id)
        storage.set_trial_state_values(trial_id, state=TrialState.RUNNING)
        trial = trial_for_sampling(study, trial_id)  # what the workers use (tuner's Optuna adapter)
        trial.suggest_float("optimizer.lr", 1e-4, 1.0, log=True)  # already there: no write
        trial.set_user_attr("healthy", True)
        trial_s += elapsed()
        for step in range(REPORTS_PER_TRIAL):
            elapsed = stopwatch()
            trial.report(0.5 / (step + 1), step * 10)
            trial.set_user_attr("last_checkpoint_step", step * 10)
            report_s += elapsed()
        elapsed = stopwatch()
        for key, value in {"best_step": 40, "train_s": 1.0, "worker_rss_mb": 300.0}.items():
            trial.set_user_attr(key, value)
        study.tell(trial, 0.1)
        trial_s += elapsed()
    queue.put((trial_s, report_s, started, time.time()))


def _optuna_costs(folder: Path, processes: int) -> tuple[float, float, float]:
    """(ms per trial, ms per report, wall ms per trial of the whole group) with ``processes`` writers."""
    import optuna

    from tuner.orchestrate import open_storage

    url = f"sqlite:///{folder / f'optuna-{processes}.db'}"
    name = f"bench-{processes}"
    optuna.create_study(study_name=name, storage=open_storage(url))
    context = multiprocessing.get_context("spawn")
    queue: multiprocessing.Queue = context.Queue()
    workers = [
        context.Process(target=_worker, args=(url, name, TRIALS_PER_PROCESS, queue)) for _ in range(processes)
    ]
    for worker in workers:
        worker.start()
    sums = [queue.get() for _ in workers]
    for worker in workers:
        worker.join()
    wall = max(s[3] for s in sums) - min(s[2] for s in sums)  # the writing, not the start-up
    trials = TRIALS_PER_PROCESS * processes
    per_trial = statistics.mean(s[0] for s in sums) / TRIALS_PER_PROCESS * 1e3
    per_report = statistics.mean(s[1] for s in sums) / (TRIALS_PER_PROCESS * REPORTS_PER_TRIAL) * 1e3
    return per_trial, per_report, wall / trials * 1e3


def run() -> list[Result]:
    results: list[Result] = []
    with tempfile.TemporaryDirectory(prefix="tuner-bench-") as tmp:
        folder = Path(tmp)
        raw_normal = _raw_insert_ms(folder / "raw-normal.db", "NORMAL")
        raw_full = _raw_insert_ms(folder / "raw-full.db", "FULL")
        print(
            f"== {NAME}: SQLite in {tempfile.gettempdir()}; raw sqlite3 INSERT+COMMIT {raw_normal:.3f} ms "
            f"(WAL, synchronous=NORMAL), {raw_full:.3f} ms (WAL, synchronous=FULL)"
        )
        results += [
            Result(NAME, "raw sqlite3 insert+commit (NORMAL)", raw_normal, "{:.3f} ms"),
            Result(NAME, "raw sqlite3 insert+commit (FULL)", raw_full, "{:.3f} ms"),
        ]
        for processes in (1, 4):
            per_trial, per_report, wall_per_trial = _optuna_costs(folder, processes)
            print(
                f"  {processes} process(es): {per_trial:.1f} ms per trial "
                f"({per_trial / raw_normal:.0f}x a raw insert), {per_report:.2f} ms per report "
                f"({per_report / raw_normal:.0f}x); together {wall_per_trial:.1f} ms of wall per trial "
                f"(with its {REPORTS_PER_TRIAL} reports)  [{load()}]"
            )
            results += [
                Result(NAME, f"ms per trial, {processes} proc", per_trial, "{:.1f} ms"),
                Result(NAME, f"ms per report, {processes} proc", per_report, "{:.2f} ms"),
                Result(NAME, f"trial / raw insert, {processes} proc", per_trial / raw_normal, "{:.0f}x"),
                Result(NAME, f"report / raw insert, {processes} proc", per_report / raw_normal, "{:.0f}x"),
            ]
    return results


def main() -> None:
    report(NAME, run())


if __name__ == "__main__":
    main()
