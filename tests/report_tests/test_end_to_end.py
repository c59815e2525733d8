"""The verdicts on what real workers wrote: real ``tuner run-round`` rounds, then ``tuner report --json``.

The other verdict tests build the stored attributes by hand (``builders.py``); here the worker
records them (best steps, run folders, the class count in ``status.json``), so a verdict that
reads something the worker does not write fails here. Tiny rounds: a toy model, 6 trials of 120
steps or 4 of 20.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.orchestrate_tests.conftest import run_tuner, toy_study, tuner_env

HERE = Path(__file__).parent
TIMEOUT_S = 600  # generous: a busy machine is slow, never wrong


def tuner(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """``tuner ARGS`` run in ``cwd`` as a real process forked from the test process's zygote
    (``run_tuner``: the command's code after its imports, its workers and trials real processes
    too; a cold start of each command would import torch again, what these tests are not about);
    a timeout kills it with its workers and trials."""
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(cwd)  # the zygote starts the command in the test process's folder
        return run_tuner(*args, env=tuner_env(), timeout=TIMEOUT_S)


def _study(
    folder: Path, *, objective: str, search: dict[str, Any], workload: str | None = None, **training: Any
) -> Path:
    path = toy_study(folder, search_space={"optimizer.lr": search}, **training)
    document = yaml.safe_load(path.read_text())
    document["objective"]["metric"] = objective
    if workload is not None:
        (folder / f"{workload}.py").write_text((HERE / f"{workload}.py").read_text())
        document["workload"]["name"] = f"{workload}.py:build"
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    return path


def _round_and_report(path: Path) -> dict[str, Any]:
    ran = tuner("run-round", str(path), "--round", "1", "--output-dir", "runs", cwd=path.parent)
    assert ran.returncode == 0, ran.stderr
    report = tuner("report", str(path), "--output-dir", "runs", "--json", cwd=path.parent)
    assert report.returncode == 0, report.stderr
    return json.loads(report.stdout)


def _verdicts(part: dict[str, Any] | None) -> dict[str, dict[str, Any]]:
    assert part is not None
    return {verdict["kind"]: verdict for verdict in part["verdicts"]}


@pytest.fixture(scope="module")
def rising(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    """10 quasi-random LRs in [0.001, 0.3] (log), 120 steps, evals at 100 and 120 only: the loss
    falls as the LR rises, still within the top half of the range (what moves a range)."""
    folder = tmp_path_factory.mktemp("rising")
    path = _study(
        folder,
        objective="val/loss",
        search={"type": "float", "low": 0.001, "high": 0.3, "log": True},
        max_train_steps=120,
        eval_every=100,
        log_every=100,
        round1={"trials": 10, "steps": 120, "sampler": "quasi-random"},
    )
    return path, _round_and_report(path)


def test_a_real_round_whose_loss_falls_with_the_lr_moves_the_range_up(
    rising: tuple[Path, dict[str, Any]],
) -> None:
    path, report = rising
    phase = report["phases"][0]
    assert _verdicts(phase["learning"])["learned"]["level"] == "ok"  # num_classes from status.json
    edge = _verdicts(phase["boundaries"])["range_edge"]
    assert (edge["edge"], edge["trials"]) == ("high", 5)  # the trials in the top half of the range
    assert edge["spearman"] < -0.8 and edge["p_value"] <= 0.025
    keys = {s["key"]: s["new"] for s in report["suggestions"]}
    assert keys["search_space.optimizer.lr.high"] == 3.0  # one decade up (SGD: no ceiling but divergence)
    written = tuner("report", str(path), "--output-dir", "runs", "--write-next", "next.yaml", cwd=path.parent)
    assert written.returncode == 0, written.stderr
    assert (
        yaml.safe_load((path.parent / "next.yaml").read_text())["search_space"]["optimizer.lr"]["high"] > 0.3
    )


def test_a_real_round_with_two_evals_a_run_cannot_place_its_best_steps(
    rising: tuple[Path, dict[str, Any]],
) -> None:
    _, report = rising
    phase = report["phases"][0]
    unresolved = _verdicts(phase["best_step"])["best_step_unresolved"]
    assert (unresolved["evals"], unresolved["late_evals"], unresolved["suggested_eval_every"]) == (2, 2, 20)
    assert not {"best_step_late", "best_step_ok"} & set(_verdicts(phase["best_step"]))
    assert {s["key"]: s["new"] for s in report["suggestions"]}["training.eval_every"] == 20


def test_a_real_round_on_labels_nothing_can_learn_says_so_and_moves_nothing(tmp_path: Path) -> None:
    path = _study(
        tmp_path,
        objective="val/error_rate",
        search={"type": "float", "low": 0.001, "high": 0.3, "log": True},
        workload="chance_workload",
        max_train_steps=20,
        eval_every=5,
        log_every=5,
        round1={"trials": 4, "steps": 20, "sampler": "quasi-random"},
    )
    report = _round_and_report(path)
    phase = report["phases"][0]
    nothing = _verdicts(phase["learning"])["nothing_learned"]
    assert (nothing["classes"], nothing["chance"]) == (10, pytest.approx(0.9))
    assert nothing["best_value"] > 0.81 and phase["next_steps"][0] == nothing["advice"]
    assert list(_verdicts(phase["boundaries"])) == ["not_judged_nothing_learned"]
    assert list(_verdicts(phase["best_step"])) == ["not_judged_nothing_learned"]
    assert report["suggestions"] == []
