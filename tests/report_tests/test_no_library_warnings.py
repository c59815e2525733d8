"""No library warning reaches the user's terminal: a constant input (every round-2 value equal,
every round-1 value equal) is a case the report names in its own words, and scipy is never
asked for a correlation it would warn about (``ConstantInputWarning``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.orchestrate_tests.conftest import run_tuner
from tests.report_tests.builders import Built, add_trial, study
from tuner.playbook.plan import load_plan

LR = "optimizer.lr"


def _constant_rounds(tmp_path: Path) -> Built:
    """Round 1: five points with the same value; round 2: its three points, again all equal."""
    built = study(tmp_path, round2={"top_k": 3})
    first = built.start("round-1")
    for slot in range(5):
        add_trial(first, slot, 0.25, {LR: 0.05 * (slot + 1)}, best_step=20)
    second = built.start("round-2")
    plan = load_plan(second.user_attrs)
    assert plan is not None
    for slot, planned in enumerate(plan.slots):
        add_trial(second, slot, 0.125, planned.values, best_step=20, **planned.attrs)
    return built


@pytest.mark.parametrize(
    "command",
    [
        ("report",),
        ("report", "--json"),
        ("list",),
        ("validate",),
        ("estimate", "--json"),
    ],
)
def test_constant_values_leave_stderr_empty(tmp_path: Path, command: tuple[str, ...]) -> None:
    built = _constant_rounds(tmp_path)
    target = [] if command[0] == "list" else [str(built.path)]
    done = run_tuner(command[0], *target, *command[1:], "--output-dir", str(built.output_dir))
    assert done.returncode == 0, done.stderr
    if command[0] == "estimate":  # its probe says what it times, in its own words, and nothing else
        assert "Warning" not in done.stderr and len(done.stderr.splitlines()) == 1, done.stderr
    else:
        assert done.stderr == ""
    if command == ("report",):
        assert "all equal" in done.stdout
