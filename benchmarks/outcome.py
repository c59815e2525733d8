"""Does tuner deliver a better model than plain search, for the same compute?

Five workloads on generated data (``benchmarks/outcome_data.py``, ``outcome_workloads.py``;
studies in ``benchmarks/outcome_studies/``), each with validation at a user's size (1,000
examples; 100 on the small-data one) and a test split of 100,000 that no contender sees, so a
test metric is known to about +-0.001 and every paired difference is the procedures', not the
split's:

- ``teacher``: an MLP student of a fixed teacher network, 25% of its labels wrong (test error);
- ``imbalanced``: an MLP on 3 classes at 90/7/3% (test MCC, higher is better);
- ``mnist1d``: a 1-D CNN on MNIST-1D signals (test error);
- ``regression``: an MLP on a nonlinear function of 20 inputs plus noise (test mse against the
  noise-free function);
- ``small``: an MLP on 3 classes from 350 training and 100 validation examples, where trials tie
  on validation accuracy and the training set is fit within a few evals (test error).

Each study file states, before any run, the length a user would guess. On each workload, every
contender spends the same budget of training steps (12 trials at the guess), on the same search
space, with the same training engine: ``tuner`` (``tuner tune --budget N``, which finds the
length itself) and four baselines a user would run instead (Optuna TPE scored by the last eval;
TPE scored by the best eval; random search; TPE with ``HyperbandPruner``), each at the guess, at
a third of it and at 3x it (``benchmarks.outcome_contenders``). Each delivered checkpoint is
scored on the test split by the engine's ``Evaluator``. Every contender runs with seeds 1..N
(default 10: the study seed and the sampler's); the data never changes with the seed, so runs
are paired by seed.

Two runs at a time (``--jobs``), each process on one thread: about 70 minutes on 2 cores. A
stopped benchmark keeps its runs in ``results.json`` (with the code's commit and the machine)
and the same command with the same ``--output-dir`` continues it. An ablation runs tuner alone
with other ``tune`` words (``--contenders tuner --label NAME --tune-args "..."``) and is merged
with the baselines' run of the same machine by ``--from-results``.

``python -m benchmarks.outcome [--quick] [--workloads a,b] [--seeds N] [--output-dir DIR]``
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import shlex
import time
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from multiprocessing.queues import Queue
from pathlib import Path

from benchmarks._common import REPO_ROOT, Result, report
from benchmarks.outcome_contenders import Contender, baseline_contenders, parse_contender, tuner_contender
from benchmarks.outcome_runs import (
    WORKLOADS,
    Job,
    ResultsFile,
    RunRecord,
    commit,
    machine_identity,
    machine_text,
)
from benchmarks.outcome_runs import run_job as _run_job
from benchmarks.outcome_tables import NAME, ablations_table, procedures_table, table, targets

DEFAULT_SEEDS = 10


class CannotContinue(Exception):
    """An output folder whose results.json another commit or machine wrote."""


def run_all(
    workloads: list[str],
    seeds: int,
    contenders: list[Contender],
    root: Path,
    quick: bool = False,
    jobs: int = 2,
) -> list[RunRecord]:
    """Every (seed, workload, contender) run, ``jobs`` at a time, seed by seed; each finished
    run is written to ``root/results.json`` at once, and runs already there are not run again."""
    results_path = root / "results.json"
    here = ResultsFile(commit(), machine_identity(), [])
    if results_path.exists():
        before = ResultsFile.read(results_path)
        if (before.commit, before.machine) != (here.commit, here.machine):
            raise CannotContinue(
                f"{results_path} was written by commit {before.commit} on {machine_text(before.machine)}; "
                f"this is commit {here.commit} on {machine_text(here.machine)}: use another --output-dir"
            )
        here.runs = before.runs
    done = {r.key for r in here.runs}
    todo = [
        Job(w, c, s, quick, root)
        for s in range(1, seeds + 1)
        for w in workloads
        for c in contenders
        if (w, c.name, s) not in done
    ]
    root.mkdir(parents=True, exist_ok=True)
    _prepare_data(workloads)
    context = multiprocessing.get_context("spawn")
    cores: Queue[int] = context.Queue()
    usable = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    for index in range(jobs if usable else 0):
        cores.put(usable[index % len(usable)])
    with ProcessPoolExecutor(jobs, mp_context=context, initializer=_pin_to_core, initargs=(cores,)) as pool:
        running = {pool.submit(_run_job, job): job for job in todo[:jobs]}
        queue, failed = todo[jobs:], []
        while running:
            finished, _ = wait(running, return_when=FIRST_COMPLETED)
            for future in finished:
                job = running.pop(future)
                try:
                    record = future.result()
                except Exception as error:  # one run's failure: said, the others go on, a re-run retries it
                    failed.append(job)
                    print(f"{job.workload} seed {job.seed} {job.contender.name}: FAILED: {error}", flush=True)
                    record = None
                if queue:
                    next_job = queue.pop(0)
                    running[pool.submit(_run_job, next_job)] = next_job
                if record is None:
                    continue
                here.runs.append(record)
                here.write(results_path)
                print(
                    f"{record.workload} seed {record.seed} {record.contender}: test {record.test_metric:.4f} "
                    f"(validation {record.val_metric:.4f}), {record.steps} steps, {record.trials} trials, "
                    f"{record.cpu_s:.0f} CPU s; {record.notes}",
                    flush=True,
                )
    if failed:
        print(f"{len(failed)} run(s) failed (above); the same command runs them again", flush=True)
    return [r for r in here.runs if r.workload in workloads]


def _pin_to_core(cores: Queue[int]) -> None:
    """Each pool process (and every process it starts: tuner's workers) on a core of its own:
    tuner sizes its workers' threads by the cores it may use, and two runs' threads on one core
    would make both slow in a way that depends on the other (threads spinning in turn)."""
    if hasattr(os, "sched_setaffinity") and not cores.empty():
        os.sched_setaffinity(0, {cores.get()})


def _prepare_data(workloads: list[str]) -> None:
    """Generate the cached datasets once, here, before two runs would each start to."""
    from benchmarks import outcome_data

    if "imbalanced" in workloads:
        outcome_data.imbalanced_splits()
    if "mnist1d" in workloads:
        outcome_data.mnist1d_splits()


def print_tables(records: list[RunRecord], workloads: list[str], quick: bool = False) -> None:
    for workload in workloads:
        own = [r for r in records if r.workload == workload]
        if own:
            print("\n" + table(workload, own, quick))
    summary = procedures_table(records, workloads)
    if summary:
        print("\nEvery procedure against the best baseline at the guessed length, paired by seed:\n")
        print(summary)
    ablations = ablations_table(records, workloads)
    if ablations:
        print("\nEvery ablation against tune's default, paired by seed:\n")
        print(ablations)


def run() -> list[Result]:
    """``make bench``: the full benchmark (about 70 minutes here)."""
    root = REPO_ROOT / "runs" / "bench-outcome" / time.strftime("%Y%m%d-%H%M%S")
    contenders = [tuner_contender(), *baseline_contenders()]
    records = run_all(list(WORKLOADS), DEFAULT_SEEDS, contenders, root)
    print_tables(records, list(WORKLOADS))
    return targets(records, list(WORKLOADS))


def _contenders(args: argparse.Namespace, parser: argparse.ArgumentParser) -> list[Contender]:
    names = (
        args.contenders.split(",") if args.contenders else ["tuner", *(c.name for c in baseline_contenders())]
    )
    try:
        contenders = [parse_contender(name) for name in names]
    except ValueError as error:
        parser.error(str(error))
    if args.label or args.tune_args:
        if not args.label:
            parser.error("--tune-args needs --label (the ablation's name: its rows read tuner:LABEL)")
        ablation = tuner_contender(args.label, tuple(shlex.split(args.tune_args)))
        contenders = [ablation if c.is_tuner else c for c in contenders]
    return contenders


def _from_results(args: argparse.Namespace, parser: argparse.ArgumentParser) -> None:
    from benchmarks.outcome_merge import MachinesDiffer, merged_results

    try:
        merged, said = merged_results(args.from_results, args.across_machines)
    except (OSError, ValueError, KeyError, TypeError) as error:
        parser.exit(2, f"{parser.prog}: error: cannot read results: {error}\n")
    except MachinesDiffer as error:
        parser.exit(2, f"{parser.prog}: error: {error}\n")
    for line in said:
        print(line)
    workloads = [w for w in WORKLOADS if any(r.workload == w for r in merged)]
    print_tables(merged, workloads)
    report(NAME, targets(merged, workloads))


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.outcome", description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="tiny budgets, 1 seed: a smoke test")
    parser.add_argument("--workloads", default=",".join(WORKLOADS), help="comma-separated subset")
    parser.add_argument(
        "--seeds", type=int, default=None, help=f"seeds 1..N (default {DEFAULT_SEEDS}, --quick 1)"
    )
    parser.add_argument("--jobs", type=int, default=2, help="runs at a time, one thread each (default 2)")
    parser.add_argument(
        "--output-dir",
        type=Path,
        default=None,
        help="default runs/bench-outcome/<time>; the same one continues",
    )
    parser.add_argument("--contenders", default="", help="comma-separated subset, e.g. tuner,random@guess")
    parser.add_argument("--label", default="", help="an ablation's name: tuner's rows read tuner:LABEL")
    parser.add_argument(
        "--tune-args", default="", help='the ablation\'s `tune` words, e.g. --tune-args="--no-extra-round"'
    )
    parser.add_argument(
        "--from-results", nargs="+", type=Path, default=None, metavar="RESULTS_JSON",
        help="run nothing: print the tables of these results.json files merged (a later file's run of the "
        "same workload, contender and seed replaces an earlier one's); the files must come from one machine",
    )  # fmt: skip
    parser.add_argument(
        "--across-machines",
        action="store_true",
        help="with --from-results: merge files of different machines",
    )
    args = parser.parse_args()
    if args.from_results:
        _from_results(args, parser)
        return
    contenders = _contenders(args, parser)
    workloads = args.workloads.split(",")
    unknown = [w for w in workloads if w not in WORKLOADS]
    if unknown:
        parser.error(f"unknown workload(s) {unknown}; known: {', '.join(WORKLOADS)}")
    if args.jobs < 1:
        parser.error("--jobs must be at least 1")
    seeds = args.seeds or (1 if args.quick else DEFAULT_SEEDS)
    root = args.output_dir or REPO_ROOT / "runs" / "bench-outcome" / time.strftime("%Y%m%d-%H%M%S")
    try:
        records = run_all(workloads, seeds, contenders, root, args.quick, args.jobs)
    except CannotContinue as error:
        parser.exit(2, f"{parser.prog}: error: {error}\n")
    print_tables(records, workloads, args.quick)
    print(f"\nraw results: {root / 'results.json'}")
    report(NAME, targets(records, workloads))


if __name__ == "__main__":
    main()
