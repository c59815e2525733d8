"""The report's verdicts on studies with known answers (real trials in a real SQLite storage)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.report_tests.builders import Built, add_trial, run_folder, study
from tuner.orchestrate.stored import open_reader
from tuner.playbook.plan import load_plan
from tuner.report import StudyReport, build_report, read_study

LR = "optimizer.lr"


def report_of(built: Built, phases: list[str] | None = None) -> StudyReport:
    with open_reader(built.storage_url) as reader:
        return build_report(read_study(reader, built.name, phases))


def kinds(findings: list[Any]) -> list[str]:
    return [f.kind for f in findings]


def only(findings: list[Any], kind: str) -> Any:
    found = [f for f in findings if f.kind == kind]
    assert len(found) == 1, kinds(findings)
    return found[0]


# -- search-space boundaries ---------------------------------------------------------------------


def _lr_round(tmp_path: Path, lrs_and_values: list[tuple[float, float | None]], **kwargs: Any) -> Built:
    """Round 1 over lr in [0.01, 1] (log); a value None is a diverged trial."""
    built = study(tmp_path, **kwargs)
    phase = built.start("round-1")
    for slot, (lr, value) in enumerate(lrs_and_values):
        if value is None:
            add_trial(phase, slot, None, {LR: lr}, state="FAIL", failure_reason="diverged", best_step=10)
        else:
            add_trial(phase, slot, value, {LR: lr}, best_step=20)
    return built


def test_best_lrs_at_the_top_of_the_range_warn_and_suggest_a_higher_range(tmp_path: Path) -> None:
    # the lower the error, the higher the LR: the optimum lies beyond 1.0
    lrs = [0.012, 0.02, 0.035, 0.06, 0.1, 0.2, 0.35, 0.6, 0.8, 0.95]
    built = _lr_round(tmp_path, [(lr, 1.0 - lr) for lr in lrs])
    boundaries = report_of(built).phases[0].boundaries
    assert boundaries is not None
    edge = only(boundaries.findings, "range_edge")
    assert (edge.param, edge.edge, edge.level) == (LR, "high", "warning")
    assert edge.suggested_high > 1.0 and edge.suggested_low > 0.01  # moved up
    assert edge.suggested_low <= 0.6  # every top trial stays inside
    assert "top of the range" in edge.text and "move the range up" in edge.advice
    suggested = {s.key: (s.old, s.new) for s in boundaries.suggestions}
    assert suggested["search_space.optimizer.lr.high"] == (1.0, edge.suggested_high)
    assert suggested["search_space.optimizer.lr.low"] == (0.01, edge.suggested_low)


def test_best_lrs_just_below_where_trials_diverged_is_a_frontier_not_an_edge(tmp_path: Path) -> None:
    # the best LRs sit at the top of the range, and every trial above them diverged
    rows: list[tuple[float, float | None]] = [(0.012, 0.9), (0.02, 0.8), (0.035, 0.7), (0.06, 0.5)]
    rows += [(0.5, 0.2), (0.6, 0.1), (0.65, 0.05), (0.8, None), (0.9, None), (0.97, None)]
    built = _lr_round(tmp_path, rows)
    report = report_of(built)
    boundaries = report.phases[0].boundaries
    assert boundaries is not None
    frontier = only(boundaries.findings, "divergence_frontier")
    assert (frontier.param, frontier.edge, frontier.diverged, frontier.beyond) == (LR, "high", 3, 3)
    assert "divergence frontier" in frontier.text
    assert "range_edge" not in kinds(boundaries.findings)
    assert boundaries.suggestions == [] and report.suggestions == []
    region = only(report.phases[0].health.findings, "divergence_region")
    assert (region.param, region.side, region.threshold) == (LR, "above", 0.8)
    assert f"all {LR} >= 0.8 diverged" in region.text


def test_best_lrs_inside_the_range_are_fine(tmp_path: Path) -> None:
    lrs = [0.012, 0.02, 0.05, 0.08, 0.1, 0.12, 0.2, 0.5, 0.8, 0.95]
    built = _lr_round(tmp_path, [(lr, abs(lr - 0.1)) for lr in lrs])
    boundaries = report_of(built).phases[0].boundaries
    assert boundaries is not None
    assert kinds(boundaries.findings) == ["range_ok"]
    assert boundaries.findings[0].level == "ok"


def test_a_range_whose_edge_is_the_fields_limit_is_not_extended_past_it(tmp_path: Path) -> None:
    # dropout's best values sit at 0.0, the lowest a dropout can be: nothing to move into
    space = {"workload.dropout": {"type": "float", "low": 0.0, "high": 0.5}}
    built = study(tmp_path, search_space=space, name="dig")
    built.path.write_text(built.path.read_text().replace("toy_workload.py:build", "digits-mlp"))
    phase = built.start("round-1")
    for slot, dropout in enumerate([0.0, 0.01, 0.02, 0.2, 0.3, 0.4, 0.45]):
        add_trial(phase, slot, dropout, {"workload.dropout": dropout}, best_step=20)
    boundaries = report_of(built).phases[0].boundaries
    assert boundaries is not None
    limit = only(boundaries.findings, "range_edge_at_field_limit")
    assert (limit.param, limit.edge, limit.limit) == ("workload.dropout", "low", 0.0)
    assert boundaries.suggestions == []


def test_a_categorical_value_never_tried_is_named_and_one_never_winning_is_dropped(tmp_path: Path) -> None:
    space = {
        LR: {"type": "float", "low": 0.01, "high": 1.0, "log": True},
        "optimizer.name": {"type": "categorical", "choices": ["sgd", "adam", "nesterov"]},
    }
    built = study(tmp_path, search_space=space)
    phase = built.start("round-1")
    rows = [("adam", 0.1), ("adam", 0.2), ("adam", 0.15), ("sgd", 0.5), ("sgd", 0.6), ("sgd", 0.7)]
    for slot, (name, value) in enumerate(rows):
        add_trial(phase, slot, value, {LR: 0.1 + 0.01 * slot, "optimizer.name": name}, best_step=20)
    boundaries = report_of(built).phases[0].boundaries
    assert boundaries is not None
    never = only(boundaries.findings, "categorical_never_tried")
    assert never.values == ["nesterov"] and "'nesterov' never tried in 6 trials" in never.text
    lost = only(boundaries.findings, "categorical_never_won")
    assert (lost.value, lost.tried, lost.top_k) == ("sgd", 3, 3)
    one = only(boundaries.findings, "categorical_one_value")
    assert one.value == "adam"
    drop = [s for s in boundaries.suggestions if s.key == "search_space.optimizer.name.choices"]
    assert [s.drop for s in drop] == ["sgd"]


# -- best-step position ----------------------------------------------------------------------------


def _length_round(tmp_path: Path, best_steps: list[int]) -> Built:
    built = study(tmp_path, max_train_steps=400, eval_every=10, round1={"steps": 400})
    phase = built.start("round-1")
    for slot, step in enumerate(best_steps):
        add_trial(phase, slot, 0.1 + 0.01 * slot, {LR: 0.05 + 0.01 * slot}, best_step=step)
    return built


def test_best_steps_all_in_the_first_tenth_say_max_train_steps_is_too_high(tmp_path: Path) -> None:
    report = report_of(_length_round(tmp_path, [20, 30, 40, 20, 10, 30]))
    best_step = report.phases[0].best_step
    assert best_step is not None
    early = only(best_step.findings, "best_step_early")
    assert (early.level, early.early_top, early.top, early.early_all, early.completed) == (
        "warning",
        5,
        5,
        6,
        6,
    )
    # 2 x the latest best step among the top 5 (40), rounded up to eval_every
    assert early.suggested_trial_steps == 80 and early.suggested_max_train_steps == 80
    assert "too high" in early.text and early.rule and "at least 3 of the 5 best" in early.rule
    assert {s.key: s.new for s in report.suggestions} == {
        "training.max_train_steps": 80,
        "rounds.round1.steps": 80,
    }


def test_a_shorter_length_still_fits_the_schedules_segments_in_steps(tmp_path: Path) -> None:
    warmup_then_cosine = [{"shape": "linear", "steps": 50, "start": 0.0, "end": 1.0}, {"shape": "cosine"}]
    built = study(
        tmp_path, max_train_steps=400, eval_every=10, round1={"steps": 400}, schedule=warmup_then_cosine
    )
    phase = built.start("round-1")
    for slot, step in enumerate([10, 20, 20, 10, 10]):
        add_trial(phase, slot, 0.1 + 0.01 * slot, {LR: 0.05 + 0.01 * slot}, best_step=step)
    report = report_of(built)
    assert report.phases[0].best_step is not None
    early = only(report.phases[0].best_step.findings, "best_step_early")
    # 2 x 20 = 40 steps would not hold the 50-step warmup and a cosine of at least 1 step
    assert early.suggested_trial_steps == 60 and "at least the 51 steps the schedule needs" in early.advice
    assert {s.key: s.new for s in report.suggestions} == {
        "training.max_train_steps": 60,
        "rounds.round1.steps": 60,
    }


def test_best_steps_all_in_the_last_quarter_say_train_longer(tmp_path: Path) -> None:
    report = report_of(_length_round(tmp_path, [400, 390, 380, 400, 310, 350]))
    best_step = report.phases[0].best_step
    assert best_step is not None
    late = only(best_step.findings, "best_step_late")
    assert (late.level, late.short_round, late.suggested_max_train_steps) == ("warning", False, 600)
    assert "train longer" in late.advice and "retune the decay" in late.advice
    # round 1, given in steps at full length, keeps its share (all of it): the README's promise
    assert {s.key: s.new for s in report.suggestions} == {
        "training.max_train_steps": 600,
        "rounds.round1.steps": 600,
    }


def test_best_steps_spread_over_training_are_fine_and_few_trials_are_not_judged(tmp_path: Path) -> None:
    report = report_of(_length_round(tmp_path, [100, 200, 390, 30, 250, 300]))
    assert report.phases[0].best_step is not None
    fine = only(report.phases[0].best_step.findings, "best_step_ok")
    assert fine.level == "ok" and fine.completed == 6
    few = report_of(_length_round(tmp_path / "few", [20, 30]))
    assert few.phases[0].best_step is not None
    assert kinds(few.phases[0].best_step.findings) == ["best_step_too_few"]


def test_best_steps_at_the_end_of_a_short_round_are_expected_not_a_length_verdict(tmp_path: Path) -> None:
    # round 1 runs 20% of max_train_steps: best steps at its end say "still improving", not "train longer"
    # (eval_every 5: 8 evals in a 40-step trial, 2 after step 30, enough to see "still improving")
    built = study(tmp_path, max_train_steps=200, eval_every=5, round1={"length_fraction": 0.2})
    phase = built.start("round-1")
    for slot in range(5):
        add_trial(phase, slot, 0.1 + slot / 100, {LR: 0.05 + slot / 100}, best_step=40)
    report = report_of(built)
    assert report.phases[0].best_step is not None
    late = only(report.phases[0].best_step.findings, "best_step_late")
    assert late.short_round and late.level == "info" and late.suggested_max_train_steps is None
    assert report.suggestions == []


# -- search health ------------------------------------------------------------------------------------


def test_a_phase_with_30_percent_failed_trials_warns(tmp_path: Path) -> None:
    built = study(tmp_path)
    phase = built.start("round-1")
    for slot in range(10):
        if slot in (2, 5, 8):
            add_trial(phase, slot, None, {LR: 0.1}, state="FAIL", failure_reason="crashed", error="boom")
        else:
            add_trial(phase, slot, 0.1 * slot, {LR: 0.02 * (slot + 1)}, best_step=20)
    health = report_of(built).phases[0].health
    rate = only(health.findings, "failure_rate")
    assert (rate.level, rate.failed, rate.finished, rate.rate) == ("warning", 3, 10, pytest.approx(0.3))
    assert rate.reasons == {"crashed": 3} and "30% of trials failed" in rate.text
    assert health.counts["failed"] == 3 and health.counts["complete"] == 7


def test_retries_are_one_learning_curve_not_separate_trials(tmp_path: Path) -> None:
    built = study(tmp_path)
    phase = built.start("round-1")
    add_trial(phase, 0, 0.3, {LR: 0.1}, best_step=20)
    first = add_trial(
        phase,
        1,
        None,
        {LR: 0.2},
        state="FAIL",
        failure_reason="killed",
        retried=True,
        curve={10: 0.5, 20: 0.4},
    )
    add_trial(phase, 1, 0.25, {LR: 0.2}, attempt=1, retry_of=first, best_step=30, curve={30: 0.25, 40: 0.3})
    report = report_of(built)
    data = report.phases[0].data
    assert [s.slot for s in data.slots] == [0, 1] and data.attempts == 3
    slot = data.slots[1]
    assert (len(slot.attempts), str(slot.state), slot.value) == (2, "complete", 0.25)
    assert report.phases[0].health.counts["failed"] == 0  # the killed attempt was retried: not a failure
    with open_reader(built.storage_url) as reader:
        curves = read_study(reader, built.name).curves(data, [slot])
    assert curves[1] == {10: 0.5, 20: 0.4, 30: 0.25, 40: 0.3}


def test_a_slot_claimed_twice_at_once_is_a_duplicate_left_out_not_a_retry(tmp_path: Path) -> None:
    """Through the gRPC proxy or on a journal two workers may create one slot at once, and the
    higher-numbered trial yields (``budget.counted``). The report said "1 retries merged into
    their trials" for it; it is not a retry, and it is not counted."""
    built = study(tmp_path)
    phase = built.start("round-1")
    add_trial(phase, 0, 0.3, {LR: 0.1}, best_step=20)
    add_trial(phase, 0, None, {LR: 0.1}, state="FAIL", duplicate_of=0)
    add_trial(phase, 1, 0.25, {LR: 0.2}, best_step=20)
    report = report_of(built).phases[0]
    assert (report.data.attempts, report.data.duplicates) == (2, 1)
    assert report.tally == "2 complete (1 duplicate of a slot claimed twice at once, left out)"
    assert report.health.counts["failed"] == 0


