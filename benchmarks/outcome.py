"""Does tuner's procedure deliver a better model than plain search, for the same compute?

Four workloads of our own (``benchmarks/outcome_workloads.py``, studies in
``benchmarks/outcome_studies/``), each with a test split that no contender sees. On each, every
contender spends at most :data:`BUDGETS` training steps (every phase counted) on the same search
space, with the same training engine, on 2 CPU workers of one thread each:

- ``tuner``: ``tuner tune --budget N --workers 2`` (the template's ``max_train_steps`` removed:
  sweep-lr finds it, within tune's 20% share; when no LR fits there, tune trains at the sweep's
  cap). tune splits the budget itself (round 1's trials, a search on the report's suggestions,
  round 2's seeds, the round decided on round 2's report) and delivers the model by ``tuner
  report``'s rule: of the full-length rounds, the point with the best mean over its seeds (runs
  at one length pooled across rounds), that point's best seed run at its best step. (Before
  ``tune`` existed, the benchmark ran sweep-lr, ``run-round --round 1 --trials N`` with N worked
  out by hand from the budget, and round 2: the README's first table was measured that way.)
- ``tpe-last``: an Optuna TPE script, every trial at the template's ``max_train_steps`` (the
  user's guess, stated in each study file), Optuna told the last eval, ``budget // guess``
  trials. Delivered: the best trial by last eval, its final weights.
- ``tpe-best``: the same script told the best eval (a user who keeps best-step checkpoints
  also guides TPE by them). Delivered: the best trial by best eval, at its best step.
- ``random``: the same with Optuna's RandomSampler, scored by best eval.

Every delivered model is loaded from its checkpoint (``weights_only``) into the workload built
with ``split=test`` and scored by the engine's ``Evaluator``, so the test metric is computed
exactly as the validation metric in training. Each contender runs with seeds 1..5 (the study
``seed``, and the samplers' seeds); the data split never changes. The table gives each
contender's mean test metric with its 95% t-interval over runs, mean steps used, mean CPU seconds
(user + system of every child process), and tuner minus the best baseline (the baseline with the
best mean), paired by seed, with its 95% interval.

The budgets (fixed before any change to the procedure; measured on sweeps of seed 0): on the
digits MLPs a sweep costs about 5,700-5,900 steps (4 LRs; one fits at 1,200-1,425 steps) and
round 2 at top_k 3 about 3,600-4,300: 16,000 steps leave round 1 about 20 trials and give the
baselines 16 trials of the guessed 1,000. ``char_lm`` (sweep ~950 steps, fits at 150) and
``longer_cnn`` (sweep ~1,350, fits at 150) get 6 trials of their guess (2,400 and 3,600 steps):
their round 1 then has 30-60 trials of 30 steps, each a process of its own (~3 CPU s to start
here), so that the full run (4 workloads x 4 contenders x 5 seeds) fits about 75 minutes on 2
cores. ``--quick``: the same code on tiny studies, one seed, 1 worker (a smoke test).

``python -m benchmarks.outcome [--quick] [--workloads a,b] [--seeds N] [--output-dir DIR]``;
``--from-results A.json B.json`` prints the tables of earlier runs merged (a tuner-only run after
a change beside the baselines' run), running nothing. Each ``results.json`` says which machine ran
it (``machine_identity``): a contender is repeatable on one machine but its floating-point path,
and with it which checkpoint each run's selection lands on, changes with the CPU (tuner on
longer_cnn, same code and seeds: 0.0261 on one machine, 0.0244 on another), so files of two
machines are merged only with ``--across-machines``, and the tables then say so.
"""

from __future__ import annotations

import argparse
import math
import shlex
import statistics
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import yaml

from benchmarks._common import REPO_ROOT, Result, report
from benchmarks.outcome_contenders import WORKERS, Delivered, PlainSearch, better, run_plain, run_tuner

