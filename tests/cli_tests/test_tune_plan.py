"""``tuner tune --dry-run`` and ``tuner estimate``: the plan within the budget, what each switch
changes in it, and the budgets refused before anything runs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.cli_tests._tune_support import dry_run_plan, store_tune_state, tune_study
from tests.spec_tests._support import invoke, single_error


@pytest.mark.parametrize(
    ("budget", "expected"),
    [
        ("0", "--budget 0: must be more than 0 training steps"),
        ("abc", "--budget abc: expected training steps (e.g. 5000) or a duration (e.g. 2h, 30m, 90s)"),
        ("2x", "--budget 2x: expected training steps (e.g. 5000) or a duration (e.g. 2h, 30m, 90s)"),
    ],
)
def test_a_bad_budget_is_one_line_and_exit_2(tmp_path: Path, budget: str, expected: str) -> None:
    path = tune_study(tmp_path)
    result = invoke("tune", str(path), "--budget", budget, "--output-dir", str(tmp_path / "runs"))
    assert single_error(result) == expected
    assert not (tmp_path / "runs").exists()


def test_a_budget_too_small_for_round_2_says_what_it_needs(tmp_path: Path) -> None:
    path = tune_study(tmp_path)
    result = invoke("tune", str(path), "--budget", "30", "--dry-run", "--output-dir", str(tmp_path / "runs"))
    assert "round 2 needs at least 40 (one run of 40 steps); raise --budget" in single_error(result)


def test_dry_run_prints_the_plan_within_the_budget_and_runs_nothing(tmp_path: Path) -> None:
    plan = dry_run_plan(tune_study(tmp_path), 400, tmp_path / "runs")
    phases = {p["phase"]: p for p in plan["phases"]}
    # round 2 at the file's seeds, 3 x 40 (2 seeds would be more than half the budget); 20% (80)
    # kept for the round after it; round 1 the rest, at full length (40 steps, not the file's 10)
    assert phases["toy/round-1"]["trials"] == 5 and phases["toy/round-1"]["steps_per_trial"] == 40
    assert phases["toy/round-2"]["steps"] == 120
    # round 3 (decided on round 2's report) takes what is left
    assert phases["toy/round-3"] == {
        "phase": "toy/round-3", "trials": None, "steps_per_trial": None, "steps_ran": 0,
        "steps_to_run": 80, "steps": 80, "upper_bound": True, "done": False,
    }  # fmt: skip
    assert plan["steps"] == 200 + 120 + 80 == 400
    assert not (tmp_path / "runs").exists()


def test_estimate_gives_the_dry_run_totals_of_a_study_being_tuned(tmp_path: Path) -> None:
    """Round 1 done (built) in an earlier run: ``tune --dry-run`` and ``tuner estimate`` plan the
    rest alike, from what ran plus what is planned."""
    from tests.report_tests.builders import add_trial, study
    from tuner.playbook.decision_log import Stage

    built = study(tmp_path, round1={"steps": 10, "trials": 8})
    phase = built.start("round-1")
    for slot in range(6):  # 6 of the 8 trials ran
        add_trial(phase, slot, 0.1 * (slot + 1), {"optimizer.lr": 0.02 * (slot + 1)}, best_step=10)
    first = Stage("toy", "round-1", str(built.path), [], 8, 80, steps_per_trial=10)
    store_tune_state(built, first, "400", 400)
    common = ("--output-dir", str(built.output_dir), "--json")
    dry = invoke("tune", str(built.path), "--budget", "400", "--dry-run", *common)
    assert dry.exit_code == 0, dry.output
    planned = json.loads(dry.stdout)["plan"]
    estimate = invoke("estimate", str(built.path), *common)
    assert estimate.exit_code == 0, estimate.output
    assert json.loads(estimate.stdout)["tune"] == planned
    phases = {p["phase"]: p for p in planned["phases"]}
    assert phases["toy/round-1"]["steps_ran"] == 60 and phases["toy/round-1"]["steps_to_run"] == 20
    # round 2 at the file's 1 seed (2 seeds, 240 steps, would be more than half the budget): 120;
    # the round decided on its report takes the rest, 400 - 80 - 120
    assert phases["toy/round-2"]["steps"] == 120
    assert phases["toy/round-3"]["steps"] == 200 and phases["toy/round-3"]["upper_bound"]
    assert planned["steps"] == 400


def _plan(tmp_path: Path, *flags: str) -> dict[str, tuple[int, int]]:
    """``tune --budget 400 --dry-run``'s phases: trials and steps."""
    plan = dry_run_plan(tune_study(tmp_path), 400, tmp_path / "runs", *flags)
    return {p["phase"]: (p["trials"], p["steps"]) for p in plan["phases"]}


