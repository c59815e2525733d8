"""Stored plans, round 2 from round 1's results, and the study-file check against a plan."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import optuna
import pytest

from tests._warm_processes import run_warm_tuner
from tests.orchestrate_tests.conftest import (
    delete_phases,
    run_tuner,
    server_storage,
    sqlite_url,
    toy_study,
    tuner_env,
)
from tuner.errors import UsageError
from tuner.orchestrate import open_storage
from tuner.playbook import start_round
from tuner.playbook.plan import load_plan
from tuner.spec import load_study


def _add(
    study: Any, slot: int, value: float | None, *, lr: float, state: str = "COMPLETE", **attrs: Any
) -> None:
    """A finished round-1 trial, as a worker would have recorded it."""
    from optuna.distributions import FloatDistribution
    from optuna.trial import TrialState, create_trial

    study.add_trial(
        create_trial(
            state=TrialState[state],
            value=value,
            params={"optimizer.lr": lr},
            distributions={"optimizer.lr": FloatDistribution(0.01, 1.0, log=True)},
            user_attrs={"slot": slot, "attempt": 0, "best_step": 30, "max_train_steps": 40, **attrs},
            intermediate_values={10: 0.0} if state == "FAIL" else {10: value},
        )
    )


def _round1_with_results(tmp_path: Path, output_dir: Path, **study: Any) -> tuple[Path, Any]:
    path = toy_study(tmp_path, **study)
    started = start_round(load_study(path), "round-1", output_dir)
    phase = started.study
    _add(phase, 0, 0.30, lr=0.02)
    _add(phase, 1, 0.10, lr=0.05)
    _add(phase, 2, 0.20, lr=0.30)
    # a diverged trial: FAIL, however good its last eval looked; never picked
    _add(phase, 3, None, lr=0.9, state="FAIL", failure_reason="diverged")
    _add(phase, 4, 0.25, lr=0.01)
    return path, phase


def test_round1_stores_its_plan_and_refuses_a_changed_file_naming_the_fields(
    tmp_path: Path, output_dir: Path
) -> None:
    path = toy_study(tmp_path)
    started = start_round(load_study(path), "round-1", output_dir)
    stored = load_plan(started.study.user_attrs)
    assert stored is not None
    assert (stored.phase, stored.trial_steps, stored.sampler) == ("round-1", 40, "quasi-random")
    assert stored.config["training"]["batch_size"] == 16
    # a larger budget is not a different configuration
    start_round(load_study(path, ["rounds.round1.trials=8"]), "round-1", output_dir)
    with pytest.raises(UsageError) as caught:
        start_round(load_study(path, ["rounds.round1.steps=20", "batch_size=8"]), "round-1", output_dir)
    message = str(caught.value)
    assert "rounds.round1.steps (40 -> 20)" in message
    assert "training.batch_size (16 -> 8)" in message


def test_round2_trains_exactly_round1s_top_k_never_a_diverged_trial(tmp_path: Path, output_dir: Path) -> None:
    path, _ = _round1_with_results(tmp_path, output_dir)
    overrides = ["rounds.round2.top_k=2", "rounds.round2.seeds=2", "rounds.round2.lr_multipliers=[0.5, 1.0]"]
    started = start_round(load_study(path, overrides), "round-2", output_dir)
    stored = load_plan(started.study.user_attrs)
    assert stored is not None and started.settings is not None
    assert started.settings.max_trials == 8 == len(stored.slots)  # 2 points x 2 multipliers x 2 seeds
    assert [s.attrs["source_trial"] for s in stored.slots] == [1] * 4 + [2] * 4
    assert [s.attrs["source_value"] for s in stored.slots[::4]] == [0.10, 0.20]
    # new seeds: round 1 trained every point on seed index 0, round 2 on 1 and 2 (never a replay)
    assert [s.attrs["seed_index"] for s in stored.slots[:4]] == [1, 2, 1, 2]
    assert [s.attrs["lr_multiplier"] for s in stored.slots[:4]] == [0.5, 0.5, 1.0, 1.0]
    assert [s.values["optimizer.lr"] for s in stored.slots[:4]] == [0.025, 0.025, 0.05, 0.05]
    assert [s.sets for s in stored.slots[:2]] == [{"seed_index": 1}, {"seed_index": 2}]
    assert stored.trial_steps == 40  # the production length (the file's max_train_steps)
    assert stored.source_phase == "round-1"


def test_round2_widens_a_range_an_lr_multiplier_leaves(tmp_path: Path, output_dir: Path) -> None:
    path, _ = _round1_with_results(tmp_path, output_dir)
    overrides = ["rounds.round2.top_k=1", "rounds.round2.lr_multipliers=[0.05]"]
    stored = load_plan(start_round(load_study(path, overrides), "round-2", output_dir).study.user_attrs)
    assert stored is not None
    assert math.isclose(stored.slots[0].values["optimizer.lr"], 0.0025)
    assert stored.space["optimizer.lr"]["low"] == pytest.approx(0.0025)  # Optuna refuses a value outside


def test_round2_before_round1_has_top_k_completed_trials(tmp_path: Path, output_dir: Path) -> None:
    # round 1's budget allows 5 points (validate refuses a top_k above it); only 4 completed
    path, _ = _round1_with_results(tmp_path, output_dir, round1={"trials": 5})
    with pytest.raises(UsageError) as caught:
        start_round(load_study(path, ["rounds.round2.top_k=5"]), "round-2", output_dir)
    assert str(caught.value) == (
        "round 2 trains round-1's 5 best completed trials, but round-1 has only 4 completed "
        "(0 failed, 1 diverged, 0 running or waiting); finish round-1 (tuner run-round STUDY --round 1) "
        "or lower rounds.round2.top_k"
    )


def test_round2_extends_round1s_schedule_the_playbook_way(tmp_path: Path, output_dir: Path) -> None:
    schedule = [
        {"shape": "linear", "steps": 5, "start": 0.0, "end": 1.0},
        {"shape": "constant"},
        {"shape": "linear", "steps": 10, "start": 1.0, "end": 0.0},
    ]
    path, _ = _round1_with_results(tmp_path, output_dir, schedule=schedule, max_train_steps=200)
    stored = load_plan(start_round(load_study(path), "round-2", output_dir).study.user_attrs)
    assert stored is not None
    # round 1 ran 40 steps: warmup 5, constant 25, decay 10; at 200 the constant grows to 185
    assert [(s["shape"], s["steps"]) for s in stored.schedule] == [
        ("linear", 5),
        ("constant", 185),
        ("linear", 10),
    ]
    assert any("constant phase at 1x grown from 25 to 185 steps" in note for note in stored.notes)


def test_round2_refuses_a_training_change_since_round1(tmp_path: Path, output_dir: Path) -> None:
    path, _ = _round1_with_results(tmp_path, output_dir)
    with pytest.raises(UsageError, match=r"training.optimizer.name \("):
        start_round(load_study(path, ["optimizer.name=adam"]), "round-2", output_dir)
    # round 2's own settings are not round 1's configuration
    start_round(load_study(path, ["rounds.round2.top_k=1"]), "round-2", output_dir)


@pytest.mark.postgres
def test_a_worker_elsewhere_runs_round2_from_the_stored_plan_alone(
    tmp_path: Path, postgres_url: str, unique_name: str
) -> None:
    """Round 2's points live in its plan: a worker on "another machine" (another folder) serves it
    even once round 1's results are gone from the storage."""
    here, there = tmp_path / "a", tmp_path / "b"
    path = toy_study(here, name=unique_name, round1={"trials": 3, "steps": 20})
    env = tuner_env(TUNER_STORAGE=postgres_url)
    try:
        done = run_tuner("run-round", str(path), "--round", "1", "--output-dir", str(here / "runs"), env=env)
        assert done.returncode == 0, done.stderr
        storage = server_storage(postgres_url)
        round1 = optuna.load_study(study_name=f"{unique_name}/round-1", storage=storage)
        best = min((t for t in round1.trials if t.value is not None), key=lambda t: t.value)
        start_round(
            load_study(path, ["rounds.round2.top_k=1"]), "round-2", here / "runs", storage_url=postgres_url
        )
        optuna.delete_study(study_name=f"{unique_name}/round-1", storage=storage)

        elsewhere = toy_study(there, name=unique_name, round1={"trials": 3, "steps": 20})
        worker = run_warm_tuner(
            "worker", str(elsewhere), "--phase", "round-2", "--set", "rounds.round2.top_k=1",
            "--output-dir", str(there / "runs"), env=env,
        )  # fmt: skip
        assert worker.returncode == 0, worker.stdout + worker.stderr
        trials = optuna.load_study(study_name=f"{unique_name}/round-2", storage=storage).trials
        assert [t.state.name for t in trials] == ["COMPLETE"]
        assert trials[0].params == best.params
        assert trials[0].user_attrs["source_trial"] == best.user_attrs["slot"]
        assert trials[0].user_attrs["max_train_steps"] == 40
        assert Path(trials[0].user_attrs["run_dir"]).is_relative_to(there)
    finally:
        delete_phases(postgres_url, unique_name, "round-1", "round-2")