NAME = "outcome"
STUDIES = REPO_ROOT / "benchmarks" / "outcome_studies"
WORKLOADS_FILE = REPO_ROOT / "benchmarks" / "outcome_workloads.py"
#: Training steps each contender may spend on one run of a workload, all phases counted.
BUDGETS = {"noisy_digits": 16_000, "imbalanced": 16_000, "char_lm": 2_400, "longer_cnn": 3_600}
QUICK_BUDGET = 200
CONTENDERS = ("tuner", "tpe-last", "tpe-best", "random")
PLAIN = {
    "tpe-last": PlainSearch("tpe", "last"),
    "tpe-best": PlainSearch("tpe", "best"),
    "random": PlainSearch("random", "best"),
}


def study_document(workload: str, seed: int, quick: bool) -> dict[str, Any]:
    """The workload's study template for one run: its seed, the workload file by absolute path."""
    document = yaml.safe_load((STUDIES / f"{workload}.yaml").read_text())
    document["seed"] = seed
    document["name"] = f"{document['name']}-s{seed}"
    document["workload"]["name"] = f"{WORKLOADS_FILE}:{workload}"
    if quick:  # tiny lengths, 3 LRs, round 2 of one point: the same commands in seconds
        document["training"].update(max_train_steps=40, eval_every=10, log_every=10)
        document["sweep_lr"].update(grid=document["sweep_lr"]["grid"][:3], max_steps=40)
        document["rounds"] = {"round1": {"length_fraction": 0.5}, "round2": {"top_k": 1, "seeds": 1}}
    return document


def delivered_metric(delivered: Delivered, split: str = "test") -> float:
    """The delivered weights scored on the test split by the engine's Evaluator (``split="tune"``:
    on the validation split, where it must give what training recorded)."""
    from tuner.spec import load_study
    from tuner.train import Evaluator, build_workload, load_checkpoint
    from tuner.train.run_parts import cross_entropy_per_item

    loaded = load_study(delivered.run_dir / "config.yaml", [f"workload.split={split}"])
    spec = loaded.spec
    workload = build_workload(spec, loaded.base_dir, init_seed=0)
    workload.model.load_state_dict(load_checkpoint(delivered.checkpoint)["model"])
    evaluator = Evaluator(
        {"test": workload.eval_data},
        loss_fn=workload.loss_fn or cross_entropy_per_item,
        metrics=workload.metrics,
        num_classes=workload.num_classes,
        batch_size=spec.training.resolved_eval_batch_size,
    )
    metrics, _ = evaluator.run(workload.model)
    return metrics["test/" + spec.objective.metric.split("/", 1)[1]]


@dataclass
class RunRecord:
    """One contender's run on one workload and seed."""

    workload: str
    contender: str
    seed: int
    budget: int
    test_metric: float
    steps: int
    trials: int
    cpu_s: float
    wall_s: float
    checkpoint: str
    notes: str


def run_one(
    workload: str, contender: str, seed: int, quick: bool, root: Path, tune_args: tuple[str, ...] = ()
) -> RunRecord:
    document = study_document(workload, seed, quick)
    budget = QUICK_BUDGET if quick else BUDGETS[workload]
    folder = root / workload / f"seed-{seed}" / contender
    folder.mkdir(parents=True, exist_ok=False)
    workers = 1 if quick else WORKERS  # --quick: fewer process starts (~3 CPU s each here)
    if contender == "tuner":
        # --quick keeps the study's max_train_steps (--no-sweep): within a tiny budget nothing fits
        # the noisy labels, the rounds would train at the sweep's 10-step cap and round 1 would be
        # ~35 trials of 5 steps (about a CPU minute here); the sweep path is in tests/cli_tests/test_tune.py
        delivered = run_tuner(document, folder, budget, workers, sweep=not quick, extra=tune_args)
    else:
        delivered = run_plain(PLAIN[contender], document, folder, budget, seed, workers)
    return RunRecord(
        workload, contender, seed, budget, delivered_metric(delivered), delivered.steps, delivered.trials,
        delivered.cpu_s, delivered.wall_s, str(delivered.checkpoint), delivered.notes,
    )  # fmt: skip


