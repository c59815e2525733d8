"""``tuner tune``'s decisions: each automatic step turned off by its own flag, the shorter length
it applies when round 1's best steps come early, its log line when sweep-lr saw validation best
long before the fit, and a duration budget as a wall-clock limit."""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.cli_tests.test_tune import store_tune_state, tune_after, tune_args, tune_study
from tests.orchestrate_tests.conftest import run_tuner
from tests.spec_tests._support import invoke


def _plan(tmp_path: Path, *flags: str) -> dict[str, tuple[int, int]]:
    """``tune --budget 400 --dry-run``'s phases: trials and steps."""
    path = tune_study(tmp_path)
    common = ("--dry-run", "--json", "--output-dir", str(tmp_path / "runs"))
    result = invoke("tune", str(path), "--budget", "400", *common, *flags)
    assert result.exit_code == 0, result.output
    return {p["phase"]: (p["trials"], p["steps"]) for p in json.loads(result.stdout)["plan"]["phases"]}


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
    path = tune_study(tmp_path)
    common = ("--dry-run", "--json", "--output-dir", str(tmp_path / "runs"))
    result = invoke("tune", str(path), "--budget", "200", *common)
    assert result.exit_code == 0, result.output
    plan = json.loads(result.stdout)["plan"]
    phases = {p["phase"]: (p["trials"], p["steps_per_trial"]) for p in plan["phases"]}
    assert phases["toy/round-1"][1] == 10
    [note] = [
        n for n in plan["notes"] if n.startswith("round 1 at the study file's length, not at full length:")
    ]
    assert "round 1 needs at least 3 trials of 40 steps" in note


def test_early_best_steps_after_round_1_give_the_next_search_a_shorter_length(tmp_path: Path) -> None:
    """Round 1 (built, not trained: 8 trials of 100 steps, every best step at 10, no trend in the
    LR) done in an earlier run: the report suggests max_train_steps 200 -> 40; tune applies it to
    a next study whose round 1 (rescaled with it) and round 2 train the shorter length."""
    from tests.report_tests.builders import add_trial, study
    from tuner.playbook.decision_log import Stage

    built = study(tmp_path, round1={"steps": 100, "trials": 8}, round2={"top_k": 1}, max_train_steps=200)
    phase = built.start("round-1")
    values = [0.30, 0.10, 0.25, 0.15, 0.20, 0.12, 0.28, 0.18]  # no trend along the LR
    for slot, value in enumerate(values):
        add_trial(phase, slot, value, {"optimizer.lr": 0.01 * 100 ** (slot / 7)}, best_step=10)
    first = Stage("toy", "round-1", str(built.path), [], 8, 800, done=True, steps_per_trial=100)
    done = tune_after(built, first, 1000)
    assert done.returncode == 0, done.stderr
    payload = json.loads(done.stdout)
    applied = next(d for d in payload["decisions"] if d["kind"] == "suggestions_applied")
    assert "training.max_train_steps 200 -> 40" in applied["text"]
    following = yaml.safe_load(Path(applied["numbers"]["file"]).read_text())
    assert following["training"]["max_train_steps"] == 40
    assert following["rounds"]["round1"]["steps"] == 20  # rescaled with it: 100 x 40 / 200
    stages = {s["study"] + "/" + s["phase"]: s for s in payload["stages"]}
    assert stages["toy-2/round-1"]["steps_per_trial"] == 20
    delivered = payload["delivered_model"]
    assert delivered["phase"] == "round-2" and "/toy-2/" in delivered["checkpoint"]
    status = json.loads((Path(delivered["checkpoint"]).parents[1] / "status.json").read_text())
    assert status["step"] == 40  # round 2 trained the shorter length
    assert payload["plan"]["steps_ran"] <= 1000


