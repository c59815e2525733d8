"""What the ``tuner tune`` tests share: the toy study they tune, the state ``tune`` stores, and
the command line of a ``tune --json`` run on a built study."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

from tests.orchestrate_tests.conftest import run_tuner, sqlite_url, toy_study
from tests.spec_tests._support import invoke


def tune_study(folder: Path, **round2: int) -> Path:
    path = toy_study(folder, round1={"steps": 10, "trials": 4})
    if round2:
        document = yaml.safe_load(path.read_text())
        document["rounds"]["round2"] = round2
        path.write_text(yaml.safe_dump(document, sort_keys=False))
    return path


def state(output_dir: Path, study: str = "toy") -> dict:
    """The tune state as the storage holds it (stages and decisions)."""
    from tuner.orchestrate import open_storage
    from tuner.playbook.decision_log import load_state

    loaded = load_state(open_storage(sqlite_url(output_dir, study)), study)
    assert loaded is not None
    return loaded.to_json()


def trained_steps(output_dir: Path) -> int:
    """Every run folder's trained steps (its status.json), all phases and studies."""
    return sum(
        int(json.loads(status.read_text()).get("step") or 0)
        for status in output_dir.glob("*/*/trial-*/status.json")
    )


def store_tune_state(built: Any, stage: Any, budget: str, steps: int, spent_s: float = 0.0) -> None:
    """The state an earlier ``tune --budget BUDGET`` (``steps`` training steps, ``spent_s`` wall
    seconds) left after deciding ``stage`` (or a list of stages; built, not trained)."""
    from tuner.orchestrate import open_storage
    from tuner.playbook.budget import parse_budget
    from tuner.playbook.decision_log import Decision, Stage, TuneState, save_state

    stages = stage if isinstance(stage, list) else [stage]
    assert all(isinstance(s, Stage) for s in stages)
    decided = [Decision("budget", built.name, f"budget {budget}", {})]
    state = TuneState(parse_budget(budget), steps, stages, decided, spent_s=spent_s)
    save_state(open_storage(built.storage_url), built.name, state)


def tune_after(built: Any, stage: Any, budget: int, *flags: str) -> Any:
    """``tune --budget BUDGET --json`` on a study whose ``stage`` (built, not trained) an earlier
    run of the same budget finished: its state is stored first, as that run left it."""
    store_tune_state(built, stage, str(budget), budget)
    return run_tuner(*tune_args(built, budget, *flags))


def tune_args(built: Any, budget: int | str, *flags: str) -> tuple[str, ...]:
    """The arguments of ``tune --budget BUDGET --json`` on one worker, in the built study's folder."""
    return (
        "tune", str(built.path), "--budget", str(budget), "--json", "--no-progress", "--workers", "1",
        "--output-dir", str(built.output_dir), *flags,
    )  # fmt: skip


def dry_run_plan(path: Path, budget: int, output_dir: Path, *flags: str) -> dict[str, Any]:
    """The plan ``tune --budget BUDGET --dry-run --json`` prints (nothing runs)."""
    args = ("--budget", str(budget), "--dry-run", "--json", "--output-dir", str(output_dir), *flags)
    result = invoke("tune", str(path), *args)
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)["plan"]


def built_sweep(folder: Path, **training: Any) -> tuple[Any, Any, Any]:
    """The toy study leaving ``max_train_steps`` to sweep-lr (grid 0.01, 0.1, 1.0; cap 100), with
    ``training``'s fields set, round 1 of 20 steps and a round 2 of its best point: the study, its
    sweep-lr phase (created as the command creates it, no trial yet) and that phase's plan."""
    from tests.report_tests.builders import study
    from tuner.playbook.plan import load_plan

    built = study(folder, round1={"steps": 20, "trials": 4}, round2={"top_k": 1})
    document = yaml.safe_load(built.path.read_text())
    del document["training"]["max_train_steps"]
    document["training"].update(training)
    document["sweep_lr"] = {"grid": [0.01, 0.1, 1.0], "max_steps": 100}
    built.path.write_text(yaml.safe_dump(document, sort_keys=False))
    sweep = built.start("sweep-lr")
    plan = load_plan(sweep.user_attrs)
    assert plan is not None
    return built, sweep, plan
