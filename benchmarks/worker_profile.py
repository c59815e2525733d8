"""Where a worker's time goes: cProfile of one ``tuner worker``, its start-up and its claim-to-tell cycles.

Which calls a worker's start-up and each trial's claim-to-tell cycle cost. This runs
``tuner worker`` under ``python -m cProfile`` on round 1 of a study of :data:`TRIALS` trials of
``busy_workload.py`` (10 steps spinning 0.2 s, one eval, one checkpoint: what
``benchmarks.orchestration`` times), beside ``run-round``'s own worker (SQLite, as there), then
reads the profile: each part's cumulative time (a part includes what it calls), divided by the
trials the profiled worker ran. The trials' own processes are forked from the worker and end with
``os._exit``, so their training is not in the profile: what is left is the worker's own work and
its waiting on them.

cProfile's clock is wall time, so a storage call's figure includes the database's commit
(SQLite's fsync); and it counts every Python call, which makes Python-heavy parts read about 2-3x
their cost without it (a claim: 13.6 ms of CPU measured without it, ~40 ms here). Read the table
for shares and for which calls cost what; ``benchmarks.orchestration`` gives the unprofiled
totals. Not a target, so every figure is reported without PASS/FAIL. Run alone:
``python -m benchmarks.worker_profile [--trials N] [--keep DIR]``.
"""

from __future__ import annotations

import argparse
import os
import pstats
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from benchmarks._common import REPO_ROOT, Result, busy_study, report

NAME = "worker_profile"
TRIALS = 60
BUSY_S = 0.2
STEPS = 10


#: (file path suffix, function name) of a profiled function; "~" is the file of a built-in
Function = tuple[str, str]


@dataclass(frozen=True)
class Part:
    """One part of the worker's work: the function whose cumulative time it is."""

    label: str
    function: Function


def _in(file: str, function: str) -> Function:
    """A function of a module of ``tuner/`` (``file`` relative to it)."""
    return f"tuner/{file}", function


def _builtin(name: str) -> Function:
    return "~", name


#: The start-up, before the first claim: what a worker imports and opens once.
START_UP = (
    Part("importing tuner's command line (typer, rich, tuner.cli)", _in("cli/app.py", "<module>")),
    Part(
        "opening the storage (SQLAlchemy engine, Optuna's schema check)",
        _in("orchestrate/worker.py", "open_worker_storage"),
    ),
    Part(
        "importing the engine once, for every trial to fork (torch, torch._dynamo, tuner.train)",
        _in("orchestrate/trial_process.py", "warm_up"),
    ),
)
#: A trial's claim-to-tell cycle in the worker; an indented row is inside the row above it.
CYCLE = (
    Part("  the claim", _in("orchestrate/claim.py", "claim")),
    Part(
        "    the new trial with its attributes (one transaction)", _in("orchestrate/claim.py", "_claim_new")
    ),
    Part("      the start (compare-and-set to RUNNING, the owner)", _in("orchestrate/claim.py", "_start")),
    Part("  forking the trial's process", _builtin("<built-in method posix.fork>")),
    Part(
        "  the trial's progress in the storage (started, evals)", _in("orchestrate/record.py", "on_message")
    ),
    Part("  the result (its attributes, then its state)", _in("orchestrate/record.py", "record")),
    Part("  joining the ended process", _in("orchestrate/supervise.py", "_join")),
    Part("  the worker's status file (atomic rewrites)", _in("orchestrate/worker.py", "_write_status")),
)
SERVE = _in("orchestrate/worker.py", "_serve")  # the worker's loop: every claim and trial
WARM = _in("orchestrate/worker.py", "_warm")  # inside the loop, before the first fork: start-up
WAIT = _builtin("<method 'poll' of 'select.poll' objects>")  # the trial's process running


