"""Cases a review of the report found wrong once: each pins the behaviour that is right."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.report_tests.builders import add_trial, run_folder, study
from tests.report_tests.test_verdicts import LR, only, report_of
from tests.spec_tests._support import invoke, plain, single_error
from tuner.report.yaml_edit import YamlText


def test_a_moved_range_still_holds_every_top_trial_after_rounding(tmp_path: Path) -> None:
    # the top half of the range (LR >= 0.505) improves steadily toward the top: a move; the third
    # best trial lies just below that half, where rounding the new low end must not cut it off
    built = study(tmp_path, search_space={LR: {"type": "float", "low": 0.01, "high": 1.0}})
    phase = built.start("round-1")
    rows = [(0.99, 0.1), (0.95, 0.11), (0.49987, 0.12), (0.8, 0.13), (0.7, 0.14), (0.6, 0.15), (0.1, 0.6)]
    for slot, (lr, value) in enumerate(rows):
        add_trial(phase, slot, value, {LR: lr}, best_step=20)
    boundaries = report_of(built).phases[0].boundaries
    assert boundaries is not None
    edge = only(boundaries.findings, "range_edge")
    assert edge.suggested_low <= 0.49987 < 0.99 < 1.0 < edge.suggested_high


def test_a_field_with_a_limit_near_the_edge_is_extended_up_to_it(tmp_path: Path) -> None:
    # momentum must stay below 1: the range moves up as far as it can, not "as far as it goes"
    key = "optimizer.momentum"
    built = study(
        tmp_path,
        optimizer={"name": "momentum", "lr": 0.1},
        search_space={key: {"type": "float", "low": 0.5, "high": 0.99}},
    )
    phase = built.start("round-1")
    for slot, (momentum, value) in enumerate(
        [(0.99, 0.1), (0.98, 0.11), (0.97, 0.12), (0.9, 0.2), (0.8, 0.3), (0.6, 0.5), (0.7, 0.6)]
    ):
        add_trial(phase, slot, value, {key: momentum}, best_step=20)
    boundaries = report_of(built).phases[0].boundaries
    assert boundaries is not None
    edge = only(boundaries.findings, "range_edge")
    assert 0.99 < edge.suggested_high < 1.0 and edge.suggested_low <= 0.97


def test_an_integer_range_keeps_its_step_grid(tmp_path: Path) -> None:
    key = "batch_size"
    built = study(tmp_path, search_space={key: {"type": "int", "low": 16, "high": 256, "step": 16}})
    phase = built.start("round-1")
    rows = [(256, 0.1), (240, 0.11), (224, 0.12), (192, 0.2), (160, 0.3), (32, 0.5), (64, 0.6)]
    for slot, (size, value) in enumerate(rows):
        add_trial(phase, slot, value, {key: size}, best_step=20)
    boundaries = report_of(built).phases[0].boundaries
    assert boundaries is not None
    edge = only(boundaries.findings, "range_edge")
    assert edge.suggested_high > 256 and (edge.suggested_high - 16) % 16 == 0
    assert (edge.suggested_low - 16) % 16 == 0 and edge.suggested_low <= 224


def test_a_non_negative_range_of_a_users_option_never_crosses_zero(tmp_path: Path) -> None:
    # the toy workload's options are its own: no model says dropout >= 0, the range still stops at 0
    key = "workload.noise"
    built = study(
        tmp_path, options={"noise": 0.0}, search_space={key: {"type": "float", "low": 0.0, "high": 0.5}}
    )
    phase = built.start("round-1")
    for slot, (noise, value) in enumerate([(0.0, 0.1), (0.01, 0.11), (0.02, 0.12), (0.3, 0.5), (0.4, 0.6)]):
        add_trial(phase, slot, value, {key: noise}, best_step=20)
    report = report_of(built)
    assert report.phases[0].boundaries is not None
    assert only(report.phases[0].boundaries.findings, "range_edge_at_field_limit").limit == 0.0
    assert report.suggestions == []


def test_too_high_counts_only_the_early_best_steps_of_the_top_trials(tmp_path: Path) -> None:
    built = study(tmp_path, max_train_steps=400, eval_every=10, round1={"steps": 400})
    phase = built.start("round-1")
    for slot, step in enumerate([400, 400, 20, 20, 20, 10, 10, 20]):  # the top 2 peaked late
        add_trial(phase, slot, 0.1 + 0.01 * slot, {LR: 0.05 + 0.01 * slot}, best_step=step)
    report = report_of(built)
    assert report.phases[0].best_step is not None
    early = only(report.phases[0].best_step.findings, "best_step_early")
    assert early.suggested_trial_steps == 40
    assert {s.key: s.new for s in report.suggestions} == {
        "training.max_train_steps": 40,
        "rounds.round1.steps": 40,
    }


def test_a_completed_trial_with_an_infinite_value_is_not_a_failure_nor_the_best(tmp_path: Path) -> None:
    built = study(tmp_path)
    phase = built.start("round-1")
    add_trial(phase, 0, float("-inf"), {LR: 0.5}, best_step=20)
    for slot in range(1, 6):
        add_trial(phase, slot, 0.1 * slot, {LR: 0.02 * slot}, best_step=20)
    report = report_of(built).phases[0]
    rate = only(report.health.findings, "failure_rate")
    assert (rate.level, rate.failed) == ("ok", 0) and report.health.counts["complete"] == 6
    assert report.best is not None and report.best.trial == 1


def test_damaged_run_folder_files_are_unreadable_not_a_crash(tmp_path: Path) -> None:
    built = study(tmp_path)
    phase = built.start("round-1")
    metrics = {"val/error_rate": 0.1, "val/class_0_correct": 9.0, "val/class_0_recall": 0.9}
    hand_edited = run_folder(
        tmp_path / "edited", best_step=20, metrics=metrics, status={"class_counts": [1, 2]}
    )
    add_trial(phase, 0, 0.1, {LR: 0.1}, best_step=20, run_dir=hand_edited)
    fifo = tmp_path / "fifo"
    fifo.mkdir()
    os.mkfifo(fifo / "status.json")  # reading it would block forever
    add_trial(phase, 1, 0.2, {LR: 0.2}, best_step=20, run_dir=fifo)
    shown = invoke("report", str(built.path), "--output-dir", str(built.output_dir), "--json")
    assert shown.exit_code == 0, shown.output
    (data,) = json.loads(shown.stdout)["phases"]
    problems = {item["path"]: item["problem"] for item in data["unreadable"]}
    assert problems[str(hand_edited / "status.json")].startswith("class_counts is not a mapping")
    from tuner.report.run_folders import Unreadable, read_status

    assert read_status(str(fifo)) == Unreadable(str(fifo / "status.json"), "not a regular file")


def test_a_folder_named_like_the_study_is_not_taken_for_a_study_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    built = study(tmp_path)
    add_trial(built.start("round-1"), 0, 0.1, {LR: 0.1}, best_step=20)
    monkeypatch.chdir(built.output_dir)  # runs/toy/ is the study's own output folder
    shown = invoke("report", "toy", "--output-dir", ".")
    assert shown.exit_code == 0, shown.output
    assert "trial 0: val/error_rate = 0.1 at step 20 of 40" in plain(shown.stdout)


def test_an_output_path_that_is_a_folder_is_one_line(tmp_path: Path) -> None:
    built = study(tmp_path)
    add_trial(built.start("round-1"), 0, 0.1, {LR: 0.1}, best_step=20)
    message = single_error(
        invoke("report", str(built.path), "--output-dir", str(built.output_dir), "--csv", str(tmp_path))
    )
    assert message == f"--csv {tmp_path}: is a folder; give a file path"
    message = single_error(invoke("list", "--output-dir", str(built.output_dir), "--csv", str(tmp_path)))
    assert message == f"--csv {tmp_path}: is a folder; give a file path"


def test_a_trial_without_a_best_step_shows_no_step(tmp_path: Path) -> None:
    built = study(tmp_path)
    phase = built.start("round-1")
    for slot in range(3):
        add_trial(phase, slot, 0.1 * (slot + 1), {LR: 0.1 * (slot + 1)})
    text = plain(invoke("report", str(built.path), "--output-dir", str(built.output_dir)).stdout)
    assert "best         trial 0: val/error_rate = 0.1\n" in text and "step None" not in text
    assert "0 completed trials with a recorded best step: too few" in text


def test_dropping_a_nested_list_choice_keeps_the_comments_after_it() -> None:
    text = """search_space:
  layers:
    type: categorical
    choices:
      - - 16
        - 16
      - - 32
      # the big one below was slow on CPU
      - - 64
        - 64
  # keep lr log-scaled
  lr: {type: float, low: 0.01, high: 1.0, log: true}
