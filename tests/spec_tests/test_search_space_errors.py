"""Search-space entries through `tuner validate`: a bad one exits 2 with one located line and no
traceback; a number written with an exponent is a number.

Positions refer to ``BASE_YAML`` (see ``_support.py``) after the edit each case makes.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.spec_tests._support import invoke, mutate, plain, write_study
from tests.spec_tests.test_study_errors import validate_error


@pytest.mark.parametrize(
    ("key", "target"),
    [
        ("optimizer.lrr", "training.optimizer.lrr"),
        ("training.optimizer.lrr", "training.optimizer.lrr"),
        ("lr", "training.lr"),
        ("workload.nope", "workload.options.nope"),
        ("name", "name"),
        ("search_space", "search_space"),
    ],
)
def test_search_space_key_matches_no_field(key: str, target: str) -> None:
    field = f"search_space[{key}]" if "." in key else f"search_space.{key}"
    message = validate_error(mutate("  optimizer.lr:", f"  {key}:"))
    expected = f"study.yaml:16:3: {field}: matches no config field (looked for {target})"
    suggestion = {
        "optimizer.lrr": "optimizer.lr",
        "training.optimizer.lrr": "training.optimizer.lr",
        "search_space": "search_seed",  # the nearest field name (difflib), which is refused in turn
    }
    if key in suggestion:
        expected += f" (did you mean {suggestion[key]!r}?)"
    assert message == expected


@pytest.mark.parametrize(
    ("param", "detail"),
    [
        ("{type: float, low: 1.0e-2, high: 1.0e-2}", "expected low < high, got low=0.01, high=0.01"),
        ("{type: float, low: 1.0e-2, high: 1.0e-4}", "expected low < high, got low=0.01, high=0.0001"),
        ("{type: float, low: 0.0, high: 1.0e-2, log: true}", "log: true needs low > 0, got low=0.0"),
        ("{type: float, low: -1.0, high: 1.0e-2, log: true}", "log: true needs low > 0, got low=-1.0"),
        ("{type: int, low: 8, high: 8}", "expected low < high, got low=8, high=8"),
        ("{type: int, low: 0, high: 8, log: true}", "log: true needs low > 0, got low=0"),
    ],
)
def test_search_range_is_located(param: str, detail: str) -> None:
    message = validate_error(mutate("{type: float, low: 1.0e-4, high: 1.0e-2, log: true}", param))
    assert message.startswith("study.yaml:16:17: search_space[optimizer.lr]")
    assert message.endswith(f": {detail}")


@pytest.mark.parametrize(
    ("param", "detail"),
    [
        ("{type: float, low: 1.0e-2, high: 1.0e-2}", "expected low < high, got low=0.01, high=0.01"),
        ("{type: int, low: 0, high: 8, log: true}", "log: true needs low > 0, got low=0"),
    ],
)
def test_search_range_field_path_has_no_union_tag(param: str, detail: str) -> None:
    message = validate_error(mutate("{type: float, low: 1.0e-4, high: 1.0e-2, log: true}", param))
    assert message == f"study.yaml:16:17: search_space[optimizer.lr]: {detail}"


@pytest.mark.parametrize(
    ("param", "expected"),
    [
        pytest.param(
            "  optimizer.lr: {type: flot, low: 0.1, high: 1.0}",
            "study.yaml:16:17: search_space[optimizer.lr]: "
            "expected type 'float', 'int', 'categorical', got 'flot' (a string)",
            id="unknown-type",
        ),
        pytest.param(
            "  optimizer.lr: {low: 0.1, high: 1.0}",
            "study.yaml:16:17: search_space[optimizer.lr]: "
            "missing 'type' (expected 'float', 'int' or 'categorical')",
            id="missing-type",
        ),
        pytest.param(
            "  batch_size: {type: float, low: 1.5, high: 3.5}",
            "study.yaml:16:3: search_space.batch_size: "
            "value 1.5 does not fit training.batch_size: expected an integer, got 1.5",
            id="float-range-for-int-field",
        ),
        pytest.param(
            "  batch_size: {type: int, low: 0, high: 8}",
            "study.yaml:16:3: search_space.batch_size: "
            "value 0 does not fit training.batch_size: expected a positive integer, got 0",
            id="int-range-below-field-minimum",
        ),
        pytest.param(
            "  optimizer.name: {type: categorical, choices: [adamw, sgdd]}",
            "study.yaml:16:3: search_space[optimizer.name]: value 'sgdd' does not fit "
            "training.optimizer.name: expected sgd, momentum, nesterov, adam, adamw, a torch.optim "
            "class (RMSprop, NAdam...) or package.module:Class, got 'sgdd'; did you mean 'sgd'?",
            id="categorical-choice-for-literal-field",
        ),
        pytest.param(
            "  workload.dropout: {type: float, low: 0.5, high: 1.5}",
            "study.yaml:16:3: search_space[workload.dropout]: "
            "value 1.5 does not fit workload.options.dropout: "
            "expected a number < 1.0, got 1.5",
            id="range-beyond-builtin-option",
        ),
        pytest.param(
            "  bad-key: {type: categorical, choices: [1, 2]}",
            "study.yaml:16:3: search_space: "
            "search-space key 'bad-key' is not a dotted name like optimizer.lr",
            id="key-not-dotted-name",
        ),
        pytest.param(
            "  optimizer.name: {type: categorical, choices: []}",
            "study.yaml:16:48: search_space[optimizer.name].choices: expected at least 1 item(s), got a list",
            id="empty-choices",
        ),
    ],
)
def test_search_value_does_not_fit(param: str, expected: str) -> None:
    text = mutate("  optimizer.lr: {type: float, low: 1.0e-4, high: 1.0e-2, log: true}", param)
    assert validate_error(text) == expected


@pytest.mark.parametrize("key", ["seed", "search_seed", "seed_index"])
def test_a_seed_is_not_a_hyperparameter_to_search(key: str) -> None:
    line = validate_error(mutate("  optimizer.lr:", f"  {key}:"))
    assert line.startswith("study.yaml:16:3: search_space.")
    assert "is not a hyperparameter to search: a seed that scores better is luck" in line


@pytest.mark.parametrize(
    ("line", "value"),
    [("lr: 1e-3", "0.001"), ("lr: 3E-4", "0.0003"), ("lr: 1e+0", "1"), ("lr: 2.e-3", "0.002")],
)
def test_exponent_without_dot_is_a_number(line: str, value: str) -> None:
    write_study(Path.cwd(), mutate("lr: 3.0e-3", line).replace("low: 1.0e-4", "low: 1e-5"))
    result = invoke("validate", "study.yaml")
    assert result.exit_code == 0, result.output
    assert f"lr {value}," in plain(result.stdout)
    assert "float in [1e-05, 0.01]" in plain(result.stdout)