def _rounds_1_and_2_done(
    tmp_path: Path, best_step: int, *, failed: bool = False, weight_decay: bool = False, eval_every: int = 10
) -> tuple[Any, list[Any]]:
    """Rounds 1 and 2 built, not trained (round 1: 8 trials of 10 steps; round 2: its 3 points at
    max_train_steps 80, one seed, every best step at ``best_step``; ``failed``: the third point
    failed; ``weight_decay``: searched beside the LR), and their stages as a tune of ``--budget
    1000`` left them done."""
    from tests.report_tests.builders import add_trial, study
    from tuner.playbook.decision_log import Stage
    from tuner.playbook.plan import load_plan

    space: dict[str, Any] = {"optimizer.lr": {"type": "float", "low": 0.01, "high": 1.0, "log": True}}
    if weight_decay:
        space["optimizer.weight_decay"] = {"type": "float", "low": 1e-5, "high": 0.1, "log": True}
    built = study(
        tmp_path,
        round1={"steps": 10, "trials": 8},
        max_train_steps=80,
        search_space=space,
        eval_every=eval_every,
    )
    phase = built.start("round-1")
    for slot in range(8):
        params = {"optimizer.lr": 0.02 * (slot + 1)} | (
            {"optimizer.weight_decay": 1e-3} if weight_decay else {}
        )
        add_trial(phase, slot, 0.1 + 0.01 * slot, params, best_step=10)
    second = built.start("round-2")
    for slot, planned in enumerate(load_plan(second.user_attrs).slots):  # type: ignore[union-attr]
        if failed and slot == 2:
            add_trial(second, slot, None, planned.values, state="FAIL", max_train_steps=80, **planned.attrs)
            continue
        add_trial(second, slot, 0.05 + 0.01 * slot, planned.values, best_step=best_step, **planned.attrs)
    stages = [
        Stage("toy", "round-1", str(built.path), [], 8, 80, done=True, steps_per_trial=10),
        Stage("toy", "round-2", str(built.path), [], None, 240, done=True, steps_per_trial=80),
    ]
    return built, stages


@pytest.mark.parametrize(
    ("best_step", "kind", "failed"),
    [(80, "round3_longer", False), (40, "round3_seeds", False), (40, "round3_seeds", True)],
    ids=["still-improving", "fine", "fine-one-point-failed"],
)
def test_the_round_after_round_2_is_decided_on_its_report(
    tmp_path: Path, best_step: int, kind: str, failed: bool
) -> None:
    """Rounds 1 and 2 (built, not trained: round 2's 3 points at max_train_steps 80, one seed,
    every best step at ``best_step``) done in an earlier run of ``--budget 1000``: 680 steps are
    left. Best steps at the end (the report: "still improving") -> round 3 trains round 2's
    chosen point 4x longer (320 steps, the most 680 steps hold on 2 seeds is 340) on 2 new seeds;
    best steps mid-run ("looks right") -> round 2's 3 points on 2 new seeds each at 80 steps,
    the delivered model pooling each point's 3 runs; with round 2's third point failed, its 2
    completed points only (760 steps, the failed trial having trained none: 4 new seeds each)."""
    built, stages = _rounds_1_and_2_done(tmp_path, best_step, failed=failed)
    store_tune_state(built, stages, "1000", 1000)
    done = run_tuner(*tune_args(built, 1000, "--no-apply-suggestions"))  # round 2 ran: no next search
    assert done.returncode == 0, done.stderr
    payload = json.loads(done.stdout)
    decision = next(d for d in payload["decisions"] if d["kind"].startswith("round3_"))
    assert decision["kind"] == kind
    assert decision["numbers"]["left"] == (760 if failed else 680)  # a failed trial trained no step here
    third = next(s for s in payload["stages"] if s["phase"] == "round-3")
    statuses = sorted((built.output_dir / "toy" / "round-3").glob("trial-*/status.json"))
    trained = [json.loads(status.read_text())["step"] for status in statuses]
    model = payload["delivered_model"]
    if kind == "round3_longer":
        assert "still improving" in decision["text"] and "80 -> 320 steps" in decision["text"]
        assert "rounds.round3.steps=320" in third["sets"] and decision["numbers"]["seeds"] == 2
        assert trained == [320, 320]
        # the longer point is a point of its own: its 2 runs, or round 2's best (0.05, 1 run)
        assert (model["phase"], model["seeds"]["seeds"]) in (("round-3", 2), ("round-2", 1))
    elif failed:
        assert (decision["numbers"]["top_k"], decision["numbers"]["seeds"]) == (2, 4)
        assert trained == [80] * 8
        assert model["seeds"]["seeds"] == 5
    else:
        assert "its runs were not still improving" in decision["text"]
        assert (decision["numbers"]["top_k"], decision["numbers"]["seeds"]) == (3, 2)
        assert trained == [80] * 6
        assert model["seeds"]["seeds"] == 3  # each point's run of round 2 and its 2 of round 3
        assert {r["phase"] for r in model["seeds"]["runs"]} == {"round-2", "round-3"}
    assert payload["plan"]["steps_ran"] <= 1000


