"""Every bad study file through `tuner validate`: exit 2, one located line, no traceback.

The message format is ``<file>:<line>:<col>: <field.path>: <what was expected, what was found>``;
positions refer to ``BASE_YAML`` (see ``_support.py``) after the edit each case makes.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests._processes import PATIENCE_S
from tests.spec_tests._support import BASE_YAML, invoke, mutate, plain, single_error, write_study

BUILTIN_LIST = "char-lm, digits-cnn, digits-mlp, imbalanced, regression"
TOP_LEVEL_FIELDS = (
    "name, description, seed, search_seed, workload, objective, training, search_space, sweep_lr, rounds, "
    "storage"
)


def validate_error(text: str, *args: str) -> str:
    write_study(Path.cwd(), text)
    return single_error(invoke("validate", "study.yaml", *args))


def test_base_study_is_valid() -> None:
    """The starting point of every case below must itself pass, or the cases prove nothing."""
    write_study(Path.cwd())
    result = invoke("validate", "study.yaml")
    assert result.exit_code == 0, result.output
    assert plain(result.stdout).startswith("study.yaml: valid\n")
    assert plain(result.stderr) == ""


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param(
            mutate("seed: 0", "sede: 0"),
            "study.yaml:2:1: sede: unknown field 'sede' (did you mean 'seed'?)",
            id="unknown-top-level-did-you-mean",
        ),
        pytest.param(
            BASE_YAML + "banana: 1\n",
            f"study.yaml:17:1: banana: unknown field 'banana' (expected one of: {TOP_LEVEL_FIELDS})",
            id="unknown-top-level-lists-fields",
        ),
        pytest.param(
            mutate("eval_every: 10", "eval_evry: 10"),
            "study.yaml:11:3: training.eval_evry: unknown field 'eval_evry' (did you mean 'eval_every'?)",
            id="unknown-nested",
        ),
        pytest.param(
            mutate("lr: 3.0e-3", "lrr: 3.0e-3"),
            "study.yaml:14:5: training.optimizer.lrr: unknown field 'lrr' (did you mean 'lr'?)",
            id="unknown-nested-twice",
        ),
        pytest.param(
            mutate("dropout: 0.0", "dropuot: 0.0"),
            "study.yaml:7:5: workload.options.dropuot: unknown field 'dropuot' (did you mean 'dropout'?)",
            id="unknown-builtin-workload-option",
        ),
        pytest.param(
            mutate("log: true}", "logg: true}"),
            "study.yaml:16:58: search_space[optimizer.lr].logg: unknown field 'logg' (did you mean 'log'?)",
            id="unknown-search-param-field",
        ),
    ],
)
def test_unknown_keys(text: str, expected: str) -> None:
    assert validate_error(text) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param(
            mutate("eval_every: 10", "eval_every: -3"),
            "study.yaml:11:15: training.eval_every: expected a positive integer, got -3",
            id="negative-int",
        ),
        pytest.param(
            mutate("eval_every: 10", "eval_every: 0"),
            "study.yaml:11:15: training.eval_every: expected a positive integer, got 0",
            id="zero-int",
        ),
        pytest.param(
            mutate("batch_size: 64", 'batch_size: "64"'),
            "study.yaml:9:15: training.batch_size: expected an integer, got '64' (a string)",
            id="string-for-int",
        ),
        pytest.param(
            mutate("batch_size: 64", "batch_size: 64.5"),
            "study.yaml:9:15: training.batch_size: expected an integer, got 64.5",
            id="float-for-int",
        ),
        pytest.param(
            mutate("lr: 3.0e-3", "lr: fast"),
            "study.yaml:14:9: training.optimizer.lr: expected a number, got 'fast' (a string)",
            id="string-for-float",
        ),
        pytest.param(
            mutate("lr: 3.0e-3", 'lr: "3.0e-3"'),
            "study.yaml:14:9: training.optimizer.lr: expected a number, got '3.0e-3' (a string)",
            id="quoted-number-not-coerced",
        ),
        pytest.param(
            mutate("seed: 0", "seed: -1"),
            "study.yaml:2:7: seed: expected a non-negative integer, got -1",
            id="negative-seed",
        ),
        pytest.param(
            mutate("  max_train_steps: 100", "  device: gpu"),
            "study.yaml:10:11: training.device: expected 'auto', 'cpu' or 'cuda', got 'gpu' (a string)",
            id="literal",
        ),
        pytest.param(
            mutate("name: adamw", "name: adamm"),
            "study.yaml:13:11: training.optimizer.name: expected sgd, momentum, nesterov, adam, "
            "adamw, a torch.optim class (RMSprop, NAdam...) or package.module:Class, got 'adamm'; "
            "did you mean 'adam'?",
            id="literal-nested",
        ),
        pytest.param(
            mutate("  eval_every: 10", "  optimizer: adamw\n  eval_every: 10").replace(
                "  optimizer:\n    name: adamw\n    lr: 3.0e-3\n", ""
            ),
            "study.yaml:11:14: training.optimizer: expected a mapping, got 'adamw' (a string)",
            id="scalar-for-section",
        ),
        pytest.param(
            mutate("dropout: 0.0", "dropout: 1.5"),
            "study.yaml:7:14: workload.options.dropout: expected a number < 1.0, got 1.5",
            id="builtin-option-out-of-range",
        ),
        pytest.param(
            mutate("name: spec-test\n", ""),
            "study.yaml:1:1: name: missing required field",
            id="missing-name",
        ),
        pytest.param(
            mutate("  max_train_steps: 100", "  schedule: [{shape: linear, steps: 5, fraction: 0.5}]"),
            "study.yaml:10:14: training.schedule[0]: give either steps or fraction, not both",
            id="schedule-segment-rule",
        ),
        pytest.param(
            mutate("  max_train_steps: 100", "  schedule: [{shape: linear}, {shape: cosine}]"),
            "study.yaml:10:13: training.schedule: "
            "at most one segment may leave out steps/fraction (it takes the rest)",
            id="schedule-list-rule",
        ),
    ],
)
def test_wrong_values(text: str, expected: str) -> None:
    assert validate_error(text) == expected


def test_first_error_in_reading_order_wins() -> None:
    text = mutate("eval_every: 10", "eval_every: -3", mutate("seed: 0", "seed: -1"))
    assert validate_error(text) == "study.yaml:2:7: seed: expected a non-negative integer, got -1"


@pytest.mark.parametrize(
    "name",
    ["../evil", "a/b", "/etc", ".hidden", "-rf", "..", "with space"],
)
def test_unsafe_study_name(name: str) -> None:
    message = validate_error(mutate("name: spec-test", f"name: {name!r}"))
    assert message == (
        "study.yaml:1:7: name: expected a name of letters, digits, '.', '_' or '-' starting with a "
        f"letter or digit (it becomes a folder name), got {name!r} (a string)"
    )


def test_a_study_name_names_its_length_limit() -> None:
    assert validate_error(mutate("name: spec-test", f"name: {'x' * 65}")) == (
        "study.yaml:1:7: name: a study name has at most 64 characters (it names the study's folder and, "
        f"with its phase, the study in the storage), got 65: {'x' * 65!r} (a string)"
    )


@pytest.mark.parametrize("text", ["", "\n\n", "# only a comment\n", "---\n"])
def test_empty_file(text: str) -> None:
    assert validate_error(text) == (
        "study.yaml:1:1: the file is empty; expected a study mapping with at least name and workload"
    )


@pytest.mark.parametrize(
    ("text", "kind"),
    [("- a\n- b\n", "a list"), ("hello\n", "a str"), ("42\n", "a int")],
)
def test_top_level_not_a_mapping(text: str, kind: str) -> None:
    assert validate_error(text) == (
        f"study.yaml:1:1: expected a mapping of study fields at the top level, got {kind}"
    )


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param(
            mutate("hidden_sizes: [32]", "hidden_sizes: [32"),
            "study.yaml:7:12: invalid YAML: while parsing a flow sequence expected ',' or ']', but got ':'",
            id="unclosed-bracket",
        ),
        pytest.param(
            mutate("  batch_size: 64", "\tbatch_size: 64"),
            "study.yaml:9:1: invalid YAML: "
            "while scanning for the next token found character '\\t' that cannot start any token",
            id="tab-indent",
        ),
        pytest.param(
            mutate("seed: 0", "seed: 0\n  x: 1"),
            "study.yaml:3:4: invalid YAML: mapping values are not allowed here",
            id="bad-indent",
        ),
        pytest.param(
            mutate("seed: 0", "seed: *nowhere"),
            "study.yaml:2:7: invalid YAML: found undefined alias 'nowhere'",
            id="undefined-alias",
        ),
        pytest.param(
            BASE_YAML + "---\nname: second\n",
            "study.yaml:17:1: invalid YAML: "
            "expected a single document in the stream but found another document",
            id="two-documents",
        ),
    ],
)
def test_yaml_syntax_error(text: str, expected: str) -> None:
    assert validate_error(text) == expected


@pytest.mark.parametrize(
    "tag",
    ["!!python/object/apply:os.system", "!!python/object/new:os.system", "!!python/name:os.system"],
)
def test_python_tags_are_refused_and_never_run(tag: str, tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    argument = f'["touch {marker}"]' if "name:" not in tag else "''"
    text = mutate("name: spec-test", f"name: {tag} {argument}")
    assert validate_error(text) == (
        f"study.yaml:1:7: {tag} is not allowed: study files are loaded with yaml.safe_load (plain data only)"
    )
    assert not marker.exists()


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param(
            BASE_YAML + "seed: 1\n",
            "study.yaml:17:1: seed: duplicate key 'seed' (the second one would silently win)",
            id="top-level",
        ),
        pytest.param(
            mutate("  eval_every: 10", "  batch_size: 32"),
            "study.yaml:11:3: training.batch_size: duplicate key 'batch_size' "
            "(the second one would silently win)",
            id="nested",
        ),
        pytest.param(
            mutate("log: true}", "log: true, low: 0.1}"),
            "study.yaml:16:69: search_space[optimizer.lr].low: duplicate key 'low' "
            "(the second one would silently win)",
            id="flow-mapping",
        ),
    ],
)
def test_duplicate_key(text: str, expected: str) -> None:
    assert validate_error(text) == expected


@pytest.mark.parametrize(
    ("workload", "expected"),
    [
        pytest.param(
            "digits-mpl",
            f"unknown workload 'digits-mpl': expected a built-in ({BUILTIN_LIST}) or an entry point "
            "'package.module:function' or 'path/to/file.py:function'",
            id="unknown-builtin",
        ),
        pytest.param(
            "no_such_module:build",
            "entry point 'no_such_module:build': no module named 'no_such_module'; for a file next to "
            "the study use no_such_module.py:build, or add its folder to PYTHONPATH",
            id="no-such-module",
        ),
        pytest.param(
            "json:build",
            "entry point 'json:build': module 'json' has no function 'build'",
            id="module-without-function",
        ),
        pytest.param(
            "tests_missing.py:build",
            "entry point 'tests_missing.py:build': no such file tests_missing.py",
            id="no-such-file",
        ),
        pytest.param(
            "wl.py:build",
            "entry point 'wl.py:build': file wl.py has no function 'build'",
            id="file-without-function",
        ),
    ],
)
def test_missing_workload_entry_point(workload: str, expected: str) -> None:
    Path("wl.py").write_text("def buld(ctx):\n    raise AssertionError('never imported')\n")
    message = validate_error(mutate("name: digits-mlp", f"name: {workload}"))
    assert message == f"study.yaml:4:9: workload.name: {expected}"


def test_workload_file_with_syntax_error() -> None:
    Path("broken.py").write_text("def build(ctx:\n")
    message = validate_error(mutate("name: digits-mlp", "name: broken.py:build"))
    assert message.startswith(
        "study.yaml:4:9: workload.name: entry point 'broken.py:build': file broken.py has a syntax error: "
    )


def test_missing_file() -> None:
    assert single_error(invoke("validate", "nope.yaml")) == "nope.yaml: no such study file"


def test_folder_instead_of_file() -> None:
    Path("folder.yaml").mkdir()
    message = single_error(invoke("validate", "folder.yaml"))
    assert message == "folder.yaml: is a folder, expected a study file (.yaml)"


def test_file_not_utf8() -> None:
    Path("study.yaml").write_bytes(b"name: caf\xe9\n")
    message = single_error(invoke("validate", "study.yaml"))
    assert message == "study.yaml:1: not a UTF-8 text file (byte 0xe9 at offset 9); study files are YAML text"


@pytest.mark.parametrize(
    ("text", "where"),
    [
        pytest.param(BASE_YAML + "description: 2024-13-45\n", "study.yaml:17:14: ", id="bad-date"),
        pytest.param(mutate("seed: 0", "seed: !!int abc"), "study.yaml:2:7: ", id="bad-int-tag"),
        pytest.param(mutate("  eval_every: 10", "  ? [a, b]\n  : 1"), "study.yaml:11:", id="unhashable-key"),
    ],
)
def test_yaml_value_construction_errors_are_located(text: str, where: str) -> None:
    assert validate_error(text).startswith(where)


def test_debug_shows_traceback() -> None:
    """TUNER_DEBUG=1 re-raises: Python prints the traceback and exits 1 (not the one-line exit 2)."""
    write_study(Path.cwd(), mutate("eval_every: 10", "eval_every: -3"))
    env = {**os.environ, "TUNER_DEBUG": "1", "NO_COLOR": "1"}
    proc = subprocess.run(
        [sys.executable, "-m", "tuner", "validate", "study.yaml"],
        capture_output=True,
        text=True,
        env=env,
        timeout=PATIENCE_S,  # a python start-up, on a machine maybe at load 20
        check=False,
    )
    assert proc.returncode == 1
    assert "Traceback (most recent call last)" in proc.stderr
    assert proc.stderr.rstrip().splitlines()[-1] == (
        "tuner.errors.SpecError: study.yaml:11:15: training.eval_every: expected a positive integer, got -3"
    )


def test_debug_in_process_reraises_the_spec_error() -> None:
    write_study(Path.cwd(), mutate("eval_every: 10", "eval_every: -3"))
    result = invoke("validate", "study.yaml", env={"TUNER_DEBUG": "1"})
    assert result.exit_code == 1
    assert type(result.exception).__name__ == "SpecError"
    assert str(result.exception).endswith("training.eval_every: expected a positive integer, got -3")


@pytest.mark.parametrize("value", ["", "0"])
def test_debug_off_values_keep_one_line(value: str) -> None:
    write_study(Path.cwd(), mutate("eval_every: 10", "eval_every: -3"))
    message = single_error(invoke("validate", "study.yaml", env={"TUNER_DEBUG": value}))
    assert message == "study.yaml:11:15: training.eval_every: expected a positive integer, got -3"