@dataclass(frozen=True)
class Interval:
    mean: float
    low: float
    high: float

    def __str__(self) -> str:
        if math.isnan(self.low):
            return f"{self.mean:.4f}"
        return f"{self.mean:.4f} [{self.low:.4f}, {self.high:.4f}]"


def t_interval(values: list[float]) -> Interval:
    """Mean and 95% Student-t interval (no interval from one value)."""
    from scipy import stats

    mean = statistics.fmean(values)
    if len(values) < 2:
        return Interval(mean, math.nan, math.nan)
    half = stats.t.ppf(0.975, len(values) - 1) * statistics.stdev(values) / math.sqrt(len(values))
    return Interval(mean, mean - half, mean + half)


def direction_of(workload: str) -> str:
    return yaml.safe_load((STUDIES / f"{workload}.yaml").read_text())["objective"]["direction"]


@dataclass(frozen=True)
class Verdict:
    """tuner against the best baseline (best mean) on one workload, paired by seed."""

    baseline: str
    difference: Interval  # tuner minus baseline
    at_least_as_good: bool


def verdict(workload: str, records: list[RunRecord]) -> Verdict | None:
    by = {c: {r.seed: r.test_metric for r in records if r.contender == c} for c in CONTENDERS}
    if not by["tuner"] or not all(by[c] for c in PLAIN):
        return None
    is_better = better(direction_of(workload))
    baseline = None
    for name in PLAIN:
        if baseline is None or is_better(
            statistics.fmean(by[name].values()), statistics.fmean(by[baseline].values())
        ):
            baseline = name
    assert baseline is not None
    seeds = sorted(set(by["tuner"]) & set(by[baseline]))
    difference = t_interval([by["tuner"][s] - by[baseline][s] for s in seeds])
    tuner_mean, base_mean = statistics.fmean(by["tuner"].values()), statistics.fmean(by[baseline].values())
    return Verdict(baseline, difference, not is_better(base_mean, tuner_mean))


def table(workload: str, records: list[RunRecord]) -> str:
    """One workload's markdown table, ready for the README."""
    metric = yaml.safe_load((STUDIES / f"{workload}.yaml").read_text())["objective"]["metric"]
    test = "test/" + metric.split("/", 1)[1]
    sense = "lower" if direction_of(workload) == "minimize" else "higher"
    budget = records[0].budget if records else 0
    lines = [
        f"**{workload}**: {test} ({sense} is better), budget {budget} steps per run, "
        f"{len({r.seed for r in records})} seed(s)",
        "",
        f"| contender | mean {test} [95% CI] | runs | mean steps | mean CPU s |",
        "| --- | --- | --- | --- | --- |",
    ]
    for contender in CONTENDERS:
        own = [r for r in records if r.contender == contender]
        if own:
            steps, cpu = statistics.fmean(r.steps for r in own), statistics.fmean(r.cpu_s for r in own)
            metric_interval = t_interval([r.test_metric for r in own])
            lines.append(f"| {contender} | {metric_interval} | {len(own)} | {steps:.0f} | {cpu:.0f} |")
    found = verdict(workload, records)
    if found:
        lines += ["", f"tuner minus best baseline ({found.baseline}), paired by seed: {found.difference}"]
    return "\n".join(lines)


