"""What ``tuner tune`` sets itself before round 1 when the length is sweep-lr's (the study file
leaves ``max_train_steps`` out): trials worth their fixed cost, a schedule the length can hold,
evals enough to place a best step (``tuner/playbook/tune/own_settings.py``).

Each case starts after a sweep-lr that an earlier run of ``tune`` finished, built (not trained)
with known answers: the fastest LR fit the training set at step 20, and the trials took known
times; the plans are read with ``--dry-run``, one case runs for real.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

from tests.cli_tests._tune_support import built_sweep, dry_run_plan, state, store_tune_state, tune_args
from tests.orchestrate_tests.conftest import run_tuner

WARMUP_THEN_COSINE = [
    {"shape": "linear", "steps": 50, "start": 0.0, "end": 1.0},
    {"shape": "cosine", "start": 1.0, "end": 0.0},
]


def _swept(
    folder: Path,
    budget: int,
    *,
    timed: tuple[float, float] | None = None,
    fit_step: int = 20,
    eval_every: int = 10,
    schedule: list[dict[str, Any]] | None = None,
) -> Any:
    """The toy study without ``max_train_steps`` (grid 0.01, 0.1, 1.0; cap 100), its sweep-lr done
    in an earlier ``tune --budget BUDGET``: lr 1.0 fit at ``fit_step``, the other two stopped
    there. ``timed`` = (fixed seconds, seconds a step): each trial's run folder logs its steps at
    that pace after a first 10 steps of warm-up, and took that long start to end; None: no run
    folders (the cost cannot be measured)."""
    from tests.report_tests.builders import add_trial
    from tuner.playbook.decision_log import Stage
    from tuner.playbook.study_results import store_recommendation

    training: dict[str, Any] = {"eval_every": eval_every}
    if schedule is not None:
        training["schedule"] = schedule
    built, sweep, plan = built_sweep(folder, **training)
    for slot, planned in enumerate(plan.slots):
        fit = planned.values["optimizer.lr"] == 1.0
        timing: dict[str, Any] = {}
        if timed is not None:
            fixed_s, step_s = timed
            run_dir = built.output_dir / "toy" / "sweep-lr" / f"trial-{slot:04d}"
            run_dir.mkdir(parents=True)
            rows = [f"{step},{0.3 + (step - 10) * step_s}" for step in range(10, fit_step + 1, 10)]
            (run_dir / "metrics.csv").write_text("\n".join(["step,elapsed_s", *rows]) + "\n")
            timing = {"run_dir": run_dir, "wall_s": fixed_s + fit_step * step_s}
        add_trial(
            sweep, slot, 0.1, planned.values, state="COMPLETE" if fit else "PRUNED", best_step=fit_step,
            max_train_steps=100, final_step=fit_step, best_fit_value=1.0 if fit else 0.9,
            final_train_loss=0.1, **({"fit_step": fit_step} if fit else {}), **planned.attrs, **timing,
        )  # fmt: skip
    store_recommendation(sweep, fit_step)
    done = Stage("toy", "sweep-lr", str(built.path), [], 3, 300, True, done=True, steps_per_trial=100)
    store_tune_state(built, done, str(budget), budget)
    return built


def _notes_and_round1(built: Any, budget: int) -> tuple[list[str], dict[str, Any]]:
    plan = dry_run_plan(built.path, budget, built.output_dir, "--no-extra-round")
    (round1,) = [p for p in plan["phases"] if p["phase"] == "toy/round-1"]
    return plan["notes"], round1


def test_trials_whose_fixed_cost_outweighs_their_training_are_lengthened_up_to_the_sweeps_cap(
    tmp_path: Path,
) -> None:
    """2 s of fixed cost a trial and 2 ms a step: a trial of sweep-lr's 20 steps trains 0.04 s.
    The 1,000 steps at which it would train as long lie past the sweep's cap of 100 steps (the
    longest it tried), so round 1 trains the cap: 7 trials, not 45 of two evals each."""
    built = _swept(tmp_path, 1000, timed=(2.0, 0.002))
    notes, round1 = _notes_and_round1(built, 1000)
    assert (round1["steps_per_trial"], round1["trials"]) == (100, 7)
    assert (
        "round trials of 100 steps, not 20: a trial's fixed cost (2 s) is 50x its training at 20 steps"
        in notes
    )


def test_trials_that_train_at_least_as_long_as_their_fixed_cost_are_planned_as_before(tmp_path: Path) -> None:
    """0.02 s of fixed cost and 2 ms a step: 20 steps train 0.04 s, longer than the fixed cost."""
    built = _swept(tmp_path, 1000, timed=(0.02, 0.002))
    notes, round1 = _notes_and_round1(built, 1000)
    assert (round1["steps_per_trial"], round1["trials"]) == (20, 45)
    assert not any("round trials of" in note for note in notes)


def test_the_length_stops_where_a_trial_trains_as_long_as_its_fixed_cost(tmp_path: Path) -> None:
    """0.09 s of fixed cost and 2 ms a step: 45 steps train as long; 50 on the eval grid (10)."""
    built = _swept(tmp_path, 1000, timed=(0.09, 0.002))
    _, round1 = _notes_and_round1(built, 1000)
    assert round1["steps_per_trial"] == 50


def test_round1s_eval_every_gives_the_report_its_evals(tmp_path: Path) -> None:
    """sweep-lr's 20 steps at eval_every 10: 2 evals a trial, 1 in its last 25%; the report needs
    4 and 2. eval_every 4 (the largest readable interval that gives them): 5 evals, 2 late."""
    built = _swept(tmp_path, 1000)
    notes, round1 = _notes_and_round1(built, 1000)
    assert round1["steps_per_trial"] == 20  # the cost is not measured here: the length stays
    assert "eval_every 10 -> 4: 5 evals a round-1 trial of 20 steps, not 2" in notes


def test_a_schedule_sweep_lrs_length_cannot_hold_is_scaled_and_tune_runs_on(tmp_path: Path) -> None:
    """The templates' 50-step warmup and a cosine over the rest, with sweep-lr's 20 steps: round 1
    trains the warmup as half of each run (10 steps), says so once, and a re-run reads it back."""
    built = _swept(tmp_path, 140, schedule=WARMUP_THEN_COSINE)
    done = run_tuner(*tune_args(built, 140, "--no-extra-round", "--no-apply-suggestions"))
    assert done.returncode == 0, done.stderr
    payload = json.loads(done.stdout)
    (scaled,) = [d for d in payload["decisions"] if d["kind"] == "schedule_scaled"]
    assert scaled["numbers"]["value"][0] == {"shape": "linear", "fraction": 0.5, "start": 0.0, "end": 1.0}
    assert (scaled["numbers"]["fixed_steps"], scaled["numbers"]["scaled_steps"]) == ([50], [10])
    assert "training.schedule scaled to round 1's 20 steps: linear 50 -> 10 steps" in done.stderr
    assert '"fraction": 0.5' in " ".join(payload["stages"][1]["sets"])  # round 1 ran with it
    trial = yaml.safe_load((built.output_dir / "toy" / "round-1" / "trial-0000" / "config.yaml").read_text())
    assert trial["training"]["schedule"][0]["fraction"] == 0.5
    again = run_tuner(*tune_args(built, 140, "--no-extra-round", "--no-apply-suggestions"))
    assert again.returncode == 0, again.stderr
    kinds = [d["kind"] for d in state(built.output_dir)["decisions"]]
    assert kinds.count("schedule_scaled") == 1 and kinds.count("eval_every_lowered") == 1