def test_improvement_is_judged_in_trial_order_not_by_a_workers_clock(tmp_path: Path) -> None:
    """The best came from trial 1 of 12; the worker that ran it had a clock 10 minutes fast, so
    its ``datetime_complete`` is the latest. In the storage's order (trial numbers, one sequence
    for every worker) it is the 2nd of 12: plateaued, not "still improving"."""
    from datetime import datetime, timedelta

    built = study(tmp_path, round1={"trials": 12})
    phase = built.start("round-1")
    start = datetime(2026, 1, 1, 12, 0, 0)
    for slot in range(12):
        finished = start + timedelta(minutes=slot + (10 if slot == 1 else 0))
        value = 0.05 if slot == 1 else 0.5 + slot / 100
        add_trial(phase, slot, value, {LR: 0.02 * (slot + 1)}, best_step=20, completed_at=finished)
    progress = only(report_of(built).phases[0].health.findings, "progress")
    assert (progress.trend, progress.last_improvement, progress.completed) == ("plateaued", 2, 12)
    assert "set by trial 1, the 2nd in trial order" in progress.text


def test_improvement_is_judged_on_trials_in_the_order_they_finished(tmp_path: Path) -> None:
    built = study(tmp_path, round1={"trials": 12})
    phase = built.start("round-1")
    for slot in range(12):  # the best came early; ten trials since brought nothing better
        add_trial(phase, slot, 0.05 if slot == 1 else 0.5 + slot / 100, {LR: 0.02 * (slot + 1)}, best_step=20)
    progress = only(report_of(built).phases[0].health.findings, "progress")
    assert (progress.trend, progress.last_improvement, progress.completed) == ("plateaued", 2, 12)
    assert "stop this phase" in progress.advice


