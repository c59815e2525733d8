"""Bad ``--set`` overrides through `tuner validate`: exit 2, one line that blames the override.

Positions refer to ``BASE_YAML`` (see ``_support.py``) after the edit each case makes.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.spec_tests._support import BASE_YAML, invoke, mutate, plain, single_error, write_study
from tests.spec_tests.test_study_errors import validate_error


@pytest.mark.parametrize(
    ("override", "expected"),
    [
        (
            "optimizer.lr=abc",
            "--set optimizer.lr=abc: training.optimizer.lr: expected a number, got 'abc' (a string)",
        ),
        ("nosuchfield=1", "--set nosuchfield=1: training.nosuchfield is not a field of this study"),
        (
            "optimizer.lrr=0.1",
            "--set optimizer.lrr=0.1: training.optimizer.lrr is not a field of this study "
            "(did you mean 'optimizer.lr'?)",
        ),
        ("optimizer.lr", "--set optimizer.lr: expected key=value, e.g. --set optimizer.lr=0.01"),
        ("=3", "--set =3: expected key=value, e.g. --set optimizer.lr=0.01"),
        ("eval_every=0", "--set eval_every=0: training.eval_every: expected a positive integer, got 0"),
        (
            "batch_size='64'",
            "--set batch_size='64': training.batch_size: expected an integer, got '64' (a string)",
        ),
        (
            "name=../evil",
            "--set name=../evil: name: expected a name of letters, digits, '.', '_' or '-' "
            "starting with a letter or digit (it becomes a folder name), got '../evil' (a string)",
        ),
        (
            "workload.nope=1",
            "--set workload.nope=1: workload.options.nope: unknown field 'nope' "
            "(expected one of: hidden_sizes, dropout, val_fraction)",
        ),
        (
            "workload.dropout=2",
            "--set workload.dropout=2: workload.options.dropout: expected a number < 1.0, got 2",
        ),
        (
            "rounds.round4.top_k=1",
            "--set rounds.round4.top_k=1: rounds: round3 is missing: rounds are numbered without gaps",
        ),
        (
            "rounds.round3.bogus=1",
            "--set rounds.round3.bogus=1: rounds.round3.bogus is not a field of this study "
            "(did you mean 'rounds.round2'?)",
        ),
    ],
)
def test_set_override_error(override: str, expected: str) -> None:
    assert validate_error(BASE_YAML, "--set", override) == expected


def test_set_adds_the_next_round_as_tune_does_after_the_files_last() -> None:
    write_study(Path.cwd())
    result = invoke(
        "validate", "study.yaml", "--set", "rounds.round3.top_k=1", "--set", "rounds.round3.steps=80"
    )
    assert result.exit_code == 0, result.output
    assert "round 3: top 1 of round 2 = 1 trial of 80 steps" in plain(result.stdout)


def test_file_error_is_reported_before_override_error() -> None:
    text = mutate("eval_every: 10", "eval_every: -3")
    message = validate_error(text, "--set", "optimizer.lr=abc")
    assert message == "study.yaml:11:15: training.eval_every: expected a positive integer, got -3"


def test_set_into_default_list_works_and_past_its_end_blames_the_override() -> None:
    """The study has no schedule: ``schedule.0`` is the default's one segment (constant)."""
    write_study(Path.cwd())
    result = invoke("validate", "study.yaml", "--set", "schedule.0.shape=cosine")
    assert result.exit_code == 0, result.output
    assert "  schedule     cosine 1->0 x lr for the rest\n" in plain(result.stdout)
    past_end = invoke("validate", "study.yaml", "--set", "schedule.3.shape=cosine")
    assert single_error(past_end) == (
        "--set schedule.3.shape=cosine: training.schedule[3].shape is not a field of this study"
    )
