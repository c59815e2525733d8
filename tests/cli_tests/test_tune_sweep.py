"""``tuner tune`` on a study whose ``max_train_steps`` is unknown: sweep-lr first, within its share
of the budget, then the rounds at its answer, and what the log says of its verdicts."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

from tests.cli_tests._tune_support import (
    built_sweep,
    dry_run_plan,
    trained_steps,
    tune_after,
    tune_args,
    tune_study,
)
from tests.orchestrate_tests.conftest import run_tuner, sqlite_url
from tests.spec_tests._support import invoke, single_error


def _sweep_study(folder: Path) -> Path:
    """The toy study leaving max_train_steps to sweep-lr: 3 LRs capped at 100 steps each."""
    path = tune_study(folder)
    document = yaml.safe_load(path.read_text())
    del document["training"]["max_train_steps"]
    document["sweep_lr"] = {"grid": [0.01, 0.1, 1.0], "max_steps": 100}
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    return path


def test_the_sweep_is_capped_to_its_share_and_the_rounds_sized_after_it(tmp_path: Path) -> None:
    plan = dry_run_plan(_sweep_study(tmp_path), 500, tmp_path / "runs")
    sweep, *rounds = plan["phases"]
    # 3 x 100 steps would exceed 20% of 500: each LR capped at 100 // 3 on the eval grid (10)
    assert (sweep["phase"], sweep["trials"], sweep["steps_per_trial"]) == ("toy/sweep-lr", 3, 30)
    assert sweep["upper_bound"] and sweep["steps"] == 90
    assert [r["steps"] for r in rounds] == [None, None] and not plan["complete"]


def test_no_sweep_without_a_known_length_is_one_line(tmp_path: Path) -> None:
    path = _sweep_study(tmp_path)
    result = invoke(
        "tune", str(path), "--budget", "500", "--no-sweep", "--output-dir", str(tmp_path / "runs")
    )
    assert "--no-sweep skips tuner sweep-lr" in single_error(result)


def test_an_unknown_length_runs_the_sweep_first_and_the_rounds_at_its_answer(tmp_path: Path) -> None:
    path = _sweep_study(tmp_path)
    document = yaml.safe_load(path.read_text())
    document["sweep_lr"]["max_steps"] = 10
    document["rounds"]["round2"] = {"top_k": 1}
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    output_dir = tmp_path / "runs"
    done = run_tuner(
        "tune", str(path), "--budget", "150", "--no-apply-suggestions", "--no-extra-round", "--json",
        "--no-progress", "--output-dir", str(output_dir),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    payload = json.loads(done.stdout)
    assert [s["phase"] for s in payload["stages"]] == ["sweep-lr", "round-1", "round-2"]
    sweep = payload["decisions"][1]
    assert sweep["kind"] == "sweep_planned" and sweep["numbers"]["steps"] == 30  # 3 LRs x 10 <= 20%
    fallback = [d for d in payload["decisions"] if d["kind"] == "max_train_steps_fallback"]
    length = fallback[0]["numbers"]["max_train_steps"] if fallback else None
    from tuner.orchestrate import open_storage
    from tuner.playbook.study_results import stored_recommendation

    length = length or stored_recommendation(open_storage(sqlite_url(output_dir)), "toy")
    assert payload["delivered_model"]["max_train_steps"] == length  # round 2 at the sweep's answer
    assert payload["plan"]["steps_ran"] == trained_steps(output_dir) <= 150


def _swept(tmp_path: Path, fits: dict[float, tuple[int | None, int]]) -> tuple[Any, Any]:
    """A study whose sweep-lr (grid 0.01, 0.1, 1.0; cap 100) is built, not trained: ``fits`` maps
    an LR to its (fit step or None, validation best step); the study and its sweep phase."""
    from tests.report_tests.builders import add_trial

    built, sweep, plan = built_sweep(tmp_path)
    for slot, planned in enumerate(plan.slots):
        fit_step, best_step = fits[planned.values["optimizer.lr"]]
        add_trial(
            sweep, slot, 0.1, planned.values, best_step=best_step, max_train_steps=100,
            final_step=fit_step or 100, best_fit_value=1.0 if fit_step else 0.9, final_train_loss=0.1,
            **({"fit_step": fit_step} if fit_step else {}), **planned.attrs,
        )  # fmt: skip
    return built, sweep


def test_validation_best_long_before_the_fit_is_a_line_of_the_log_and_the_fit_length_stays(
    tmp_path: Path,
) -> None:
    """sweep-lr (built, not trained) done in an earlier run: lr 0.1 fit the training set at step
    80 while validation was best at step 20; tune logs it once, with the length the rounds train
    (the fit, 80) and the one that follows on noisy labels (2 x 20 = 40)."""
    from tuner.playbook.decision_log import Stage
    from tuner.playbook.study_results import store_recommendation

    # lr -> (fit step, best step); 0.01 does not fit
    built, sweep = _swept(tmp_path, {0.01: (None, 100), 0.1: (80, 20), 1.0: (100, 90)})
    store_recommendation(sweep, 80)
    first = Stage("toy", "sweep-lr", str(built.path), [], 3, 300, True, done=True, steps_per_trial=100)
    done = tune_after(built, first, 520, "--no-apply-suggestions")
    assert done.returncode == 0, done.stderr
    payload = json.loads(done.stdout)
    (logged,) = [d for d in payload["decisions"] if d["kind"] == "sweep_best_before_fit"]
    assert logged["stage"] == "toy/sweep-lr"
    assert logged["numbers"] == {
        "best_step": 20, "fit_step": 80, "max_train_steps": 80, "noisy_labels_steps": 40, "lr": 0.1
    }  # fmt: skip
    assert (
        "validation was best at step 20 (lr 0.1), long before the training set was fit at step 80"
        in (logged["text"])
    )
    assert "--set max_train_steps=40" in logged["text"] and "validation was best at step 20" in done.stderr
    assert payload["delivered_model"]["max_train_steps"] == 80
    again = run_tuner(*tune_args(built, 520, "--no-apply-suggestions"))  # said once: a re-run reads it back
    assert again.returncode == 0, again.stderr
    assert [d["kind"] for d in json.loads(again.stdout)["decisions"]].count("sweep_best_before_fit") == 1


def test_a_sweep_that_fit_nothing_with_validation_best_early_says_so_in_its_fallback(tmp_path: Path) -> None:
    """sweep-lr (built, not trained) done in an earlier run: no LR fit the training set within its
    cap of 100 steps, and validation was best at step 20 (in the first half: as with noisy labels).
    The rounds train the cap, and the log says why an early best costs nothing there (each run
    keeps its best checkpoint) and which length to try instead, not "longer keeps helping".
    Budget 600: the sweep's 300 steps, round 2 at 2 seeds x 100 (200: half the budget holds
    them), round 1 the one trial of 100 left."""
    from tuner.orchestrate import open_storage
    from tuner.playbook.budget import parse_budget
    from tuner.playbook.decision_log import Decision, Stage, TuneState, save_state

    built, _ = _swept(tmp_path, dict.fromkeys((0.01, 0.1, 1.0), (None, 20)))  # no LR fits
    first = Stage("toy", "sweep-lr", str(built.path), [], 3, 300, True, done=True, steps_per_trial=100)
    planned_sweep = Decision("sweep_planned", first.key, "sweep-lr: 3 trials", {"cap": 100, "steps": 300})
    state = TuneState(parse_budget("600"), 600, [first], [planned_sweep])
    save_state(open_storage(built.storage_url), built.name, state)
    done = run_tuner(*tune_args(built, 600, "--no-apply-suggestions", "--no-extra-round"))
    assert done.returncode == 0, done.stderr
    payload = json.loads(done.stdout)
    (fallback,) = [d for d in payload["decisions"] if d["kind"] == "max_train_steps_fallback"]
    assert fallback["numbers"] == {"max_train_steps": 100, "best_step": 20, "noisy_labels_steps": 40}
    assert "validation was best at step 20 of it, as with noisy labels" in fallback["text"]
    assert "--set max_train_steps=40" in fallback["text"] and "longer keeps helping" not in fallback["text"]
    assert payload["delivered_model"]["max_train_steps"] == 100
    # the rounds' headers name the sweep's cap, which tune set: the file leaves the field out
    assert "max_train_steps 100 (from tuner sweep-lr's cap: no LR fit within it)" in done.stderr
    assert "(from the study file)" not in done.stderr
