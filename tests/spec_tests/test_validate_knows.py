"""`tuner validate` finds what `train` and `run-round` would refuse at once (no training needed)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.spec_tests._support import BASE_YAML, invoke, mutate, plain, single_error, write_study

CHAR_LM = """\
name: lm
workload:
  name: char-lm
  options:
    d_model: 64
    n_heads: 4
training:
  max_train_steps: 100
objective:
  metric: val/perplexity
"""


def _error(tmp_path: Path, text: str, *args: str) -> str:
    return single_error(invoke("validate", str(write_study(tmp_path, text)), *args))


def test_misspelt_metric_of_a_builtin_is_located_with_a_suggestion(tmp_path: Path) -> None:
    text = BASE_YAML + "objective:\n  metric: val/eror_rate\n"
    message = _error(tmp_path, text)
    assert message.startswith(f"{tmp_path / 'study.yaml'}:18:11: objective.metric: 'val/eror_rate' is not")
    assert "did you mean 'val/error_rate'?" in message


def test_a_metric_the_builtin_does_not_compute(tmp_path: Path) -> None:
    message = _error(tmp_path, mutate("val/perplexity", "val/mcc", CHAR_LM))
    assert "'val/mcc' is not a metric char-lm computes" in message
    assert "val/perplexity" in message


def test_per_class_metrics_follow_the_class_count(tmp_path: Path) -> None:
    text = "name: i\nworkload: {name: imbalanced}\ntraining: {max_train_steps: 10}\n"
    ok = invoke("validate", str(write_study(tmp_path, text + "objective: {metric: val/class_2_recall}\n")))
    assert ok.exit_code == 0, ok.output
    assert "class_3_recall" in _error(tmp_path, text + "objective: {metric: val/class_3_recall}\n")


def test_user_workload_metric_must_be_one_tuner_computes(tmp_path: Path) -> None:
    (tmp_path / "w.py").write_text("def build(ctx):\n    raise NotImplementedError\n")
    text = "name: u\nworkload: {name: 'w.py:build'}\ntraining: {max_train_steps: 10}\n"
    # the file alone: a metric tuner computes passes (the build, which runs the stub, would not)
    ok = invoke("validate", str(write_study(tmp_path, text + "objective: {metric: val/mcc}\n")), "--no-build")
    assert ok.exit_code == 0, ok.output
    message = _error(tmp_path, text + "objective: {metric: train/acuracy}\n")
    assert "is not a metric tuner computes" in message and "did you mean 'train/accuracy'?" in message


def test_metric_from_set_is_blamed_on_the_set(tmp_path: Path) -> None:
    message = _error(tmp_path, BASE_YAML, "--set", "objective.metric=val/eror_rate")
    assert message.startswith("--set objective.metric=val/eror_rate: objective.metric:")


def test_char_lm_heads_must_divide_the_width(tmp_path: Path) -> None:
    message = _error(tmp_path, mutate("n_heads: 4", "n_heads: 5", CHAR_LM))
    assert "d_model (64) must be divisible by n_heads (5)" in message
    assert message.startswith(f"{tmp_path / 'study.yaml'}:")


def test_char_lm_heads_in_the_search_space_are_checked(tmp_path: Path) -> None:
    text = CHAR_LM + "search_space:\n  workload.n_heads: {type: categorical, choices: [2, 3]}\n"
    message = _error(tmp_path, text)
    assert "search_space[workload.n_heads]: value 3 does not fit" in message


def test_char_lm_text_file_must_exist(tmp_path: Path) -> None:
    text = mutate("n_heads: 4\n", "n_heads: 4\n    text_file: corpus.txt\n", CHAR_LM)
    message = _error(tmp_path, text)
    assert f"no such file: {tmp_path / 'corpus.txt'} (relative to the study file's folder)" in message
    (tmp_path / "corpus.txt").write_text("hello world " * 50)
    assert invoke("validate", str(tmp_path / "study.yaml")).exit_code == 0


def test_missing_max_train_steps_is_a_note(tmp_path: Path) -> None:
    result = invoke("validate", str(write_study(tmp_path, mutate("  max_train_steps: 100\n", ""))))
    assert result.exit_code == 0, result.output
    assert (
        "note: training.max_train_steps is not set: tuner train needs it, and so does run-round "
        "(or set rounds.round1.steps); tuner sweep-lr finds it (or --set max_train_steps=N)"
    ) in plain(result.stdout)
    with_steps = invoke("validate", str(tmp_path / "study.yaml"), "--set", "max_train_steps=5")
    assert "note:" not in plain(with_steps.stdout)


def test_password_in_the_study_file_is_a_note_without_the_password(tmp_path: Path) -> None:
    result = invoke(
        "validate", str(write_study(tmp_path, BASE_YAML + "storage: postgresql://me:hunter2@db/x\n"))
    )
    assert result.exit_code == 0, result.output
    assert "note: storage holds a password" in plain(result.stdout)
    assert "hunter2" not in result.output


@pytest.mark.parametrize(
    ("schedule", "expected"),
    [
        (
            "[{shape: linear, fraction: 0.6}, {shape: cosine, fraction: 0.6}]",
            ":12:72: training.schedule[1].fraction: the segments' fractions add up to 1.2 here",
        ),
        (
            "[{shape: linear, steps: 30}, {shape: cosine, fraction: 0.8}]",
            ":12:13: training.schedule: does not fit training.max_train_steps of 100 steps: the segments "
            "add up to 110 steps",
        ),
        (
            "[{shape: linear, steps: 30}, {shape: cosine}]",
            ":12:13: training.schedule: does not fit round 1's trials of 20 steps: schedule segment 2",
        ),
    ],
)
def test_schedules_that_cannot_fit_are_located(tmp_path: Path, schedule: str, expected: str) -> None:
    text = BASE_YAML + "rounds: {round1: {length_fraction: 0.2}}\n"
    text = mutate("  eval_every: 10\n", f"  eval_every: 10\n  schedule: {schedule}\n", text)
    message = _error(tmp_path, text)
    assert expected in message, message


@pytest.mark.parametrize(
    ("override", "suggestion"),
    [
        ("optimizer.lrr=0.1", "optimizer.lr"),
        ("optimiser.lr=0.1", "optimizer.lr"),
        ("training.bach_size=3", "training.batch_size"),
        ("max_train_step=5", "max_train_steps"),
        ("objective.metrc=val/loss", "objective.metric"),
    ],
)
def test_set_key_typos_get_a_suggestion(tmp_path: Path, override: str, suggestion: str) -> None:
    message = _error(tmp_path, BASE_YAML, "--set", override)
    assert message.endswith(f"is not a field of this study (did you mean {suggestion!r}?)")


def test_set_key_far_from_any_field_gets_no_guess(tmp_path: Path) -> None:
    assert _error(tmp_path, BASE_YAML, "--set", "zzz=1").endswith("is not a field of this study")


@pytest.mark.parametrize(
    ("key", "suggestion"),
    [
        ("optimizer.lrr", "optimizer.lr"),
        ("optimizer.weight_decy", "optimizer.weight_decay"),
        ("workload.dropuot", "workload.dropout"),
    ],
)
def test_search_space_key_typos_get_a_suggestion(tmp_path: Path, key: str, suggestion: str) -> None:
    text = mutate("  optimizer.lr: {", f"  {key}: {{", BASE_YAML).replace(
        "1.0e-4, high: 1.0e-2, log: true", "0.1, high: 0.5"
    )
    message = _error(tmp_path, text)
    assert f"search_space[{key}]: matches no config field" in message
    assert message.endswith(f") (did you mean {suggestion!r}?)")
