"""The playbook's ``tune`` called directly, as ``tuner tune`` calls it: a typed request in, typed
messages out, and nothing asked of the caller's report reader or phase runner that the request
does not need (``tests/cli_tests/test_tune*.py`` run it end to end through the command)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, NoReturn

from tests.orchestrate_tests.conftest import toy_study
from tuner.playbook.budget import parse_budget
from tuner.playbook.tune import TuneRequest, tune
from tuner.playbook.tune.messages import Projected, TuneMessage


class _Untouchable:
    """An advisor and a phase runner that fail the test if ``tune`` asks anything of them."""

    def __getattr__(self, name: str) -> NoReturn:
        raise AssertionError(f"a dry run asked its caller for {name}")


def test_a_dry_run_says_its_plan_as_one_message_and_asks_its_caller_nothing(tmp_path: Path) -> None:
    path = toy_study(tmp_path, round1={"steps": 10, "trials": 4})
    said: list[TuneMessage] = []
    request = TuneRequest(path, parse_budget("400"), output_dir=tmp_path / "runs", dry_run=True)
    untouchable: Any = _Untouchable()
    tune(request, advisor=untouchable, runner=untouchable, emit=said.append)
    [projected] = said
    assert isinstance(projected, Projected)
    assert (projected.study, projected.budget_steps, projected.plan.total) == ("toy", 400, 400)
    phases = [p.stage for p in projected.plan.phases]
    assert phases == ["toy/round-1", "toy/round-2", "toy/round-3"]
    assert not (tmp_path / "runs").exists()  # nothing created