@pytest.mark.parametrize(
    ("swept", "best_step"),
    [(True, 40), (False, 40), (True, 5)],
    ids=["length-from-sweep-lr", "length-from-the-file", "best-steps-early"],
)
def test_a_length_sweep_lr_measured_without_the_searched_regularisation_is_tried_longer(
    tmp_path: Path, swept: bool, best_step: int
) -> None:
    """Round 2's best steps mid-run ("looks right"), weight decay searched: when tune set the
    length by sweep-lr (which trains with weight decay off), round 3 trains the chosen point
    longer (the playbook: regularisation slows training; a position verdict under a decaying
    schedule cannot show it); when the length was the file's, or the best steps came early (5 of
    80: the length is too long, as on noisy labels), round 2's points get more seeds."""
    from tuner.playbook.decision_log import Stage

    built, stages = _rounds_1_and_2_done(tmp_path, best_step, weight_decay=True, eval_every=5)
    if swept:
        stages.insert(
            0, Stage("toy", "sweep-lr", str(built.path), [], 4, 0, True, done=True, steps_per_trial=80)
        )
    store_tune_state(built, stages, "1000", 1000)
    done = run_tuner(*tune_args(built, 1000, "--no-apply-suggestions"))
    assert done.returncode == 0, done.stderr
    decision = next(d for d in json.loads(done.stdout)["decisions"] if d["kind"].startswith("round3_"))
    if swept and best_step == 40:
        assert decision["kind"] == "round3_longer"
        assert decision["numbers"]["unregularised_length"] is True
        assert decision["numbers"]["still_improving"] is False
        assert (
            "round 3: round 2's length is sweep-lr's, measured with optimizer.weight_decay off"
            in decision["text"]
        )
        assert "80 -> 320 steps" in decision["text"]
    else:
        assert decision["kind"] == "round3_seeds"
        assert "its runs were not still improving" in decision["text"]
        assert decision["numbers"]["unregularised_length"] is False


def test_a_length_a_suggestion_set_after_sweep_lr_is_not_called_sweep_lrs(tmp_path: Path) -> None:
    """sweep-lr ran on the user's study (``base``: its length 160); round 1's report then set
    the length to 80 in the next study (``toy``), whose rounds 1 and 2 ran with best steps mid-run:
    that length came from runs with weight decay on, not from the sweep, so round 3 gives the
    points more seeds and the log does not call the length sweep-lr's."""
    from tests.report_tests.builders import Built, study
    from tuner.playbook.decision_log import Stage

    built, stages = _rounds_1_and_2_done(tmp_path, 40, weight_decay=True, eval_every=5)
    home_path = study(tmp_path / "home", name="base", max_train_steps=160).path
    home = Built(home_path, built.output_dir, "base")
    stages.insert(0, Stage("base", "sweep-lr", str(home.path), [], 4, 0, True, done=True, steps_per_trial=80))
    store_tune_state(home, stages, "1000", 1000)
    done = run_tuner(*tune_args(home, 1000, "--no-apply-suggestions"))
    assert done.returncode == 0, done.stderr
    decision = next(d for d in json.loads(done.stdout)["decisions"] if d["kind"].startswith("round3_"))
    assert decision["kind"] == "round3_seeds", decision["text"]
    assert decision["numbers"]["unregularised_length"] is False
    assert "sweep-lr" not in decision["text"]