def profile_worker(folder: Path, trials: int = TRIALS) -> tuple[Path, int]:
    """Round 1 of ``trials`` trials served by ``run-round``'s worker and one ``tuner worker`` under
    cProfile; the profile's path and the trials the profiled worker ran."""
    import optuna

    study = busy_study(folder, "bench-worker-profile", BUSY_S, STEPS, trials)
    output, profile = folder / "runs", folder / "worker.prof"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    worker = subprocess.Popen(
        [sys.executable, "-m", "cProfile", "-o", str(profile), "-m", "tuner", "worker", str(study),
         "--phase", "round-1", "--wait-for-phase", "300", "--output-dir", str(output), "--quiet",
         "--label", "profiled"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, cwd=REPO_ROOT, env=env,
    )  # fmt: skip
    try:
        done = subprocess.run(
            [sys.executable, "-m", "tuner", "run-round", str(study), "--round", "1", "--workers", "1",
             "--no-progress", "--output-dir", str(output)],
            capture_output=True, text=True, cwd=REPO_ROOT, env=env, check=False, timeout=900,
        )  # fmt: skip
        if done.returncode != 0:
            raise RuntimeError(f"tuner run-round failed: {done.stderr.strip().splitlines()[-1:]}")
        _, err = worker.communicate(timeout=300)
    finally:
        if worker.poll() is None:
            worker.kill()
    if worker.returncode != 0:
        raise RuntimeError(f"the profiled worker failed: {err.strip().splitlines()[-1:]}")
    url = f"sqlite:///{output / 'bench-worker-profile' / 'study.db'}"
    ran = optuna.load_study(study_name="bench-worker-profile/round-1", storage=url).trials
    return profile, sum(t.user_attrs.get("worker") == "profiled" for t in ran)


def _entries(stats: pstats.Stats) -> Iterator[tuple[str, str, int, float]]:
    """Every profiled function: (its file, "/"-separated, or "~" for a built-in; its name; its
    calls; its cumulative seconds)."""
    for (path, _line, name), (_cc, calls, _tt, cumulative, _callers) in stats.stats.items():  # type: ignore[attr-defined]
        yield path.replace(os.sep, "/"), name, calls, cumulative


def cumulative_s(stats: pstats.Stats, function: Function) -> float:
    """The cumulative seconds of ``function`` in ``stats`` (summed over files that end alike)."""
    suffix, wanted = function
    return sum(
        cumulative
        for path, name, _calls, cumulative in _entries(stats)
        if name == wanted and path.endswith(suffix)
    )


STORAGE_ROWS = 8
#: where the storage calls are: Optuna's RDBStorage, and tuner's one adapter of Optuna's private
#: calls (several attributes in one transaction: ``set_user_attrs``)
STORAGE_MODULES = {
    "optuna/storages/_rdb/storage.py": "Optuna's RDBStorage",
    "tuner/orchestrate/_optuna_adapter.py": "tuner's Optuna adapter",
}


def storage_calls(stats: pstats.Stats) -> list[tuple[str, float, int]]:
    """The public storage calls the worker made: (``owner.name``, cumulative seconds, calls), the
    costliest first (start-up's included: opening the storage makes a few)."""
    found: dict[str, tuple[float, int]] = {}
    for path, name, calls, cumulative in _entries(stats):
        owner = next((o for m, o in STORAGE_MODULES.items() if path.endswith(m)), None)
        if owner is not None and not name.startswith("_"):
            seconds, count = found.get(f"{owner}.{name}", (0.0, 0))
            found[f"{owner}.{name}"] = (seconds + cumulative, count + calls)
    return sorted(((n, s, c) for n, (s, c) in found.items()), key=lambda row: -row[1])


def results_of(profile: Path, trials: int) -> list[Result]:
    stats = pstats.Stats(str(profile))
    out = [
        Result(NAME, f"start-up: {p.label}", cumulative_s(stats, p.function), "{:.2f} s") for p in START_UP
    ]
    own = cumulative_s(stats, SERVE) - cumulative_s(stats, WARM) - cumulative_s(stats, WAIT)
    out += [
        Result(NAME, "per trial: waiting on the trial's process (its training: not profiled)",
               1000 * cumulative_s(stats, WAIT) / trials, "{:.1f} ms"),
        Result(NAME, "per trial: the worker's own work (its loop, the wait and start-up taken out)",
               1000 * own / trials, "{:.1f} ms"),
    ]  # fmt: skip
    out += [
        Result(NAME, f"per trial: {p.label}", 1000 * cumulative_s(stats, p.function) / trials, "{:.1f} ms")
        for p in CYCLE
    ]
    for name, seconds, calls in storage_calls(stats)[:STORAGE_ROWS]:
        out.append(
            Result(NAME, f"per trial: {name}, {calls / trials:.1f} calls", 1000 * seconds / trials,
                   "{:.1f} ms")
        )  # fmt: skip
    out.append(Result(NAME, "trials the profiled worker ran", trials, "{:.0f}"))
    return out


def run(trials: int = TRIALS, keep: Path | None = None) -> list[Result]:
    with tempfile.TemporaryDirectory(prefix="tuner-worker-profile-") as scratch:
        folder = keep or Path(scratch)
        folder.mkdir(parents=True, exist_ok=True)
        profile, ran = profile_worker(folder, trials)
        if ran == 0:
            raise RuntimeError("the profiled worker ran no trial (run-round's worker took them all)")
        return results_of(profile, ran)


def main() -> None:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.worker_profile", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--trials", type=int, default=TRIALS, help=f"round 1's trials (default {TRIALS})")
    parser.add_argument("--keep", type=Path, default=None, help="keep the study, runs and worker.prof here")
    args = parser.parse_args()
    report(NAME, run(args.trials, args.keep))


if __name__ == "__main__":
    main()