"""
    for dropped, gone in (([32], "- - 32"), ([64, 64], "- - 64")):
        editor = YamlText(text)
        editor.drop(("search_space", "layers", "choices"), dropped)
        assert gone not in editor.text
        assert "# the big one below was slow on CPU" in editor.text and "# keep lr log-scaled" in editor.text


def test_the_next_name_counts_only_generations_write_next_made() -> None:
    from tuner.report.next_study import next_name

    assert next_name("digits") == "digits-2"
    assert next_name("cifar-10") == "cifar-10-2"  # the user's own number is part of the name
    assert next_name("digits-2", generated=True) == "digits-3"
    assert len(next_name("x" * 64)) == 64


def test_every_choice_that_never_won_is_dropped_from_the_next_study(tmp_path: Path) -> None:
    import yaml

    space = {
        LR: {"type": "float", "low": 0.01, "high": 1.0, "log": True},
        "optimizer.name": {"type": "categorical", "choices": ["sgd", "momentum", "adam"]},
    }
    built = study(tmp_path, search_space=space)
    phase = built.start("round-1")
    rows = [("sgd", 0.1), ("sgd", 0.11), ("sgd", 0.12)] + [("momentum", 0.5 + i / 10) for i in range(3)]
    rows += [("adam", 0.6 + i / 10) for i in range(3)]
    for slot, (name, value) in enumerate(rows):
        add_trial(phase, slot, value, {LR: 0.1 + 0.01 * slot, "optimizer.name": name}, best_step=20)
    destination = tmp_path / "next.yaml"
    shown = invoke(
        "report", str(built.path), "--output-dir", str(built.output_dir), "--write-next", str(destination)
    )
    assert shown.exit_code == 0, shown.output
    assert "skipped" not in plain(shown.stdout)
    written = yaml.safe_load(destination.read_text())
    assert written["search_space"]["optimizer.name"]["choices"] == ["sgd"]