@pytest.mark.parametrize("sweep_best", [20, 70], ids=["validation-best-early-in-the-cap", "best-late"])
def test_a_sweep_that_fit_nothing_trains_longer_only_without_its_noisy_labels_evidence(
    tmp_path: Path, sweep_best: int
) -> None:
    """sweep-lr fit nothing within its cap (80, the rounds' length), weight decay off; round 2's
    best steps mid-run. Validation best at step 20 of the sweep's 80 (at most half: its "labels are
    noisy" evidence): the steps past it memorised, so round 3 does not train longer (it would give
    round 2's points more seeds; measured on the outcome benchmark's noisy labels, the longer runs
    were never delivered).
    Best at step 70: round 3 trains the chosen point longer, its log calling the length the
    sweep's cap, at which nothing fit (not a length the sweep measured)."""
    from tests.report_tests.builders import add_trial
    from tuner.playbook.decision_log import Stage
    from tuner.playbook.plan import load_plan

    built, stages = _rounds_1_and_2_done(tmp_path, 40, weight_decay=True, eval_every=5)
    sweep = built.start("sweep-lr")
    plan = load_plan(sweep.user_attrs)
    assert plan is not None
    for slot, planned in enumerate(plan.slots):
        add_trial(
            sweep, slot, 0.1, planned.values, best_step=sweep_best, max_train_steps=80, final_step=80,
            best_fit_value=0.9, final_train_loss=0.3, **planned.attrs,
        )  # fmt: skip
    trials = len(plan.slots)
    stages.insert(
        0, Stage("toy", "sweep-lr", str(built.path), [], trials, 0, True, done=True, steps_per_trial=80)
    )
    store_tune_state(built, stages, "1000", 1000)
    # the seeds round is not trained (--no-extra-seeds: no round 3 unless longer), which would
    # only cost the suite time: what is tested is that the longer one is not decided
    flags = ("--no-apply-suggestions", *(("--no-extra-seeds",) if sweep_best == 20 else ()))
    done = run_tuner(*tune_args(built, 1000, *flags))
    assert done.returncode == 0, done.stderr
    decisions = json.loads(done.stdout)["decisions"]
    if sweep_best == 20:
        assert not any(d["kind"].startswith("round3_") for d in decisions), decisions
        (none,) = [d for d in decisions if d["kind"] == "extra_round_none"]
        assert "--no-extra-seeds" in none["text"]
    else:
        decision = next(d for d in decisions if d["kind"].startswith("round3_"))
        assert decision["kind"] == "round3_longer", decision["text"]
        assert decision["numbers"]["unregularised_length"] is True
        assert (
            "round 2's length is sweep-lr's cap, at which no LR fit the training set even with "
            "optimizer.weight_decay off" in decision["text"]
        )


def test_an_extra_round_decided_in_an_earlier_run_is_continued_as_decided(tmp_path: Path) -> None:
    """Ctrl-C after round 3 was decided (its stage stored, not run): the same command runs it with
    the stored ``--set`` values (2 seeds of 160 steps, though round 2's report would now decide
    seeds), and decides nothing again."""
    from tuner.playbook.decision_log import Stage

    built, stages = _rounds_1_and_2_done(tmp_path, 40)
    sets = ["rounds.round3.top_k=1", "rounds.round3.seeds=2", "rounds.round3.steps=160"]
    stages.append(Stage("toy", "round-3", str(built.path), sets, None, 320, steps_per_trial=160))
    store_tune_state(built, stages, "1000", 1000)
    done = run_tuner(*tune_args(built, 1000, "--no-apply-suggestions"))
    assert done.returncode == 0, done.stderr
    payload = json.loads(done.stdout)
    assert not any(d["kind"].startswith("round3_") for d in payload["decisions"])  # not decided again
    statuses = sorted((built.output_dir / "toy" / "round-3").glob("trial-*/status.json"))
    assert [json.loads(status.read_text())["step"] for status in statuses] == [160, 160]
    assert [s["phase"] for s in payload["stages"]] == ["round-1", "round-2", "round-3"]