def machine_identity() -> dict[str, str]:
    """What decides a run's floating-point path: the CPU (model and instruction-set flags, which
    pick torch's kernels), torch's version; and the host and its boot, since two VMs of one
    image can share a host name and a CPU model but not the hardware under them (a reboot counts
    as another machine: the cautious side)."""
    import hashlib
    import platform

    import torch

    found: dict[str, str] = {}
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            found.setdefault(key.strip(), value.strip())  # the first CPU's
    except OSError:  # not Linux: what platform says is what is known
        pass
    cpu = found.get("model name") or platform.processor() or platform.machine()
    flags = found.get("flags", "")
    try:
        boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()[:8]
    except OSError:
        boot = "unknown"
    return {
        "host": f"{platform.node()} boot {boot}",
        "cpu": cpu,
        "cpu_flags": hashlib.sha256(" ".join(sorted(flags.split())).encode()).hexdigest()[:12],
        "torch": torch.__version__,
    }


def write_json(path: Path, records: list[RunRecord], machine: dict[str, str]) -> None:
    from tuner._atomic import atomic_write_json

    atomic_write_json(path, {"machine": machine, "runs": [asdict(r) for r in records]}, durable=False)


class MachinesDiffer(Exception):
    """Results files of two machines (or of a file that does not say) asked to merge."""


def merged_results(paths: list[Path], across_machines: bool = False) -> list[RunRecord]:
    """The runs of several ``results.json`` files; a later file's run of the same workload,
    contender and seed replaces an earlier one's. Files of two machines, or a file that does not
    say which machine ran it (written before results.json recorded it), raise ``MachinesDiffer``
    unless ``across_machines``."""
    import json

    runs: dict[tuple[str, str, int], RunRecord] = {}
    machines: dict[str, Path] = {}  # each machine, and the first file it ran
    unknown: list[Path] = []
    for path in paths:
        document = json.loads(path.read_text())
        if document.get("machine"):
            machines.setdefault(_machine_text(document["machine"]), path)
        else:
            unknown.append(path)
        for run in document["runs"]:
            record = RunRecord(**run)
            runs[(record.workload, record.contender, record.seed)] = record
    why = "a contender repeats on one machine only, so a merged table would compare floating-point "
    why += "paths, not procedures: run them on one machine, or pass --across-machines"
    if len(paths) > 1 and not across_machines:
        if unknown:
            raise MachinesDiffer(f"{unknown[0]} does not say which machine ran it; {why}")
        if len(machines) > 1:
            (first, a), (second, b) = list(machines.items())[:2]
            raise MachinesDiffer(f"{a} ran on {first}, {b} on {second}; {why}")
    return list(runs.values())


def _machine_text(machine: dict[str, str]) -> str:
    flags, torch, host = machine["cpu_flags"], machine["torch"], machine["host"]
    return f"{machine['cpu']} (flags {flags}, torch {torch}, host {host})"


def run_all(
    workloads: list[str],
    seeds: int,
    quick: bool,
    root: Path,
    contenders: tuple[str, ...] = CONTENDERS,
    tune_args: tuple[str, ...] = (),
) -> list[RunRecord]:
    records: list[RunRecord] = []
    results = root / "results.json"
    machine = machine_identity()
    for workload in workloads:
        for seed in range(1, seeds + 1):
            for contender in contenders:
                record = run_one(workload, contender, seed, quick, root, tune_args)
                records.append(record)
                # after every run: a stopped benchmark keeps its results
                write_json(results, records, machine)
                print(
                    f"{workload} seed {seed} {contender}: test {record.test_metric:.4f}, "
                    f"{record.steps} steps, {record.cpu_s:.0f} CPU s, {record.wall_s:.0f} s {record.notes}",
                    flush=True,
                )
    for workload in workloads:
        print("\n" + table(workload, [r for r in records if r.workload == workload]))
    print(f"\nraw results: {results}")
    return records


