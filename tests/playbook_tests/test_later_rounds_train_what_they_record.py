"""Later rounds train what they record: real ``tuner run-round`` processes on the toy workload.

Each round-N trial's run folder (``config.yaml``, ``metrics.csv``) is what it actually trained;
it must agree with the source trial's searched values and recorded multiplier.
"""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

import optuna
import pytest
import yaml

from tests.orchestrate_tests.conftest import run_tuner, sqlite_url, toy_study
from tuner.orchestrate import open_storage


def _run_round(path: Path, output: Path, number: int, *sets: str) -> None:
    words = [w for s in sets for w in ("--set", s)]
    done = run_tuner(
        "run-round", str(path), "--round", str(number), *words, "--output-dir", str(output), "--no-progress"
    )
    assert done.returncode == 0, done.stdout + done.stderr


def _trials(output: Path, phase: str) -> list[Any]:
    return optuna.load_study(study_name=f"toy/{phase}", storage=open_storage(sqlite_url(output))).trials


def _trained(trial: Any) -> dict[str, Any]:
    """The training section the trial's run folder recorded (what it really trained)."""
    config = yaml.safe_load((Path(trial.user_attrs["run_dir"]) / "config.yaml").read_text())
    training = config["training"]
    training["schedule"] = [{k: v for k, v in seg.items() if v is not None} for seg in training["schedule"]]
    return training


def _logged_lr(trial: Any) -> dict[int, float]:
    with (Path(trial.user_attrs["run_dir"]) / "metrics.csv").open() as handle:
        return {int(row["step"]): float(row["lr"]) for row in csv.DictReader(handle) if row.get("lr")}


def test_round2_extends_each_source_trials_own_searched_warmup(tmp_path: Path) -> None:
    schedule = [
        {"shape": "linear", "steps": 4, "start": 0.0, "end": 1.0},  # the file's warmup: searched
        {"shape": "constant"},
        {"shape": "linear", "steps": 5, "start": 1.0, "end": 0.0},
    ]
    path = toy_study(
        tmp_path,
        search_space={"schedule.0.steps": {"type": "int", "low": 2, "high": 12}},
        round1={"trials": 3, "steps": 20},
        schedule=schedule,
        log_every=1,
    )
    output = tmp_path / "runs"
    _run_round(path, output, 1)
    _run_round(path, output, 2, "rounds.round2.top_k=3")
    warmup_of = {t.user_attrs["slot"]: t.params["schedule.0.steps"] for t in _trials(output, "round-1")}
    assert len(set(warmup_of.values()) - {4}) >= 2, warmup_of  # the search really varied it

    round2 = _trials(output, "round-2")
    assert len(round2) == 3 and {t.state.name for t in round2} == {"COMPLETE"}
    for trial in round2:
        warmup = warmup_of[trial.user_attrs["source_trial"]]
        assert trial.params["schedule.0.steps"] == warmup
        # round 1 ran 20 steps (warmup, constant 15 - warmup, decay 5); at 40 the constant grows
        assert _trained(trial)["schedule"] == [
            {"shape": "linear", "steps": warmup, "start": 0.0, "end": 1.0},
            {"shape": "constant", "steps": 35 - warmup, "start": 1.0, "end": 1.0},
            {"shape": "linear", "steps": 5, "start": 1.0, "end": 0.0},
        ]
        lr = _logged_lr(trial)  # row k is the LR of the k-th update (0-based step k - 1)
        assert lr[warmup] == pytest.approx(0.1 * (warmup - 1) / warmup)  # its last warmup step
        assert lr[warmup + 1] == pytest.approx(0.1)  # the peak, exactly where its own warmup ends
        assert f'"steps": {warmup}, "start": 0.0' in trial.user_attrs["reproduce"]


def _with_rounds(path: Path, **rounds: dict[str, Any]) -> Path:
    study = yaml.safe_load(path.read_text())
    study["rounds"].update(rounds)
    path.write_text(yaml.safe_dump(study, sort_keys=False))
    return path


def test_round3_keeps_round2s_lr_multiplier_when_the_lr_is_not_searched(tmp_path: Path) -> None:
    # The LR is not searched: round 2's x4 lives in its slots' `sets`, not in the trials' params.
    path = _with_rounds(
        toy_study(
            tmp_path,
            search_space={"schedule.0.steps": {"type": "int", "low": 2, "high": 6}},
            round1={"trials": 2, "steps": 20},
            schedule=[{"shape": "linear", "steps": 4, "start": 0.0, "end": 1.0}, {"shape": "constant"}],
        ),
        round2={"top_k": 1, "steps": 30, "lr_multipliers": [0.5, 4.0]},
        round3={"top_k": 2, "steps": 40},
    )
    output = tmp_path / "runs"
    for number in (1, 2, 3):
        _run_round(path, output, number)
    lr_of = {t.user_attrs["slot"]: _trained(t)["optimizer"]["lr"] for t in _trials(output, "round-2")}
    assert sorted(lr_of.values()) == pytest.approx([0.05, 0.4])

    round3 = _trials(output, "round-3")
    assert len(round3) == 2 and {t.state.name for t in round3} == {"COMPLETE"}
    for trial in round3:
        trained_lr = _trained(trial)["optimizer"]["lr"]
        assert trained_lr == pytest.approx(lr_of[trial.user_attrs["source_trial"]])
        assert max(_logged_lr(trial).values()) == pytest.approx(trained_lr)
        assert f"--set optimizer.lr={trained_lr}" in trial.user_attrs["reproduce"]
