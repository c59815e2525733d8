"""The run folder: a run describes itself (config, status, metrics, checkpoints).

```
<output>/<study>/<phase>/run-001/
  config.yaml      the resolved study (overrides applied)     status.json   state, best value/step
  metrics.csv      one row per logged step                    predictions.csv  sampled examples
  checkpoints/     latest.pt, best-stepXXXXXXXX.pt, index.json tensorboard/   event files
                   checksums.json (sha256s)
  command.txt      the command that reproduces the run        error.log     on a crash only
```
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

from tuner._atomic import atomic_write_json, atomic_write_text
from tuner.errors import TunerError, UsageError
from tuner.output import phase_dir
from tuner.spec import StudySpec

UNFINISHED = ("running", "interrupted", "failed")
_YAML_DUMPER = getattr(yaml, "CSafeDumper", yaml.SafeDumper)


def absolute_entry_point(name: str, base_dir: Path) -> str:
    """A ``path/file.py:function`` workload with its file's absolute path; others as they are."""
    from tuner.workloads import parse_entry_point

    try:
        entry = parse_entry_point(name, base_dir)
    except TunerError:
        return name
    if entry.file is None:
        return name
    return f"{entry.file.resolve()}:{entry.function}"


def config_hash(spec: StudySpec) -> str:
    text = json.dumps(spec.model_dump_for_files(), sort_keys=True)  # no storage password
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def read_status(run_dir: Path) -> dict[str, Any]:
    try:
        return json.loads((run_dir / "status.json").read_text())
    except (OSError, ValueError):
        return {}


def has_ended(run_dir: Path) -> bool:
    """``status.json`` records the run's end (completed, target reached, diverged, stopped)."""
    return read_status(run_dir).get("status") not in (None, *UNFINISHED)


def write_status(run_dir: Path, *, durable: bool = False, **fields: Any) -> dict[str, Any]:
    """Merge ``fields`` into ``status.json``. Atomic, like every run-folder file; fsynced only
    when ``durable`` (``training.fsync_checkpoints``): against a process death (what preemption
    is) the rename is enough, and an fsync costs more than a short trial's whole bookkeeping.
    """
    status = {**read_status(run_dir), **fields, "updated_at": time.time()}
    atomic_write_json(run_dir / "status.json", status, durable=durable)
    return status


@contextlib.contextmanager
def locked_run_dir(run_dir: Path, wait_s: float = 0.0) -> Iterator[None]:
    """Hold ``run_dir/.lock`` for the whole run: two processes must never write one folder.

    The OS drops the lock when the process dies (even by kill -9), so a dead run is resumable;
    ``wait_s`` gives a process that is being killed time to go.
    """
    run_dir.mkdir(parents=True, exist_ok=True)
    handle = (run_dir / ".lock").open("a+")
    deadline = time.monotonic() + wait_s
    while True:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            break
        except BlockingIOError:
            if time.monotonic() < deadline:
                time.sleep(0.05)
                continue
        handle.close()
        pid = read_status(run_dir).get("pid", "?")
        raise UsageError(
            f"{run_dir} is in use by another process (pid {pid}); "
            "wait for it to finish, or start a new run with --fresh"
        ) from None
    try:
        yield
    finally:
        fcntl.flock(handle, fcntl.LOCK_UN)
        handle.close()


def is_locked(run_dir: Path) -> bool:
    try:
        with locked_run_dir(run_dir):
            return False
    except UsageError:
        return True


def _run_number(run: Path) -> int:
    return int(run.name[4:]) if run.name[4:].isdigit() else 0


def choose_run_dir(output_dir: Path, spec: StudySpec, phase: str = "train", *, fresh: bool = False) -> Path:
    """The unfinished run with this exact config that no process holds (to resume), else a new one."""
    folder = phase_dir(output_dir, spec.name, phase)
    wanted = config_hash(spec)
    runs = sorted(folder.glob("run-*"), key=_run_number) if folder.exists() else []
    if not fresh:
        for run in reversed(runs):
            status = read_status(run)
            if (
                status.get("config_hash") == wanted
                and status.get("status") in UNFINISHED
                and not is_locked(run)
            ):
                return run
    return folder / f"run-{max(map(_run_number, runs), default=0) + 1:03d}"


def prepare_run_dir(
    run_dir: Path, spec: StudySpec, command: str | None, base_dir: Path | None = None
) -> None:
    """Write ``config.yaml`` (once) and ``command.txt``; refuse to resume a different config.

    ``config.yaml`` names a workload file by its absolute path (resolved against ``base_dir``,
    the study file's folder): relative, it would not resolve from the run folder, and
    ``tuner.train.load_model`` builds the model from this file alone."""
    run_dir.mkdir(parents=True, exist_ok=True)
    status = read_status(run_dir)
    wanted = config_hash(spec)
    if status.get("config_hash") not in (None, wanted):
        raise UsageError(
            f"{run_dir} holds a run of a different configuration; choose another run folder or start fresh"
        )
    durable = spec.training.fsync_checkpoints
    if not (run_dir / "config.yaml").exists():
        # libyaml's emitter when PyYAML has it: the pure-Python one takes ~15 ms for a study
        document = spec.model_dump_for_files()
        if base_dir is not None:
            document["workload"]["name"] = absolute_entry_point(spec.workload.name, base_dir)
        text = yaml.dump(document, Dumper=_YAML_DUMPER, sort_keys=False)
        atomic_write_text(run_dir / "config.yaml", text, durable=durable)
    if command:
        atomic_write_text(run_dir / "command.txt", command + "\n", durable=durable)
    write_status(run_dir, durable=durable, config_hash=wanted, pid=os.getpid(), status="running")