def _swept(tmp_path: Path, fits: dict[float, tuple[int | None, int]]) -> tuple[Any, Any]:
    """A study whose sweep-lr (grid 0.01, 0.1, 1.0; cap 100) is built, not trained: ``fits`` maps
    an LR to its (fit step or None, validation best step); the study and its sweep phase."""
    from tests.report_tests.builders import add_trial, study
    from tuner.playbook.plan import load_plan

    built = study(tmp_path, round1={"steps": 20, "trials": 4}, round2={"top_k": 1})
    document = yaml.safe_load(built.path.read_text())
    del document["training"]["max_train_steps"]
    document["sweep_lr"] = {"grid": [0.01, 0.1, 1.0], "max_steps": 100}
    built.path.write_text(yaml.safe_dump(document, sort_keys=False))
    sweep = built.start("sweep-lr")
    plan = load_plan(sweep.user_attrs)
    assert plan is not None
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
    keeps its best checkpoint) and which length to try instead, not "longer keeps helping"."""
    from tuner.orchestrate import open_storage
    from tuner.playbook.budget import parse_budget
    from tuner.playbook.decision_log import Decision, Stage, TuneState, save_state

    built, _ = _swept(tmp_path, dict.fromkeys((0.01, 0.1, 1.0), (None, 20)))  # no LR fits
    first = Stage("toy", "sweep-lr", str(built.path), [], 3, 300, True, done=True, steps_per_trial=100)
    planned_sweep = Decision("sweep_planned", first.key, "sweep-lr: 3 trials", {"cap": 100, "steps": 300})
    state = TuneState(parse_budget("900"), 900, [first], [planned_sweep])
    save_state(open_storage(built.storage_url), built.name, state)
    done = run_tuner(*tune_args(built, 900, "--no-apply-suggestions", "--no-extra-round"))
    assert done.returncode == 0, done.stderr
    payload = json.loads(done.stdout)
    (fallback,) = [d for d in payload["decisions"] if d["kind"] == "max_train_steps_fallback"]
    assert fallback["numbers"] == {"max_train_steps": 100, "best_step": 20, "noisy_labels_steps": 40}
    assert "validation was best at step 20 of it, as with noisy labels" in fallback["text"]
    assert "--set max_train_steps=40" in fallback["text"] and "longer keeps helping" not in fallback["text"]
    assert payload["delivered_model"]["max_train_steps"] == 100


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


def test_no_apply_length_applies_the_search_spaces_suggestions_and_keeps_the_length(
    tmp_path: Path,
) -> None:
    """Round 1 (built: 12 trials of 100 steps, best steps all at 10, the best values at the top of
    the LR range) suggests both a longer LR range and a shorter length; ``--no-apply-length``
    applies the range alone: the next study keeps max_train_steps 200 and round 1's 100 steps,
    and the log says what was not applied and why."""
    from tests.report_tests.builders import add_trial, study
    from tuner.playbook.decision_log import Stage

    built = study(tmp_path, round1={"steps": 100, "trials": 12}, round2={"top_k": 1}, max_train_steps=200)
    phase = built.start("round-1")
    for slot in range(12):  # better and better towards the top of the range: lr 1.0 is its edge
        lr = 0.01 * 100 ** (slot / 11)
        add_trial(phase, slot, 0.40 - 0.03 * slot, {"optimizer.lr": lr}, best_step=10)
    first = Stage("toy", "round-1", str(built.path), [], 12, 1200, done=True, steps_per_trial=100)
    done = tune_after(built, first, 2800, "--no-apply-length")
    assert done.returncode == 0, done.stderr
    payload = json.loads(done.stdout)
    applied = next(d for d in payload["decisions"] if d["kind"] == "suggestions_applied")
    assert "search_space.optimizer.lr.high 1.0 ->" in applied["text"]
    also = "it also suggests training.max_train_steps 200 -> 40; rounds.round1.steps 100 -> 20: "
    assert applied["text"].endswith(also + "not applied (--no-apply-length)")  # said, not applied
    held = applied["numbers"]["not_applied"]
    assert {"key": "training.max_train_steps", "why": "--no-apply-length"} in held
    following = yaml.safe_load(Path(applied["numbers"]["file"]).read_text())
    assert following["search_space"]["optimizer.lr"]["high"] > 1.0
    assert following["training"]["max_train_steps"] == 200 and following["rounds"]["round1"]["steps"] == 100
    run_dir = Path(payload["delivered_model"]["checkpoint"]).parents[1]
    status = json.loads((run_dir / "status.json").read_text())
    assert status["step"] == 200  # round 2 trained the file's length
    assert payload["plan"]["steps_ran"] <= 2800


def _round1_done(tmp_path: Path, budget: str, spent_s: float, **options: Any) -> Any:
    """Round 1 (built: 4 trials of 10 steps) done by an earlier run of ``--budget BUDGET`` (400
    steps) that had run for ``spent_s`` wall seconds; ``options``: the toy workload's."""
    from tests.report_tests.builders import add_trial, study
    from tuner.playbook.decision_log import Stage

    built = study(tmp_path, round1={"steps": 10, "trials": 4}, round2={"top_k": 1}, options=options or None)
    phase = built.start("round-1")
    for slot in range(4):
        add_trial(phase, slot, 0.1 * (slot + 1), {"optimizer.lr": 0.02 * (slot + 1)}, best_step=10)
    first = Stage("toy", "round-1", str(built.path), [], 4, 40, done=True, steps_per_trial=10)
    store_tune_state(built, first, budget, 400, spent_s=spent_s)
    return built