def test_each_switch_changes_only_its_own_step_of_the_plan(tmp_path: Path) -> None:
    # by default round 1 trains at full length (40 steps) with what round 2 (at the file's
    # seeds: 2 would be more than half the budget) and round 3's 20% (80) leave; its suggestions
    # are reported, never searched, so the flags that hold them back change nothing
    full = {"toy/round-1": (5, 200), "toy/round-2": (3, 120), "toy/round-3": (None, 80)}
    assert _plan(tmp_path / "default") == full
    assert _plan(tmp_path / "full-apply", "--no-apply-suggestions") == full
    # --short-round1: round 1 at the file's 10 steps keeps half the rest for a next search;
    # round 3 takes what is left (<= 180, an upper bound: "steps" None)
    short = {"toy/round-1": (10, 100), "toy/round-2": (3, 120), "toy/round-3": (None, 180)}
    assert _plan(tmp_path / "short", "--short-round1") == short

    def plan(folder: str, *flags: str) -> dict[str, tuple[int, int]]:
        return _plan(tmp_path / folder, "--short-round1", *flags)

    # --no-extra-seeds: round 3 only if it trains longer; the plan keeps its share for that
    assert plan("seeds", "--no-extra-seeds") == short
    # --no-extra-round: no share kept; round 2's seeds take what round 1 leaves unused (before
    # round 3 existed), or with --no-extra-seeds too, round 2 keeps the file's seeds
    no_round = {"toy/round-1": (14, 140), "toy/round-2": (6, 240)}
    assert plan("round", "--no-extra-round") == no_round
    fewer_seeds = {"toy/round-1": (14, 140), "toy/round-2": (3, 120)}
    assert plan("neither-extra", "--no-extra-round", "--no-extra-seeds") == fewer_seeds
    # one search only, or no suggestions applied: no reserve, round 1 takes the rest
    whole = {"toy/round-1": (20, 200), "toy/round-2": (3, 120), "toy/round-3": (None, 80)}
    assert plan("searches", "--max-searches", "1") == whole
    assert plan("apply", "--no-apply-suggestions") == whole
    assert plan("neither", "--no-apply-ranges", "--no-apply-length") == whole
    # one kind of suggestion still may be applied: the reserve for a next search is kept
    assert plan("length", "--no-apply-length") == short


def test_a_budget_too_small_for_a_full_length_round_1_keeps_the_files_length(tmp_path: Path) -> None:
    """200 steps: round 2 (3 x 40) and round 3's share leave no room for 3 full-length trials;
    round 1 trains the file's 10 steps instead, and the plan says why."""
    plan = dry_run_plan(tune_study(tmp_path), 200, tmp_path / "runs")
    phases = {p["phase"]: (p["trials"], p["steps_per_trial"]) for p in plan["phases"]}
    assert phases["toy/round-1"][1] == 10
    [note] = [
        n for n in plan["notes"] if n.startswith("round 1 at the study file's length, not at full length:")
    ]
    assert "round 1 needs at least 3 trials of 40 steps" in note


def test_each_suggestion_is_held_back_only_by_the_switch_of_its_kind() -> None:
    from tuner.playbook.tune_plan import Switches

    lr, drop = ("search_space", "optimizer.lr", "high"), ("search_space", "workload.act", "choices")
    length, every = ("training", "max_train_steps"), ("training", "eval_every")
    steps = ("rounds", "round1", "steps")
    # by default round 1 trains at full length and nothing it suggests is searched again
    full = Switches()
    assert not full.may_apply
    assert {full.applies(p) for p in (lr, drop, length, every, steps)} == {
        "round 1 trained at full length: --short-round1 searches again on them"
    }
    short = Switches(full_length_round1=False)  # --short-round1: each kind held back by its own flag
    assert [short.applies(p) for p in (lr, drop, length, every, steps)] == [None] * 5
    ranges_off = Switches(full_length_round1=False, apply_ranges=False)
    assert [ranges_off.applies(p) for p in (lr, drop, length)] == ["--no-apply-ranges"] * 2 + [None]
    length_off = Switches(full_length_round1=False, apply_length=False)
    assert [length_off.applies(p) for p in (lr, length, every, steps)] == [None] + ["--no-apply-length"] * 3
    no_apply = Switches(full_length_round1=False, apply_suggestions=False)
    assert {no_apply.applies(p) for p in (lr, length)} == {"--no-apply-suggestions"}
    assert ranges_off.may_apply and length_off.may_apply
    assert not Switches(full_length_round1=False, apply_ranges=False, apply_length=False).may_apply
