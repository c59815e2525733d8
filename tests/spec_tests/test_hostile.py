"""Hostile or broken study files: one line, exit 2, quickly and in bounded memory.

No timing asserts: a file that made the loader expand billions of nodes would run into pytest's
timeout (and memory) instead of passing.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.spec_tests._support import BASE_YAML, invoke, single_error, write_study

BILLION_LAUGHS = """\
name: laughs
workload: {name: digits-mlp}
a: &a ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]
b: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a]
c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b]
d: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c]
e: &e [*d, *d, *d, *d, *d, *d, *d, *d, *d]
f: &f [*e, *e, *e, *e, *e, *e, *e, *e, *e]
g: &g [*f, *f, *f, *f, *f, *f, *f, *f, *f]
h: &h [*g, *g, *g, *g, *g, *g, *g, *g, *g]
i: &i [*h, *h, *h, *h, *h, *h, *h, *h, *h]
"""


def _validate(path: Path, *args: str) -> str:
    return single_error(invoke("validate", str(path), *args))


def test_billion_laughs_is_refused_at_the_alias(tmp_path: Path) -> None:
    message = _validate(write_study(tmp_path, BILLION_LAUGHS))
    assert "aliases expand" in message
    assert message.startswith(f"{tmp_path / 'study.yaml'}:")
    line = int(message.split(":")[1])
    assert 4 <= line <= 11  # at an alias, not "somewhere"


def test_billion_laughs_in_a_search_space_choice(tmp_path: Path) -> None:
    text = BASE_YAML + "  x: &x {type: categorical, choices: " + BILLION_LAUGHS.split("i: &i ")[1]
    hostile = BILLION_LAUGHS.replace("name: laughs\nworkload: {name: digits-mlp}\n", "") + text
    message = _validate(write_study(tmp_path, hostile.replace("name: spec-test", "name: t")))
    assert "aliases expand" in message


def test_recursive_alias_is_refused(tmp_path: Path) -> None:
    message = _validate(write_study(tmp_path, BASE_YAML + "description: &a [1, *a]\n"))
    assert "recursive alias" in message


def test_anchors_chained_deeper_than_the_limit_are_refused_at_the_alias(tmp_path: Path) -> None:
    # each anchor nests the previous one 60 levels deeper: no line is deep, the expansion is
    # (it ended in "internal error (RecursionError)" when only the written nesting was counted)
    levels = 60
    lines = [f"a0: &a0 {'[' * levels}1{']' * levels}"]
    lines += [f"a{i}: &a{i} {'[' * levels}*a{i - 1}{']' * levels}" for i in range(1, 20)]
    message = _validate(write_study(tmp_path, "\n".join(lines) + "\n"))
    assert "the alias *a0 nests this file more than 64 levels deep" in message
    assert message.startswith(f"{tmp_path / 'study.yaml'}:2:")


def test_modest_aliases_still_work(tmp_path: Path) -> None:
    text = BASE_YAML.replace("hidden_sizes: [32]", "hidden_sizes: &h [32]") + "  workload.hidden_sizes:\n"
    text += "    {type: categorical, choices: [*h, [64]]}\n"
    result = invoke("validate", str(write_study(tmp_path, text)))
    assert result.exit_code == 0, result.output


@pytest.mark.parametrize("depth", [100, 5000])
def test_deep_flow_nesting(tmp_path: Path, depth: int) -> None:
    text = BASE_YAML + "description: " + "[" * depth + "]" * depth + "\n"
    message = _validate(write_study(tmp_path, text))
    assert "nested more than" in message
    assert ":" in message.split(": ")[0]  # file:line:col


def test_deep_block_nesting(tmp_path: Path) -> None:
    lines = "\n".join(f" {' ' * k}k{k}:" for k in range(1000))
    message = _validate(write_study(tmp_path, BASE_YAML + "description:\n" + lines))
    assert "nested more than" in message


def test_deep_block_sequence_nesting(tmp_path: Path) -> None:
    text = BASE_YAML + "description:\n  " + "- " * 2000 + "x\n"  # compact nested block sequences
    message = _validate(write_study(tmp_path, text))
    assert "nested more than" in message


def test_many_values_are_refused(tmp_path: Path) -> None:
    text = BASE_YAML + "description: [" + ", ".join(["1"] * 30000) + "]\n"
    message = _validate(write_study(tmp_path, text))
    assert "more than" in message and "values" in message


def test_huge_file_is_refused_before_reading(tmp_path: Path) -> None:
    path = tmp_path / "huge.yaml"
    with path.open("wb") as file:
        file.write(BASE_YAML.encode())
        file.truncate(3 * 1024**3)  # 3 GiB, sparse: reading it would take seconds and gigabytes
    message = _validate(path)
    assert "larger than 1024 KiB" in message


def test_endless_device_is_refused(tmp_path: Path) -> None:
    if not Path("/dev/zero").exists():
        pytest.skip("no /dev/zero")
    assert "larger than" in _validate(Path("/dev/zero"))


@pytest.mark.parametrize(
    "data",
    [b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR", b"name: caf\xe9\n", os.urandom(0) + b"\xff\xfe\x00\x00"],
    ids=["png", "latin-1", "bom32"],
)
def test_binary_or_non_utf8_file(tmp_path: Path, data: bytes) -> None:
    path = tmp_path / "study.yaml"
    path.write_bytes(data)
    message = _validate(path)
    assert "UTF-8" in message or "not a text study file" in message


def test_nul_character_in_utf8_text_is_located(tmp_path: Path) -> None:
    message = _validate(write_study(tmp_path, BASE_YAML + "description: a\x00b\n"))
    assert "U+0000" in message
    assert message.startswith(f"{tmp_path / 'study.yaml'}:17:15: ")


def test_folder(tmp_path: Path) -> None:
    assert "is a folder" in _validate(tmp_path)


def test_missing_file(tmp_path: Path) -> None:
    assert "no such study file" in _validate(tmp_path / "nope.yaml")


def test_unreadable_path(tmp_path: Path) -> None:
    # Root reads any file regardless of its mode; a path through a file fails for everyone.
    study = write_study(tmp_path)
    assert "cannot read" in _validate(study / "inside.yaml")


@pytest.mark.parametrize("text", ["", "\n\n", "# only a comment\n"])
def test_empty_file(tmp_path: Path, text: str) -> None:
    assert "the file is empty" in _validate(write_study(tmp_path, text))


SET_LAUGHS = (
    "[&a [1,1,1,1,1,1,1,1,1,1], "
    + ", ".join(f"&{b} [{', '.join([f'*{a}'] * 10)}]" for a, b in zip("abc", "bcd", strict=True))
    + ", ["
    + ", ".join(["*d"] * 10)
    + "]]"
)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("[" * 5000 + "]" * 5000, "nested more than"),
        ("&a [1,1,1,1,1,1,1,1,1,1]", None),
        (
            SET_LAUGHS,
            "aliases expand",
        ),
        ("{a: 1, a: 2}", "duplicate key"),
    ],
    ids=["deep", "harmless-anchor", "laughs", "duplicate"],
)
def test_hostile_set_values(tmp_path: Path, value: str, expected: str | None) -> None:
    result = invoke("validate", str(write_study(tmp_path)), "--set", f"description={value}")
    if expected is None:
        # a list is no description: refused for its type, not for its shape
        assert "expected a string" in single_error(result)
        return
    message = single_error(result)
    assert message.startswith("--set description=")
    assert expected in message
