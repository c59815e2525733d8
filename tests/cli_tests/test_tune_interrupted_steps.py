"""``tuner tune`` re-run after a Ctrl-C charges only the steps that were trained.

A trial interrupted at step 0 trained nothing; its retry resumes in the same run folder and
trains the whole length. Built (not trained) storages: the same finished phases once with two
trials interrupted at step 0 and retried, once without; the re-run must plan what the
uninterrupted run plans, to the step (``--dry-run``: nothing runs).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.cli_tests._tune_support import dry_run_plan, store_tune_state
from tests.report_tests.builders import Built, add_trial, study

BUDGET = 900
SWEEP_STEPS = {0.01: 100, 0.1: 80, 1.0: 100}  # each LR's final step (0.1 fit the training set at 80)
ROUND1_STEPS = 20
INTERRUPTED_SLOTS = (0, 1)


def _finished(phase: Any, folder: Path, slot: int, steps: int, params: dict[str, Any], **attrs: Any) -> None:
    """Slot ``slot`` trained to ``steps`` in its run folder (status.json says so, as the engine
    leaves it)."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "status.json").write_text(json.dumps({"status": "completed", "step": steps}))
    add_trial(phase, slot, 0.1, params, best_step=steps, final_step=steps, run_dir=folder, **attrs)


def _phase_trials(
    built: Built, phase: Any, planned: list[tuple[dict[str, Any], int]], interrupted: bool
) -> None:
    """Each planned point trained to its steps; with ``interrupted``, slots 0 and 1 first had an
    attempt stopped by Ctrl-C at step 0 (it records ``final_step`` 0), then a retry that resumed
    in the same folder (``resumed_from_step`` 0) and trained everything."""
    for slot, (params, steps) in enumerate(planned):
        folder = built.output_dir / built.name / phase.study_name.split("/")[-1] / f"trial-{slot:04d}"
        if interrupted and slot in INTERRUPTED_SLOTS:
            folder.mkdir(parents=True, exist_ok=True)
            failed = add_trial(
                phase, slot, None, params, state="FAIL", final_step=0, run_dir=folder,
                failure_reason="interrupted", retried=True,
            )  # fmt: skip
            _finished(phase, folder, slot, steps, params, attempt=1, retry_of=failed, resumed_from_step=0)
        else:
            _finished(phase, folder, slot, steps, params)


def _built(folder: Path, *, round1: bool, interrupted: str | None) -> Built:
    """The toy study whose sweep-lr (3 LRs, cap 100) and, with ``round1``, round 1 (4 trials of
    20 steps), all done, an earlier ``tune --budget 900`` ran; ``interrupted`` names the phase
    whose slots 0 and 1 were interrupted at step 0 and retried."""
    from tuner.playbook.decision_log import Stage
    from tuner.playbook.plan import load_plan
    from tuner.playbook.study_results import store_recommendation

    built = study(folder, round1={"steps": ROUND1_STEPS, "trials": 4}, round2={"top_k": 1})
    document = yaml.safe_load(built.path.read_text())
    del document["training"]["max_train_steps"]
    document["sweep_lr"] = {"grid": list(SWEEP_STEPS), "max_steps": 100}
    built.path.write_text(yaml.safe_dump(document, sort_keys=False))
    sweep = built.start("sweep-lr")
    plan = load_plan(sweep.user_attrs)
    assert plan is not None
    swept = [(p.values, SWEEP_STEPS[p.values["optimizer.lr"]]) for p in plan.slots]
    _phase_trials(built, sweep, swept, interrupted == "sweep-lr")
    store_recommendation(sweep, 80)
    path = str(built.path)
    stages = [Stage("toy", "sweep-lr", path, [], 3, 300, True, done=True, steps_per_trial=100)]
    if round1:
        phase = built.start("round-1")
        points = [{"optimizer.lr": lr} for lr in (0.02, 0.05, 0.2, 0.5)]
        _phase_trials(built, phase, [(p, ROUND1_STEPS) for p in points], interrupted == "round-1")
        stages.append(Stage("toy", "round-1", path, [], 4, 80, done=True, steps_per_trial=ROUND1_STEPS))
    store_tune_state(built, stages, str(BUDGET), BUDGET)
    return built


@pytest.mark.parametrize("phase", ["sweep-lr", "round-1"])
def test_a_rerun_after_trials_interrupted_at_step_0_plans_as_the_uninterrupted_run(
    tmp_path: Path, phase: str
) -> None:
    round1 = phase == "round-1"  # round 1 done too (then the later rounds are planned on what is left)
    interrupted = _built(tmp_path / "interrupted", round1=round1, interrupted=phase)
    plan = dry_run_plan(interrupted.path, BUDGET, interrupted.output_dir)
    ran = {p["phase"]: p["steps_ran"] for p in plan["phases"]}
    assert ran["toy/sweep-lr"] == sum(SWEEP_STEPS.values())  # 280, not 460: each retry counted once
    if round1:
        assert ran["toy/round-1"] == 4 * ROUND1_STEPS  # 80: not 80 + 40
    clean = _built(tmp_path / "clean", round1=round1, interrupted=None)
    uninterrupted = dry_run_plan(clean.path, BUDGET, clean.output_dir)
    assert plan == uninterrupted
