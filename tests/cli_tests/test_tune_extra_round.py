"""``tuner tune`` after the study file's last round: the extra round decided on its report (the
chosen point trained longer, or the points on more seeds), and continued as decided."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.cli_tests._tune_support import store_tune_state, tune_args
from tests.orchestrate_tests.conftest import run_tuner


def _falls_then_flat(value: float, best_step: int, eval_every: int, slot: int) -> dict[int, float]:
    """A run of 80 steps whose error falls 0.002 an eval to ``value`` at ``best_step``, then stays
    flat within a noise of 0.0005 (every other eval that much worse, from the first or the second
    eval after the best as ``slot`` is even or odd): a run still falling at 50-75% of training
    when its best step is at 55, and one that peaked at half its length and stayed put at 40."""
    return {
        step: value + 0.002 * (best_step - step) / eval_every
        if step <= best_step
        else value + 0.0005 * ((step // eval_every + slot) % 2)
        for step in range(eval_every, 81, eval_every)
    }


def _rounds_1_and_2_done(
    tmp_path: Path,
    best_step: int,
    *,
    failed: bool = False,
    weight_decay: bool = False,
    eval_every: int = 10,
    flat_after: bool = False,
) -> tuple[Any, list[Any]]:
    """Rounds 1 and 2 built, not trained (round 1: 8 trials of 10 steps; round 2: its 3 points at
    max_train_steps 80, one seed, every best step at ``best_step``; ``failed``: the third point
    failed; ``weight_decay``: searched beside the LR; ``flat_after``: each curve flat within its
    noise after its best, ``_falls_then_flat``, else slightly worse at each eval), and their stages
    as an earlier run of ``tune`` left them done (its ``--budget`` is each test's)."""
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
        value = 0.05 + 0.01 * slot
        curve = _falls_then_flat(value, best_step, eval_every, slot) if flat_after else None
        add_trial(second, slot, value, planned.values, best_step=best_step, curve=curve, **planned.attrs)
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
    every best step at ``best_step``) done in an earlier run of ``--budget 640``: 320 steps are
    left. Best steps at the end (the report: "still improving") -> round 3 trains round 2's
    chosen point 2x longer (160 steps, the most 320 steps hold on 2 seeds; under the 4x cap of
    320) on 2 new seeds; best steps mid-run ("looks right") -> round 2's 3 points on 1 new seed
    each at 80 steps, the delivered model pooling each point's 2 runs; with round 2's third point
    failed, its 2 completed points only (400 steps, the failed trial having trained none: 2 new
    seeds each)."""
    built, stages = _rounds_1_and_2_done(tmp_path, best_step, failed=failed)
    store_tune_state(built, stages, "640", 640)
    done = run_tuner(*tune_args(built, 640, "--no-apply-suggestions"))  # round 2 ran: no next search
    assert done.returncode == 0, done.stderr
    payload = json.loads(done.stdout)
    decision = next(d for d in payload["decisions"] if d["kind"].startswith("round3_"))
    assert decision["kind"] == kind
    assert decision["numbers"]["left"] == (400 if failed else 320)  # a failed trial trained no step here
    third = next(s for s in payload["stages"] if s["phase"] == "round-3")
    statuses = sorted((built.output_dir / "toy" / "round-3").glob("trial-*/status.json"))
    trained = [json.loads(status.read_text())["step"] for status in statuses]
    model = payload["delivered_model"]
    if kind == "round3_longer":
        assert "still improving" in decision["text"] and "80 -> 160 steps" in decision["text"]
        assert "rounds.round3.steps=160" in third["sets"] and decision["numbers"]["seeds"] == 2
        assert trained == [160, 160]
        # the longer point is a point of its own: its 2 runs, or round 2's best (0.05, 1 run)
        assert (model["phase"], model["seeds"]["seeds"]) in (("round-3", 2), ("round-2", 1))
    elif failed:
        assert (decision["numbers"]["top_k"], decision["numbers"]["seeds"]) == (2, 2)
        assert trained == [80] * 4
        assert model["seeds"]["seeds"] == 3
    else:
        assert "its runs were not still improving" in decision["text"]
        assert (decision["numbers"]["top_k"], decision["numbers"]["seeds"]) == (3, 1)
        assert trained == [80] * 3
        assert model["seeds"]["seeds"] == 2  # each point's run of round 2 and its 1 of round 3
        assert {r["phase"] for r in model["seeds"]["runs"]} == {"round-2", "round-3"}
    assert payload["plan"]["steps_ran"] <= 640


@pytest.mark.parametrize(
    ("swept", "best_step"),
    [(True, 55), (True, 40), (False, 55), (True, 5)],
    ids=["length-from-sweep-lr-still-falling", "length-from-sweep-lr-flat-after-half", "length-from-the-file",
         "best-steps-early"],
)  # fmt: skip
def test_a_length_sweep_lr_measured_without_the_searched_regularisation_is_tried_longer_if_still_falling(
    tmp_path: Path, swept: bool, best_step: int
) -> None:
    """Weight decay searched; round 2's best steps not late (no "still improving" verdict). When
    tune set the length by sweep-lr (which trains with weight decay off) and the curves were still
    falling between 50% and 75% of training (best at 55 of 80), round 3 trains the chosen point
    longer (the playbook: regularisation slows training; the position hides it). Not when the
    curves peaked at half the length and stayed flat within their noise (best at 40), nor when the
    length was the file's, nor when the best steps came early (5 of 80: too long, as on noisy
    labels): round 2's points would get more seeds (``--no-extra-seeds``: not trained here)."""
    from tuner.playbook.decision_log import Stage

    built, stages = _rounds_1_and_2_done(
        tmp_path, best_step, weight_decay=True, eval_every=5, flat_after=True
    )
    if swept:
        stages.insert(
            0, Stage("toy", "sweep-lr", str(built.path), [], 4, 0, True, done=True, steps_per_trial=80)
        )
    store_tune_state(built, stages, "1000", 1000)
    longer = swept and best_step == 55
    flags = ("--no-apply-suggestions", *(() if longer else ("--no-extra-seeds",)))
    done = run_tuner(*tune_args(built, 1000, *flags))
    assert done.returncode == 0, done.stderr
    decisions = json.loads(done.stdout)["decisions"]
    if longer:
        decision = next(d for d in decisions if d["kind"].startswith("round3_"))
        assert decision["kind"] == "round3_longer"
        assert decision["numbers"]["unregularised_length"] is True
        assert decision["numbers"]["falling_late"] is True
        assert decision["numbers"]["still_improving"] is False
        assert (
            "round 3: round 2's length is sweep-lr's, measured with optimizer.weight_decay off"
            in decision["text"]
        )
        assert "between 50% and 75% of training was falling" in decision["text"]
        assert "80 -> 320 steps" in decision["text"]
    else:
        assert not any(d["kind"].startswith("round3_") for d in decisions), decisions
        (none,) = [d for d in decisions if d["kind"] == "extra_round_none"]
        assert "--no-extra-seeds" in none["text"]