def results(records: list[RunRecord], workloads: list[str]) -> list[Result]:
    """The issue's target as PASS/FAIL: tuner's mean at least as good as the best baseline's on
    every workload, and better on average (the mean paired difference, signed as "better")."""
    out = []
    gains = []
    for workload in workloads:
        found = verdict(workload, [r for r in records if r.workload == workload])
        if found is None:
            continue
        sign = -1 if direction_of(workload) == "minimize" else 1
        gains.append(sign * found.difference.mean)
        out.append(
            Result(NAME, f"{workload}: tuner - {found.baseline} (test)", found.difference.mean, "{:+.4f}",
                   "tuner at least as good", found.at_least_as_good)
        )  # fmt: skip
    if gains:
        out.append(
            Result(
                NAME,
                "mean gain over workloads",
                statistics.fmean(gains),
                "{:+.4f}",
                "> 0",
                statistics.fmean(gains) > 0,
            )
        )
    return out


def run() -> list[Result]:
    """``make bench``: the full benchmark (about 75 minutes here)."""
    workloads = list(BUDGETS)
    root = REPO_ROOT / "runs" / "bench-outcome" / time.strftime("%Y%m%d-%H%M%S")
    return results(run_all(workloads, 5, False, root), workloads)


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.outcome", description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="tiny budgets, 1 seed: a smoke test")
    parser.add_argument("--workloads", default=",".join(BUDGETS), help="comma-separated subset")
    parser.add_argument("--seeds", type=int, default=None, help="seeds 1..N (default 5, --quick 1)")
    parser.add_argument("--output-dir", type=Path, default=None, help="default runs/bench-outcome/<time>")
    parser.add_argument(
        "--contenders",
        default=",".join(CONTENDERS),
        help="comma-separated subset (e.g. tuner alone, after a change to the procedure; its table then "
        "has no baseline to compare with: merge results.json files for that)",
    )
    parser.add_argument(
        "--from-results",
        nargs="+",
        type=Path,
        default=None,
        metavar="RESULTS_JSON",
        help="run nothing: print the tables of these results.json files merged (e.g. a tuner-only run "
        "after a change with the baselines' run; a later file's run of the same workload, contender "
        "and seed replaces an earlier one's); the files must come from one machine",
    )
    parser.add_argument(
        "--across-machines",
        action="store_true",
        help="with --from-results: merge files of different machines (the output says so when they differ)",
    )
    parser.add_argument(
        "--tune-args",
        default="",
        help='extra words for tuner\'s `tune` command (an ablation, e.g. "--no-apply-suggestions"); '
        "recorded in results.json",
    )
    args = parser.parse_args()
    if args.from_results:
        try:
            try:
                merged = merged_results(args.from_results)
            except MachinesDiffer:
                if not args.across_machines:
                    raise
                merged = merged_results(args.from_results, across_machines=True)
                print(
                    "(runs of more than one machine merged: a difference between contenders there is "
                    "partly the machines')"
                )
        except (OSError, ValueError, KeyError, TypeError) as error:
            parser.exit(2, f"{parser.prog}: error: cannot read results: {error}\n")
        except MachinesDiffer as error:
            parser.exit(2, f"{parser.prog}: error: {error}\n")
        workloads = [w for w in BUDGETS if any(r.workload == w for r in merged)]
        for workload in workloads:
            print("\n" + table(workload, [r for r in merged if r.workload == workload]))
        report(NAME, results(merged, workloads))
        return
    contenders = tuple(args.contenders.split(","))
    if not set(contenders) <= set(CONTENDERS):
        parser.error(
            f"unknown contender(s) {sorted(set(contenders) - set(CONTENDERS))}; "
            f"known: {', '.join(CONTENDERS)}"
        )
    workloads = args.workloads.split(",")
    unknown = [w for w in workloads if w not in BUDGETS]
    if unknown:
        parser.error(f"unknown workload(s) {unknown}; known: {', '.join(BUDGETS)}")
    seeds = args.seeds or (1 if args.quick else 5)
    root = args.output_dir or REPO_ROOT / "runs" / "bench-outcome" / time.strftime("%Y%m%d-%H%M%S")
    tune_args = tuple(shlex.split(args.tune_args))
    report(NAME, results(run_all(workloads, seeds, args.quick, root, contenders, tune_args), workloads))


if __name__ == "__main__":
    main()
