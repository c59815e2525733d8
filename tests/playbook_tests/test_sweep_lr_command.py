"""``tuner sweep-lr`` end to end on the toy workload: fit steps, divergence, the stored length."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import optuna
import yaml

from tests._processes import run
from tests.orchestrate_tests.conftest import run_tuner, sqlite_url, toy_study, tuner_env
from tuner.orchestrate import open_storage
from tuner.playbook.study_results import stored_recommendation


def _sweep_study(folder: Path, **sweep: Any) -> Path:
    """The toy study without max_train_steps; a weight above 5 gives a NaN loss (lr 100 diverges)."""
    path = toy_study(folder, options={"nan_above_weight": 5.0})
    document = yaml.safe_load(path.read_text())
    document["training"].pop("max_train_steps")
    document["rounds"]["round1"] = {"trials": 2, "length_fraction": 0.5}
    document["sweep_lr"] = {"grid": [0.01, 0.1, 1.0, 100.0], "max_steps": 60, "fit_threshold": 0.9, **sweep}
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    return path


def _sweep(path: Path, *extra: str) -> Any:
    return run_tuner(
        "sweep-lr", str(path), "--output-dir", str(path.parent / "runs"), "--no-progress", *extra
    )


def _trials(path: Path, phase: str = "sweep-lr") -> list[Any]:
    storage = open_storage(sqlite_url(path.parent / "runs"))
    return optuna.load_study(study_name=f"toy/{phase}", storage=storage).trials


def test_sweep_finds_the_fewest_steps_to_fit_and_validate_and_later_phases_use_them(tmp_path: Path) -> None:
    path = _sweep_study(tmp_path)
    done = _sweep(path, "--max-failed", "1", "--workers", "1")  # one worker: the largest LR first
    # lr 100 diverged: a result, not a failure; the failure budget of 1 is untouched
    assert done.returncode == 0, done.stderr
    assert "constant learning rate (no warmup, no decay)" in done.stderr
    assert "augmentation off" in done.stderr
    table = done.stdout
    # lr 1 fit at step 10 before lr 0.01 started: 0.01 stopped there, it could not win
    assert "0.01  over 10" in table and "stopped (cannot win)" in table
    assert "- lr >= 100 diverged (1 of 4 grid points)" in table
    assert "- max_train_steps = 10: lr 1 fit the training set (train/accuracy >= 0.9) in 10 steps" in table
    trials = {t.params["optimizer.lr"]: t for t in _trials(path)}
    assert (
        trials[100.0].user_attrs["failure_reason"] == "diverged" and not trials[100.0].user_attrs["retried"]
    )
    assert trials[1.0].state.name == "COMPLETE" and trials[1.0].user_attrs["fit_step"] == 10
    assert trials[1.0].user_attrs["stopped_early"] and trials[1.0].user_attrs["final_step"] == 10
    assert trials[0.01].user_attrs["fit_step"] is None and trials[0.01].user_attrs["final_step"] == 10
    assert trials[0.01].state.name == "PRUNED" and trials[0.01].user_attrs["outpaced_at"] == 10
    storage = open_storage(sqlite_url(path.parent / "runs"))
    assert stored_recommendation(storage, "toy") == 10

    again = _sweep(path, "--json")  # a re-run continues the phase: nothing left to train
    assert again.returncode == 0, again.stderr
    result = json.loads(again.stdout)
    assert result["finished"] and result["recommended_max_train_steps"] == 10
    assert len(_trials(path)) == 4

    # validate reads the stored length from the output folder it is given (not the default `runs`)
    output = str(tmp_path / "runs")
    found = run_tuner("validate", str(path), "--output-dir", output, "--no-build")
    assert found.returncode == 0, found.stderr
    assert "max_train_steps 10 (from tuner sweep-lr)" in found.stdout
    assert "round 1: 2 trials of 5 steps" in found.stdout
    assert "not set" not in found.stdout and found.stderr == ""
    by_url = run_tuner("validate", str(path), "--storage", sqlite_url(tmp_path / "runs"), "--no-build")
    assert "max_train_steps 10 (from tuner sweep-lr)" in by_url.stdout, by_url.stderr
    # without --output-dir: `runs` under the current folder, which holds no storage here
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    default = run(
        [sys.executable, "-m", "tuner", "validate", str(path), "--no-build"], env=tuner_env(), cwd=elsewhere
    )
    assert default.returncode == 0, default.stderr
    assert "max_train_steps not set" in default.stdout
    assert "note: training.max_train_steps is not set" in default.stdout
    assert not (elsewhere / "runs").exists()  # validate reads a storage, never creates one

    # round 1 has no max_train_steps in the file: it is sweep-lr's, and says so
    round1 = run_tuner(
        "run-round", str(path), "--round", "1", "--output-dir", str(tmp_path / "runs"), "--no-progress"
    )
    assert round1.returncode == 0, round1.stderr
    assert "round-1: 2 trials of 5 steps" in round1.stderr
    assert "max_train_steps 10 (from tuner sweep-lr)" in round1.stderr
    assert {t.user_attrs["max_train_steps"] for t in _trials(path, "round-1")} == {5}


def test_fastest_lr_at_the_edge_is_extended_into_the_same_phase(tmp_path: Path) -> None:
    path = _sweep_study(tmp_path, grid=[0.01, 0.03, 0.1])
    done = _sweep(path, "--json")
    assert done.returncode == 0, done.stderr
    verdicts = {v["kind"]: v for v in json.loads(done.stdout)["verdicts"]}
    edge = verdicts["fastest_at_edge"]
    assert (edge["edge"], edge["lr"]) == ("high", 0.1)
    assert edge["new_points"] == [0.333, 1.11]  # the edge's own spacing: x 3.33
    extended = _sweep(path, "--extend")
    assert extended.returncode == 0, extended.stderr
    assert "extended with lr 0.333, 1.11" in extended.stderr
    assert sorted(t.params["optimizer.lr"] for t in _trials(path)) == [0.01, 0.03, 0.1, 0.333, 1.11]


def test_nothing_fits_says_so_and_stores_no_length(tmp_path: Path) -> None:
    path = _sweep_study(tmp_path, grid=[0.001, 0.003, 0.01], max_steps=20)
    done = _sweep(path, "--json")
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["recommended_max_train_steps"] is None
    kinds = [v["kind"] for v in result["verdicts"]]
    assert "nothing_fits" in kinds
    assert stored_recommendation(open_storage(sqlite_url(tmp_path / "runs")), "toy") is None
    round1 = run_tuner("run-round", str(path), "--round", "1", "--output-dir", str(tmp_path / "runs"))
    assert round1.returncode == 2
    assert "rounds.round1: set steps, or set training.max_train_steps" in round1.stderr


def test_a_grid_where_every_lr_diverged_says_go_lower_and_extend_goes_lower(tmp_path: Path) -> None:
    path = _sweep_study(tmp_path, grid=[100.0, 316.0, 1000.0], max_steps=20)
    done = _sweep(path)
    assert done.returncode == 0, done.stderr
    assert "every LR diverged" in done.stdout and "train longer" not in done.stdout
    assert "run lr 10, 31.6 too: tuner sweep-lr" in done.stdout
    extended = _sweep(path, "--extend")
    assert extended.returncode == 0, extended.stderr
    assert "extended with lr 10, 31.6" in extended.stderr
    assert sorted(t.params["optimizer.lr"] for t in _trials(path)) == [10.0, 31.6, 100.0, 316.0, 1000.0]
