"""Running an example of ``examples/`` as a user would: a copy of its folder, ``tuner tune`` and
``tuner report --json`` through the CLI, then its delivered model in plain PyTorch.

Offline: ``HF_HUB_OFFLINE`` is set for every command, so a model or tokenizer that reached for
the Hugging Face Hub would fail the test rather than download.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path
from subprocess import PIPE
from types import ModuleType
from typing import Any

import torch
import yaml

from tests._processes import finish, run, spawn
from tuner.workloads import WorkloadContext

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
OFFLINE = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}


@dataclass(frozen=True)
class Tuned:
    """An example tuned in ``folder``: what ``tune`` printed, the report's JSON, and the
    delivered model's checkpoint with the metrics of the eval it was saved at."""

    folder: Path
    tune_output: str
    report: dict[str, Any]

    @property
    def delivered(self) -> dict[str, Any]:
        return self.report["delivered_model"]

    @property
    def checkpoint(self) -> Path:
        return self.folder / self.delivered["checkpoint"]

    def checkpoint_metrics(self) -> dict[str, float]:
        """The metrics of the eval the delivered checkpoint was saved at (its ``last_eval``)."""
        return torch.load(self.checkpoint, weights_only=True)["last_eval"]

    def workload(self) -> Any:
        """The example's workload built as the delivered run built it: the study file's options
        with the delivered point's ``workload.*`` values, the study's seed (its data and split)."""
        study = yaml.safe_load((self.folder / "study.yaml").read_text())
        options = dict(study["workload"].get("options", {}))
        for key, value in self.delivered["params"].items():
            if key.startswith("workload."):
                options[key.removeprefix("workload.")] = value
        build = import_workload(self.folder).build
        return build(WorkloadContext(options=options, seed=study.get("seed", 0), base_dir=self.folder))


def tuner(*args: str, cwd: Path) -> Any:
    """``tuner ARGS`` in ``cwd`` with this interpreter, offline."""
    env = {**os.environ, **OFFLINE, "COLUMNS": "200"}
    return run([sys.executable, "-m", "tuner", *args], cwd=cwd, env=env)


def _trained(folder: Path) -> tuple[tuple[str, int], ...]:
    """Progress of a ``tune`` in ``folder``: every run's ``metrics.csv`` and its size."""
    return tuple(sorted((str(path), path.stat().st_size) for path in folder.glob("runs/**/metrics.csv")))


def tune_example(name: str, folder: Path, budget: int) -> Tuned:
    """Copy ``examples/<name>`` into ``folder``, tune it within ``budget`` steps (for as long as
    its runs make progress), and read its report."""
    shutil.copytree(EXAMPLES / name, folder, dirs_exist_ok=True, ignore=shutil.ignore_patterns("runs"))
    # two workers of one thread each, also for a phase of one trial (which would get both cores
    # as two threads: on a machine busy with other tests, their spin-waits cost many times that)
    args = ["tune", "study.yaml", "--budget", str(budget), "--workers", "2", "--no-progress"]
    env = {**os.environ, **OFFLINE, "COLUMNS": "200"}
    process = spawn(
        [sys.executable, "-m", "tuner", *args], cwd=folder, env=env, stdout=PIPE, stderr=PIPE, text=True
    )
    out, err = finish(process, lambda: _trained(folder), what=f"tuner tune of {name}")
    assert process.returncode == 0, out + err
    assert "delivered    " in out, out
    report = tuner("report", "study.yaml", "--json", cwd=folder)
    assert report.returncode == 0, report.stderr
    return Tuned(folder, out + err, json.loads(report.stdout))


def import_workload(folder: Path) -> ModuleType:
    """The example's ``workload.py`` in ``folder`` as a module (to rebuild its data)."""
    name = f"example_workload_{folder.name.replace('-', '_')}"
    spec = importlib.util.spec_from_file_location(name, folder / "workload.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module