def test_round2_from_the_command_line_records_where_each_trial_came_from(tmp_path: Path) -> None:
    path = toy_study(tmp_path, round1={"trials": 3, "steps": 20})
    output = tmp_path / "runs"
    first = run_tuner("run-round", str(path), "--round", "1", "--output-dir", str(output), "--no-progress")
    assert first.returncode == 0, first.stderr
    overrides = ["--set", "rounds.round2.top_k=2", "--set", "rounds.round2.seeds=2"]
    second = run_tuner(
        "run-round", str(path), "--round", "2", *overrides, "--output-dir", str(output), "--no-progress"
    )
    assert second.returncode == 0, second.stderr
    assert "round-2: 4 trials of 40 steps (planned points)" in second.stderr
    too_early = run_tuner("run-round", str(path), "--round", "3", "--output-dir", str(output))
    assert too_early.returncode == 2 and "unknown phase 'round-3'" in too_early.stderr
    assert "round-1's top 2 by val/error_rate" in second.stderr
    storage = open_storage(sqlite_url(output))
    trials = optuna.load_study(study_name="toy/round-2", storage=storage).trials
    assert sorted((t.user_attrs["source_rank"], t.user_attrs["seed_index"]) for t in trials) == [
        (1, 1), (1, 2), (2, 1), (2, 2)
    ]  # fmt: skip
    assert {t.state.name for t in trials} == {"COMPLETE"}
    assert all(f"--set seed_index={t.user_attrs['seed_index']}" in t.user_attrs["reproduce"] for t in trials)
    assert "seeds: training.seed_index 1-2, new to this round" in second.stderr
    # the best run is one seed; the best point (mean over its seeds) and its best seed are said too
    means = {}
    for t in trials:
        means.setdefault(t.user_attrs["source_rank"], []).append(t)
    top = min(
        means.values(),
        key=lambda runs: (sum(r.value for r in runs) / 2, min(r.user_attrs["slot"] for r in runs)),
    )
    chosen = min(top, key=lambda r: (r.value, r.user_attrs["seed_index"]))
    (line,) = [line for line in second.stdout.splitlines() if line.startswith("best point")]
    assert line.endswith(
        f"this round's best mean over its seeds, best seed trial {chosen.user_attrs['slot']}; "
        "the study's model, over every full-length round: tuner report"
    )
    assert "over 2 seeds" in line