# -- round 1 -> round 2 ----------------------------------------------------------------------------------


def _two_rounds(tmp_path: Path, round2_values: list[float]) -> Built:
    built = study(tmp_path, round2={"top_k": 3})
    first = built.start("round-1")
    for slot, value in enumerate([0.10, 0.20, 0.30, 0.40, 0.50]):
        add_trial(first, slot, value, {LR: 0.05 * (slot + 1)}, best_step=20)
    second = built.start("round-2")
    plan = load_plan(second.user_attrs)
    assert plan is not None
    for slot, value in enumerate(round2_values):
        add_trial(second, slot, value, plan.slots[slot].values, best_step=20, **plan.slots[slot].attrs)
    return built


def test_a_round_2_that_reverses_round_1s_order_has_a_negative_rank_correlation(tmp_path: Path) -> None:
    report = report_of(_two_rounds(tmp_path, [0.30, 0.20, 0.10]))
    assert [p.phase for p in report.phases] == ["round-2", "round-1"]  # latest first
    transfer = report.phases[0].transfer
    assert transfer is not None and transfer.source_phase == "round-1"
    correlation = only(transfer.findings, "rank_correlation")
    assert correlation.spearman == pytest.approx(-1.0)
    assert (correlation.quality, correlation.level, correlation.best_stayed_best) == (
        "reversed",
        "warning",
        False,
    )
    assert [(p.source_trial, p.source_rank, p.rank) for p in transfer.points] == [
        (0, 1, 3),
        (1, 2, 2),
        (2, 3, 1),
    ]


