"""One run of the outcome benchmark (a contender on a workload and seed), and the ``results.json``
that keeps every run with the code's commit and the machine that ran it."""

from __future__ import annotations

import json
import shutil
import subprocess
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

import yaml

from benchmarks._common import REPO_ROOT
from benchmarks.outcome_contenders import Contender, delivered_metric, run_contender

STUDIES = REPO_ROOT / "benchmarks" / "outcome_studies"
WORKLOADS_FILE = REPO_ROOT / "benchmarks" / "outcome_workloads.py"
WORKLOADS = ("teacher", "imbalanced", "mnist1d", "regression", "small")
#: the budget of every run: this many trials at the workload's guessed length
TRIALS_AT_GUESS = 12
#: --quick: a guess of this many steps, evals every 10, and a budget of 6 such trials
QUICK_GUESS = 30
QUICK_TRIALS_AT_GUESS = 6


def template(workload: str) -> dict[str, Any]:
    document = yaml.safe_load((STUDIES / f"{workload}.yaml").read_text())
    assert isinstance(document, dict)
    return document


def guessed_length(workload: str, quick: bool = False) -> int:
    """The length a user would guess, stated in the study file before any run."""
    return QUICK_GUESS if quick else int(template(workload)["training"]["max_train_steps"])


def budget_of(workload: str, quick: bool = False) -> int:
    return guessed_length(workload, quick) * (QUICK_TRIALS_AT_GUESS if quick else TRIALS_AT_GUESS)


def study_document(workload: str, seed: int, quick: bool) -> dict[str, Any]:
    """The workload's study file for one run: its seed, the workload file by absolute path."""
    document = template(workload)
    document["seed"] = seed
    document["name"] = f"{document['name']}-s{seed}"
    document["workload"]["name"] = f"{WORKLOADS_FILE}:{workload}"
    if quick:  # tiny lengths, 3 LRs, round 2 of one point: the same code paths in seconds
        document["training"].update(max_train_steps=QUICK_GUESS, eval_every=10, log_every=10)
        document["sweep_lr"].update(grid=document["sweep_lr"]["grid"][:3], max_steps=3 * QUICK_GUESS)
        document["rounds"] = {"round1": {"length_fraction": 0.5}, "round2": {"top_k": 1, "seeds": 1}}
    return document


@dataclass
class RunRecord:
    """One contender's run on one workload and seed, scored on the test split."""

    workload: str
    contender: str
    seed: int
    budget: int
    test_metric: float
    val_metric: float  # the delivered checkpoint on the validation split (what selection saw)
    steps: int
    trials: int
    cpu_s: float
    wall_s: float
    checkpoint: str
    notes: str

    @property
    def key(self) -> tuple[str, str, int]:
        return (self.workload, self.contender, self.seed)


@dataclass(frozen=True)
class Job:
    workload: str
    contender: Contender
    seed: int
    quick: bool
    root: Path

    @property
    def folder(self) -> Path:
        return self.root / self.workload / f"seed-{self.seed}" / self.contender.name.replace(":", "-")


def run_job(job: Job) -> RunRecord:
    """Run one job (in a pool process) and score what it delivered on both splits."""
    import torch

    torch.set_num_threads(1)
    if job.folder.exists():  # an interrupted run of this job: start it again
        shutil.rmtree(job.folder)
    document = study_document(job.workload, job.seed, job.quick)
    if job.quick and job.contender.is_tuner:  # within a tiny budget nothing fits: no sweep
        job = Job(job.workload, _with_args(job.contender, "--no-sweep"), job.seed, job.quick, job.root)
    budget = budget_of(job.workload, job.quick)
    delivered, cpu, wall = run_contender(
        job.contender, document, guessed_length(job.workload, job.quick), budget, job.folder
    )
    return RunRecord(
        job.workload, job.contender.name, job.seed, budget, delivered_metric(delivered, "test"),
        delivered_metric(delivered, "tune"), delivered.steps, delivered.trials, cpu, wall,
        str(delivered.checkpoint), delivered.notes,
    )  # fmt: skip


def _with_args(contender: Contender, *words: str) -> Contender:
    return Contender(contender.name, contender.baseline, contender.length, (*contender.tune_args, *words))


def commit() -> str:
    """The code's commit, ``+changes`` when the work tree differs from it (or "unknown")."""
    try:
        head = subprocess.run(
            ["git", "rev-parse", "--short=12", "HEAD"],
            capture_output=True,
            text=True,
            cwd=REPO_ROOT,
            check=True,
        ).stdout.strip()
        dirty = subprocess.run(["git", "diff", "--quiet", "HEAD", "--", "tuner", "benchmarks"], cwd=REPO_ROOT)
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return head + ("+changes" if dirty.returncode else "")


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


@dataclass
class ResultsFile:
    """``results.json``: the runs, with the commit and machine that ran them."""

    commit: str
    machine: dict[str, str]
    runs: list[RunRecord]

    def write(self, path: Path) -> None:
        from tuner._atomic import atomic_write_json

        document = {"commit": self.commit, "machine": self.machine, "runs": [asdict(r) for r in self.runs]}
        atomic_write_json(path, document, durable=False)

    @classmethod
    def read(cls, path: Path) -> ResultsFile:
        """Raises OSError, ValueError, KeyError or TypeError for a file that is not one."""
        document = json.loads(path.read_text())
        names = {f.name for f in fields(RunRecord)}
        runs = [RunRecord(**{k: v for k, v in run.items() if k in names}) for run in document["runs"]]
        return cls(str(document.get("commit") or "unknown"), dict(document.get("machine") or {}), runs)


def machine_text(machine: dict[str, str]) -> str:
    if not machine:
        return "an unrecorded machine"
    flags, torch, host = machine["cpu_flags"], machine["torch"], machine["host"]
    return f"{machine['cpu']} (flags {flags}, torch {torch}, host {host})"