def test_round3_ranks_round2s_points_by_their_mean_over_seeds(tmp_path: Path, output_dir: Path) -> None:
    """top_k counts points, not seed runs: one point's seeds must not fill it, and a point with one
    lucky seed does not outrank a steadily good one."""
    import yaml

    path, _ = _round1_with_results(tmp_path, output_dir)
    study = yaml.safe_load(path.read_text())
    study["rounds"].update(round2={"top_k": 3, "seeds": 2}, round3={"top_k": 3, "seeds": 1})
    path.write_text(yaml.safe_dump(study, sort_keys=False))
    round2 = start_round(load_study(path), "round-2", output_dir).study
    plan2 = load_plan(round2.user_attrs)
    assert plan2 is not None
    # slots 0-1, 2-3, 4-5: round 1's points ranked 1, 2, 3, two seeds each
    seeds = {0: 0.03, 1: 0.30, 2: 0.04, 3: 0.05, 4: 0.06, 5: 0.07}  # means .165, .045, .065
    for slot, value in seeds.items():
        _add(round2, slot, value, lr=plan2.slots[slot].values["optimizer.lr"], **plan2.slots[slot].attrs)

    with pytest.raises(UsageError) as caught:  # round 2 holds 3 points, whatever its seeds: refused up front
        start_round(load_study(path, ["rounds.round3.top_k=4"]), "round-3", output_dir)
    assert "round 3 takes the best 4 points of round 2, which has only 3 points" in str(caught.value)
    stored = load_plan(start_round(load_study(path), "round-3", output_dir).study.user_attrs)
    assert stored is not None
    # ranking runs gave slots 0, 2, 3: the lucky seed first, and one point twice
    assert [s.attrs["source_trial"] for s in stored.slots] == [2, 4, 0]  # each point's seed-0 slot
    assert [s.attrs["source_value"] for s in stored.slots] == pytest.approx([0.045, 0.065, 0.165])
    assert [s.attrs["source_values"] for s in stored.slots] == [[0.04, 0.05], [0.06, 0.07], [0.03, 0.30]]
    assert stored.notes[0] == (
        "round-2's top 3 by val/error_rate (mean over seeds, with their range): "
        "trial 2 (0.045, 0.04-0.05 over 2 seeds), trial 4 (0.065, 0.06-0.07 over 2 seeds), "
        "trial 0 (0.165, 0.03-0.3 over 2 seeds)"
    )


