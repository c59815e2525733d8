"""Studies with known answers, built as real trials in a real storage.

A phase is created the way ``tuner run-round`` / ``sweep-lr`` create it (``start_round``: its
plan stored in the phase), then its trials are written with Optuna's public API and the very
attributes a worker records (``slot``, ``attempt``, ``best_step``, ``max_train_steps``,
``run_dir``, ``reproduce``, ``failure_reason``, ``retry_of``...). Running real training for
dozens of trials would only make the answers noisy and the suite slow; the workers' recording is
tested on real runs in ``orchestrate_tests``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml

from tests.orchestrate_tests.conftest import sqlite_url, toy_study


@dataclass
class Built:
    """A study file, its output folder and storage, and its phases' Optuna studies."""

    path: Path
    output_dir: Path
    name: str
    phases: dict[str, Any] = field(default_factory=dict)
    storage: str | None = None

    @property
    def storage_url(self) -> str:
        return self.storage or sqlite_url(self.output_dir, self.name)

    def start(self, phase: str) -> Any:
        """Create the phase (and its stored plan) as the command would; returns its Optuna study."""
        from tuner.playbook import start_round
        from tuner.spec import load_study

        started = start_round(load_study(self.path), phase, self.output_dir)
        self.phases[phase] = started.study
        return started.study


def study(
    folder: Path,
    *,
    name: str = "toy",
    search_space: dict[str, Any] | None = None,
    round1: dict[str, Any] | None = None,
    round2: dict[str, Any] | None = None,
    round3: dict[str, Any] | None = None,
    options: dict[str, Any] | None = None,
    storage: str | None = None,
    **training: Any,
) -> Built:
    """A toy-workload study file in ``folder`` (output folder ``folder/runs``; ``storage``: a URL
    the study file names, e.g. a PostgreSQL database)."""
    path = toy_study(
        folder,
        name=name,
        search_space=search_space,
        round1=round1,
        options=options,
        storage=storage,
        **training,
    )
    for key, value in (("round2", round2), ("round3", round3)):
        if value is not None:
            document = yaml.safe_load(path.read_text())
            document["rounds"][key] = value
            path.write_text(yaml.safe_dump(document, sort_keys=False))
    return Built(path, folder / "runs", name, storage=storage)


def described_study(
    folder: Path, output_dir: Path, description: str, storage: str | None = None, **kw: Any
) -> Built:
    """A ``study`` whose file has ``description`` (and ``storage``, and round 1's ``proxy_fraction``
    when given), its output in ``output_dir``: what ``tuner list`` shows of a study."""
    proxy = kw.pop("proxy_fraction", None)
    built = study(folder, **kw)
    document = yaml.safe_load(built.path.read_text())
    document["description"] = description
    if proxy:
        document["rounds"]["round1"]["proxy_fraction"] = proxy
    if storage:
        document["storage"] = storage
    built.path.write_text(yaml.safe_dump(document, sort_keys=False))
    return replace(built, output_dir=output_dir)


def add_trial(
    phase: Any,
    slot: int,
    value: float | None,
    params: dict[str, Any],
    *,
    state: str = "COMPLETE",
    best_step: int | None = None,
    max_train_steps: int | None = None,
    curve: dict[int, float] | None = None,
    attempt: int = 0,
    run_dir: Path | None = None,
    completed_at: Any = None,
    wall_s: float | None = None,
    **attrs: Any,
) -> int:
    """A finished (or running) trial of ``slot`` as a worker records it; returns its number.

    ``max_train_steps`` defaults to the phase's trial length; ``curve`` to one eval per 10
    steps reaching ``value`` at ``best_step`` and staying there (within 1%); ``wall_s``: the
    seconds from its start to its end (the storage's times).
    """
    from optuna.trial import TrialState, create_trial

    from tuner.orchestrate import distributions
    from tuner.playbook.plan import load_plan

    plan = load_plan(phase.user_attrs)
    assert plan is not None
    space = plan.search_space()
    max_train_steps = max_train_steps or plan.trial_steps
    dists = {key: dist for key, dist in distributions(space).items() if key in params}
    user_attrs: dict[str, Any] = {
        "slot": slot,
        "attempt": attempt,
        "max_train_steps": max_train_steps,
        "reproduce": f"tuner train study.yaml --set slot={slot}",
        "git_commit": "0123abc",
        "git_dirty": False,
        "train_s": 1.5,
        **attrs,
    }
    if best_step is not None:
        user_attrs["best_step"] = best_step
    if run_dir is not None:
        user_attrs["run_dir"] = str(run_dir)
    if curve is None and value is not None and best_step is not None:
        # falls to ``value`` at ``best_step``, then stays within 1% of it: a curve that clearly
        # worsens after its best is a verdict of its own (``after_best``), asked for with ``curve``
        curve = {
            step: value + 0.01 * (best_step - step) / 10
            if step <= best_step
            else value * (1 + 0.01 * step / max_train_steps)
            for step in range(10, max_train_steps + 1, 10)
        }
    trial = create_trial(
        state=TrialState[state],
        value=value if state == "COMPLETE" else None,
        params=params,
        distributions=dists,
        user_attrs=user_attrs,
        intermediate_values=curve or {},
    )
    if completed_at is not None:  # as the worker's own clock stamped it
        trial.datetime_start = trial.datetime_complete = completed_at
    if wall_s is not None:
        import datetime

        assert trial.datetime_complete is not None
        trial.datetime_start = trial.datetime_complete - datetime.timedelta(seconds=wall_s)
    phase.add_trial(trial)
    return phase.get_trials(deepcopy=False)[-1].number


def run_folder(
    folder: Path,
    *,
    best_step: int,
    metrics: dict[str, float],
    status: dict[str, Any] | None = None,
    checkpoint: bool = True,
) -> Path:
    """A run folder as the engine leaves it: ``status.json``, ``metrics.csv`` with the eval row of
    ``best_step``, and the best checkpoint's file (empty: the report only looks for it and checks
    it against ``checksums.json``)."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "status.json").write_text(
        json.dumps({"status": "completed", "best_step": best_step, "last_eval": metrics, **(status or {})})
    )
    columns = ["step", "lr", "train/step_loss", "elapsed_s", *metrics]
    rows = [",".join(columns), ",".join([str(best_step), "0.1", "0.5", "1.0", *map(str, metrics.values())])]
    (folder / "metrics.csv").write_text("\n".join(rows) + "\n")
    if checkpoint:
        import hashlib

        (folder / "checkpoints").mkdir(exist_ok=True)
        name = f"best-step{best_step:08d}.pt"
        (folder / "checkpoints" / name).write_bytes(b"")
        digests = {"algorithm": "sha256", "files": {name: [hashlib.sha256(b"").hexdigest()]}}
        (folder / "checkpoints" / "checksums.json").write_text(json.dumps(digests))
    return folder