# -- imbalanced data ----------------------------------------------------------------------------------


def test_minority_classes_show_their_counts_and_a_skewed_train_sample_warns(tmp_path: Path) -> None:
    built = study(tmp_path)
    phase = built.start("round-1")
    metrics = {
        "val/error_rate": 0.1,
        "val/class_0_correct": 170.0,
        "val/class_0_recall": 1.0,
        "val/class_1_correct": 6.0,
        "val/class_1_recall": 0.6,
        "train/class_0_correct": 90.0,
        "train/class_0_recall": 1.0,
        "train/class_1_correct": 2.0,
        "train/class_1_recall": 1.0,
    }
    counts = {"val": [170, 10], "train": [720, 80], "train_eval_sample": [98, 2]}
    folder = run_folder(
        tmp_path / "trial-0000", best_step=20, metrics=metrics, status={"class_counts": counts}
    )
    add_trial(phase, 0, 0.1, {LR: 0.1}, best_step=20, run_dir=folder)
    imbalance = report_of(built).phases[0].imbalance
    assert imbalance is not None
    few = [f for f in imbalance.findings if f.kind == "minority_few_examples"]
    assert [f.split for f in few] == ["val", "train"]
    assert "class 1: recall 0.6 = 6 of 10" in few[0].text and "one example is 0.1" in few[0].text
    skew = only(imbalance.findings, "train_sample_skew")
    assert skew.classes == [1] and skew.sample_size == 100 and skew.full_size == 800
    assert "2% vs 10%" in skew.text


def test_a_workload_without_per_class_counts_gets_no_class_section(tmp_path: Path) -> None:
    built = study(tmp_path)
    phase = built.start("round-1")
    folder = run_folder(tmp_path / "trial-0000", best_step=20, metrics={"val/error_rate": 0.1})
    add_trial(phase, 0, 0.1, {LR: 0.1}, best_step=20, run_dir=folder)
    report = report_of(built)
    assert report.phases[0].imbalance is None
    assert report.phases[0].best is not None
    assert report.phases[0].best.checkpoint == str(folder / "checkpoints" / "best-step00000020.pt")