def test_a_duration_budget_whose_time_is_spent_starts_no_further_phase(tmp_path: Path) -> None:
    from tuner.orchestrate.storage import open_storage
    from tuner.playbook.decision_log import load_state

    built = _round1_done(tmp_path, "10m", spent_s=600)
    done = run_tuner(*tune_args(built, "10m", "--no-apply-suggestions"))
    assert done.returncode == 0, done.stderr
    payload = json.loads(done.stdout)
    (spent,) = [d for d in payload["decisions"] if d["kind"] == "time_spent"]
    assert spent["stage"] == "toy/round-2" and "the 10m budget's time is spent" in spent["text"]
    assert not (built.output_dir / "toy" / "round-2").exists()  # round 2 never started
    state = load_state(open_storage(built.storage_url), "toy")
    assert state is not None and state.spent_s >= 600  # this run's seconds are added


def test_a_duration_budget_limits_each_phase_to_the_time_left(tmp_path: Path) -> None:
    """An hour's budget of which 10 minutes ran: round 2 may start trials for the 50 minutes left
    (its ``timeout_h``), and the state adds this run's seconds."""
    from tests.orchestrate_tests.conftest import load_phase
    from tuner.orchestrate.phase import SETTINGS_ATTR
    from tuner.orchestrate.storage import open_storage
    from tuner.playbook.decision_log import load_state

    built = _round1_done(tmp_path, "1h", spent_s=600)
    done = run_tuner(*tune_args(built, "1h", "--no-apply-suggestions"))
    assert done.returncode == 0, done.stderr
    assert "time_spent" not in [d["kind"] for d in json.loads(done.stdout)["decisions"]]
    state = load_state(open_storage(built.storage_url), "toy")
    assert state is not None and state.spent_s > 600
    limit = load_phase(built.storage_url, "toy", "round-2").user_attrs[SETTINGS_ATTR]["timeout_h"]
    assert 3000 - (state.spent_s - 600) <= limit * 3600 <= 3000


def test_a_duration_budget_stopped_with_ctrl_c_keeps_the_seconds_it_ran(tmp_path: Path) -> None:
    """Ctrl-C while round 2 trains: the seconds up to the stop are added to the state (else the
    same command run again would have more time than the budget has left)."""
    from optuna.trial import TrialState

    from tests._processes import wait_for
    from tests.orchestrate_tests.conftest import load_phase, start_tuner
    from tuner.orchestrate.storage import open_storage
    from tuner.playbook.decision_log import load_state

    built = _round1_done(tmp_path, "1h", spent_s=600, step_sleep_s=0.05)
    command = start_tuner(*tune_args(built, "1h", "--no-apply-suggestions"))

    def round2_trains() -> bool:
        if not (built.output_dir / "toy" / "round-2").exists():
            return False
        try:
            trials = load_phase(built.storage_url, "toy", "round-2").get_trials(deepcopy=False)
        except KeyError:  # the phase is being created
            return False
        return any(t.state == TrialState.RUNNING for t in trials)

    wait_for(lambda: round2_trains() or command.poll() is not None, what="round 2 to train")
    assert command.poll() is None, command.output()
    state = load_state(open_storage(built.storage_url), "toy")
    assert state is not None
    before = state.spent_s  # the state as the run saved it last, before round 2 started
    time.sleep(1.5)  # nothing saves the state meanwhile: round 2 is still training
    command.send_signal(signal.SIGINT)
    output, _ = command.communicate(timeout=120)
    assert command.returncode == 130, output
    state = load_state(open_storage(built.storage_url), "toy")
    assert state is not None and state.spent_s >= before + 1.5, (before, state.spent_s)