def test_a_length_a_suggestion_set_after_sweep_lr_is_not_called_sweep_lrs(tmp_path: Path) -> None:
    """sweep-lr ran on the user's study (``base``: its length 160); round 1's report then set
    the length to 80 in the next study (``toy``), whose rounds 1 and 2 ran with best steps mid-run,
    the curves still falling between 50% and 75% of training: that length came from runs with
    weight decay on, not from the sweep, so round 3 gives the points more seeds and the log does
    not call the length sweep-lr's. ``--budget 560`` leaves 240 steps: a seed more for each of
    the 3 points, or, had the length been called sweep-lr's, 120 steps on 2 seeds."""
    from tests.report_tests.builders import Built, study
    from tuner.playbook.decision_log import Stage

    built, stages = _rounds_1_and_2_done(tmp_path, 55, weight_decay=True, eval_every=5, flat_after=True)
    home_path = study(tmp_path / "home", name="base", max_train_steps=160).path
    home = Built(home_path, built.output_dir, "base")
    stages.insert(0, Stage("base", "sweep-lr", str(home.path), [], 4, 0, True, done=True, steps_per_trial=80))
    store_tune_state(home, stages, "560", 560)
    done = run_tuner(*tune_args(home, 560, "--no-apply-suggestions"))
    assert done.returncode == 0, done.stderr
    decision = next(d for d in json.loads(done.stdout)["decisions"] if d["kind"].startswith("round3_"))
    assert decision["kind"] == "round3_seeds", decision["text"]
    assert decision["numbers"]["unregularised_length"] is False
    assert "sweep-lr" not in decision["text"]


@pytest.mark.parametrize(
    ("sweep_best", "best_step"),
    [(20, 55), (70, 55), (70, 40)],
    ids=["validation-best-early-in-the-cap", "best-late", "best-late-round-flat-after-half"],
)
def test_a_sweep_that_fit_nothing_trains_longer_only_without_its_noisy_labels_evidence(
    tmp_path: Path, sweep_best: int, best_step: int
) -> None:
    """sweep-lr fit nothing within its cap (80, the rounds' length), weight decay off; round 2's
    best steps mid-run. Validation best at step 20 of the sweep's 80 (at most half: its "labels
    are noisy" evidence): the steps past it memorised, so round 3 does not train longer (it would
    give round 2's points more seeds; measured on the outcome benchmark's noisy labels, the longer
    runs were never delivered). Best at step 70: round 3 trains the chosen point longer, its log
    calling the length the sweep's cap, at which nothing fit: a lower bound, not a length the
    sweep measured, so it does so whether round 2's curves were still falling between 50% and 75%
    of training (best at 55) or flat after half (best at 40)."""
    from tests.report_tests.builders import add_trial
    from tuner.playbook.decision_log import Stage
    from tuner.playbook.plan import load_plan

    built, stages = _rounds_1_and_2_done(
        tmp_path, best_step, weight_decay=True, eval_every=5, flat_after=True
    )
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
