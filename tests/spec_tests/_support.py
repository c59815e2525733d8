"""Shared helpers for the spec and CLI tests: a small valid study and a CLI runner."""

from __future__ import annotations

import re
from pathlib import Path

from typer.testing import CliRunner, Result

from tuner.cli.app import app

REPO = Path(__file__).resolve().parents[2]

# Line numbers matter: the error tests assert exact line:column positions in this text.
BASE_YAML = """\
name: spec-test
seed: 0
workload:
  name: digits-mlp
  options:
    hidden_sizes: [32]
    dropout: 0.0
training:
  batch_size: 64
  max_train_steps: 100
  eval_every: 10
  optimizer:
    name: adamw
    lr: 3.0e-3
search_space:
  optimizer.lr: {type: float, low: 1.0e-4, high: 1.0e-2, log: true}
"""

_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def mutate(old: str, new: str, text: str = BASE_YAML) -> str:
    """``text`` with the one occurrence of ``old`` replaced (fails loudly if not exactly one)."""
    assert text.count(old) == 1, f"{old!r} occurs {text.count(old)} times"
    return text.replace(old, new)


def write_study(folder: Path, text: str = BASE_YAML, name: str = "study.yaml") -> Path:
    path = folder / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def plain(text: str) -> str:
    return _ANSI.sub("", text)


def invoke(*args: str, env: dict[str, str | None] | None = None) -> Result:
    """Run ``tuner ARGS`` in-process; TUNER_DEBUG is cleared unless ``env`` sets it."""
    return CliRunner().invoke(app, list(args), env={"TUNER_DEBUG": None, "NO_COLOR": "1", **(env or {})})


def single_error(result: Result, exit_code: int = 2) -> str:
    """Assert the command failed with one non-empty stderr line and no traceback; return it."""
    output = plain(result.output)
    assert "Traceback" not in output, output
    assert result.exit_code == exit_code, f"exit {result.exit_code}, output:\n{output}"
    assert plain(result.stdout) == "", output
    lines = plain(result.stderr).splitlines()
    assert len(lines) == 1, f"expected one stderr line, got:\n{plain(result.stderr)}"
    assert lines[0].startswith("error: "), lines[0]
    message = lines[0].removeprefix("error: ")
    assert message.strip()
    return message
