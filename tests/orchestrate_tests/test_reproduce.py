"""A trial's ``reproduce`` command gives the same run from any folder; a searched ``--set`` is refused."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from pathlib import Path

import yaml

from tests._processes import run, tuner_args
from tests.orchestrate_tests.conftest import load_phase, sqlite_url, toy_study, tuner_env
from tests.spec_tests._support import invoke, single_error


def _tuner(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """``tuner ARGS`` run from ``cwd``; a timeout kills its workers and trials too."""
    return run([sys.executable, "-m", "tuner", *tuner_args(args)], env=tuner_env(), cwd=cwd)


def test_reproduce_keeps_the_overrides_and_works_from_another_folder(tmp_path: Path) -> None:
    toy_study(tmp_path / "project" / "s", round1={"trials": 1})
    project = tmp_path / "project"
    # relative study path and output folder, and an override that is not searched
    done = _tuner(
        "run-round", "s/study.yaml", "--round", "1", "--workers", "1", "--output-dir", "runs",
        "--set", "batch_size=8", "--set", "seed=3", cwd=project,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    (trial,) = load_phase(sqlite_url(project / "runs"), "toy").trials
    command = trial.user_attrs["reproduce"]
    words = shlex.split(command)
    assert words[2] == str((project / "s" / "study.yaml").resolve())
    assert words[words.index("--output-dir") + 1] == str((project / "runs").resolve())
    assert "batch_size=8" in words and "seed=3" in words

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    again = _tuner(*words[1:], "--no-progress", cwd=elsewhere)
    assert again.returncode == 0, again.stdout + again.stderr

    trial_dir = Path(trial.user_attrs["run_dir"])
    (reproduced,) = (project / "runs" / "toy" / "train").iterdir()
    status = json.loads((trial_dir / "status.json").read_text())
    status_again = json.loads((reproduced / "status.json").read_text())
    assert status_again["config_hash"] == status["config_hash"]
    config = yaml.safe_load((reproduced / "config.yaml").read_text())
    assert config["training"]["batch_size"] == 8 and config["seed"] == 3
    assert f"val/error_rate = {trial.value:.6g} at step {trial.user_attrs['best_step']}" in again.stdout


def test_train_command_txt_is_absolute(tmp_path: Path) -> None:
    toy_study(tmp_path / "s")
    done = _tuner(
        "train", "s/study.yaml", "--set", "max_train_steps=10", "--output-dir", "runs", "--no-progress",
        cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    words = shlex.split((tmp_path / "runs" / "toy" / "train" / "run-001" / "command.txt").read_text())
    assert words[2] == str((tmp_path / "s" / "study.yaml").resolve())
    assert words[-1] == str((tmp_path / "runs").resolve())


def test_set_on_a_searched_key_is_refused_by_run_round_and_worker(tmp_path: Path) -> None:
    study = toy_study(tmp_path / "s")
    output = tmp_path / "runs"
    for command in (["run-round", str(study), "--round", "1"], ["worker", str(study), "--phase", "round-1"]):
        message = single_error(invoke(*command, "--set", "optimizer.lr=0.05", "--output-dir", str(output)))
        assert message == (
            "--set optimizer.lr=0.05: optimizer.lr is searched in this phase (search_space[optimizer.lr]), "
            "so the override would be ignored; change or remove the search_space entry instead"
        )
    # a whole container that holds a searched key is refused too
    nested = single_error(
        invoke("run-round", str(study), "--round", "1", "--set", "optimizer={name: sgd, lr: 0.5}")
    )
    assert "optimizer.lr is searched" in nested
    assert not output.exists()  # refused before anything was created


def test_a_later_rounds_reproduce_carries_each_key_once_with_the_value_the_trial_trained(
    tmp_path: Path,
) -> None:
    """The user's ``--set schedule=...`` and ``--set max_train_steps=...`` are overwritten in each
    trial (by round 2's extended schedule and the round's length): the command must not carry the
    user's value next to the trial's, relying on the last one winning."""
    study = yaml.safe_load(toy_study(tmp_path / "s", round1={"trials": 2, "steps": 20}).read_text())
    study["rounds"]["round2"] = {"top_k": 1, "steps": 40}
    path = tmp_path / "s" / "study.yaml"
    path.write_text(yaml.safe_dump(study, sort_keys=False))
    sets = [
        "--set", "schedule=[{shape: linear, steps: 4, start: 0.0, end: 1.0}, {shape: constant}]",
        "--set", "max_train_steps=60",
        "--set", "batch_size=8",
    ]  # fmt: skip
    for number in ("1", "2"):
        done = _tuner(
            "run-round", str(path), "--round", number, *sets, "--output-dir", "runs", "--no-progress",
            cwd=tmp_path,
        )  # fmt: skip
        assert done.returncode == 0, done.stdout + done.stderr
    for phase, steps in (("round-1", 20), ("round-2", 40)):
        for trial in load_phase(sqlite_url(tmp_path / "runs"), "toy", phase).trials:
            words = shlex.split(trial.user_attrs["reproduce"])
            carried = [words[i + 1].partition("=") for i, word in enumerate(words) if word == "--set"]
            keys = [key for key, _, _ in carried]
            assert len(keys) == len(set(keys)), trial.user_attrs["reproduce"]
            value = {key: yaml.safe_load(text) for key, _, text in carried}
            trained = yaml.safe_load((Path(trial.user_attrs["run_dir"]) / "config.yaml").read_text())
            schedule = [
                {k: v for k, v in s.items() if v is not None} for s in trained["training"]["schedule"]
            ]
            assert value["max_train_steps"] == trained["training"]["max_train_steps"] == steps
            assert value["batch_size"] == 8
            if phase == "round-2":  # round 1 trains the file's schedule (with --set) at its length
                assert value["schedule"] == schedule


def test_an_override_is_dropped_only_when_something_later_replaces_its_key() -> None:
    from tuner.playbook.reproduce import overrides_in_effect

    overrides = ["schedule.0.steps=8", "optimizer={name: sgd, momentum: 0.9}", "seed=1", "seed=2"]
    # the trial's whole schedule replaces the warmup's length; its LR sits inside the optimizer
    kept = overrides_in_effect(overrides, {"schedule": [], "optimizer.lr": 0.1})
    assert kept == ["optimizer={name: sgd, momentum: 0.9}", "seed=2"]
    # a later override of a whole container replaces an earlier one inside it
    assert overrides_in_effect(["optimizer.lr=0.1", "optimizer={name: adam}"], {}) == [
        "optimizer={name: adam}"
    ]