def test_round2_with_one_seed_trains_a_new_seed_not_a_replay_of_round1(tmp_path: Path) -> None:
    """It used to replay round 1's run step for step (same init, same data order): with a constant
    LR at the same length, the same losses; its "ranking held" then proved nothing."""
    import csv

    path = toy_study(tmp_path, round1={"trials": 2, "steps": 40})
    output = tmp_path / "runs"
    common = ("--output-dir", str(output), "--no-progress", "--workers", "1")
    assert run_tuner("run-round", str(path), "--round", "1", *common).returncode == 0
    second = run_tuner("run-round", str(path), "--round", "2", "--set", "rounds.round2.top_k=1", *common)
    assert second.returncode == 0, second.stderr
    storage = open_storage(sqlite_url(output))
    (rerun,) = optuna.load_study(study_name="toy/round-2", storage=storage).trials
    source = next(
        t
        for t in optuna.load_study(study_name="toy/round-1", storage=storage).trials
        if t.user_attrs["slot"] == rerun.user_attrs["source_trial"]
    )
    assert (
        rerun.params == source.params
        and rerun.user_attrs["max_train_steps"] == 40 == source.user_attrs["max_train_steps"]
    )

    def losses(trial: Any) -> list[str]:
        with (Path(trial.user_attrs["run_dir"]) / "metrics.csv").open() as handle:
            return [row["train/step_loss"] for row in csv.DictReader(handle)]

    assert losses(rerun)[0] != losses(source)[0]  # another init and data order from step 1
    assert rerun.user_attrs["seed_index"] == 1 and "--set seed_index=1" in rerun.user_attrs["reproduce"]
