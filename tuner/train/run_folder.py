"""The run folder: a run describes itself (config, status, metrics, checkpoints).

```
<output>/<study>/<phase>/run-001/
  config.yaml      the resolved study (overrides applied)     status.json   state, best value/step
  metrics.csv      one row per logged step                    predictions.csv  sampled examples
  checkpoints/     latest.pt, best-stepXXXXXXXX.pt, index.json tensorboard/   event files
  command.txt      the command that reproduces the run        error.log     on a crash only
```
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from pathlib import Path
from typing import Any

import yaml

from tuner._atomic import atomic_write_json, atomic_write_text
from tuner.errors import UsageError
from tuner.spec import StudySpec

UNFINISHED = ("running", "interrupted", "failed")


def config_hash(spec: StudySpec) -> str:
    text = json.dumps(spec.model_dump(mode="json"), sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def read_status(run_dir: Path) -> dict[str, Any]:
    try:
        return json.loads((run_dir / "status.json").read_text())
    except (OSError, ValueError):
        return {}


def write_status(run_dir: Path, **fields: Any) -> dict[str, Any]:
    status = {**read_status(run_dir), **fields, "updated_at": time.time()}
    atomic_write_json(run_dir / "status.json", status)
    return status


def phase_dir(output_dir: Path, study_name: str, phase: str) -> Path:
    """``output/<study>/<phase>``, refusing anything that would land outside ``output``."""
    root = Path(output_dir).resolve()
    folder = (root / study_name / phase).resolve()
    if root != folder and root not in folder.parents:
        raise UsageError(f"study name {study_name!r} would write outside the output folder {root}")
    return folder


def choose_run_dir(output_dir: Path, spec: StudySpec, phase: str = "train", *, fresh: bool = False) -> Path:
    """The unfinished run with this exact config (to resume), else a new ``run-NNN``."""
    folder = phase_dir(output_dir, spec.name, phase)
    wanted = config_hash(spec)
    runs = sorted(folder.glob("run-*")) if folder.exists() else []
    if not fresh:
        for run in reversed(runs):
            status = read_status(run)
            if status.get("config_hash") == wanted and status.get("status") in UNFINISHED:
                return run
    numbers = [int(r.name[4:]) for r in runs if r.name[4:].isdigit()]
    return folder / f"run-{max(numbers, default=0) + 1:03d}"


def prepare_run_dir(run_dir: Path, spec: StudySpec, command: str | None) -> None:
    """Write ``config.yaml`` (once) and ``command.txt``; refuse to resume a different config."""
    run_dir.mkdir(parents=True, exist_ok=True)
    status = read_status(run_dir)
    wanted = config_hash(spec)
    if status.get("config_hash") not in (None, wanted):
        raise UsageError(
            f"{run_dir} holds a run of a different configuration; choose another run folder or start fresh"
        )
    if not (run_dir / "config.yaml").exists():
        atomic_write_text(
            run_dir / "config.yaml", yaml.safe_dump(spec.model_dump(mode="json"), sort_keys=False)
        )
    if command:
        atomic_write_text(run_dir / "command.txt", command + "\n")
    write_status(run_dir, config_hash=wanted, pid=os.getpid(), status="running")
