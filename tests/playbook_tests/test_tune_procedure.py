"""The playbook's ``tune`` called directly, as ``tuner tune`` calls it: a typed request in, typed
messages out, and nothing asked of the caller's report reader or phase runner that the request
does not need (``tests/cli_tests/test_tune*.py`` run it end to end through the command)."""

from __future__ import annotations

import contextlib
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


class _Interrupted(Exception):
    """What the phase runner below raises: a Ctrl-C as the next phase starts."""


class _StopAtTheNextPhase:
    """A phase runner stopped by Ctrl-C before its phase trains (what ``tuner tune`` sees then:
    the phase's exit code, raised); it remembers which phase that was."""

    def __init__(self) -> None:
        self.asked: list[str] = []

    def run(self, phase: Any) -> None:
        self.asked.append(phase.phase)
        raise _Interrupted


def test_suggestions_not_applied_are_listed_on_their_line_with_why(tmp_path: Path) -> None:
    """Round 1 (built: 12 trials of the full 200 steps, every best step at 10, better and better
    towards the LR range's top, 1.0) done in an earlier run: its report suggests a shorter length
    and a higher LR range, which a full-length round 1 does not search again. The line says which
    changes, compactly, and why they are not applied."""
    from tests.cli_tests._tune_support import store_tune_state
    from tests.report_tests.builders import add_trial, study
    from tuner.playbook import start_round
    from tuner.playbook.decision_log import Stage
    from tuner.playbook.tune.messages import Decided
    from tuner.playbook.tune_plan import FULL_LENGTH_ROUND1
    from tuner.report.tune_advice import ReportAdvisor
    from tuner.spec import load_study

    built = study(tmp_path, round1={"steps": 20, "trials": 12}, round2={"top_k": 1}, max_train_steps=200)
    full_length = list(FULL_LENGTH_ROUND1)  # tune's round 1: the file's round 1 at max_train_steps
    phase = start_round(load_study(built.path, full_length), "round-1", built.output_dir).study
    for slot in range(12):
        add_trial(phase, slot, 0.40 - 0.03 * slot, {"optimizer.lr": 0.01 * 100 ** (slot / 11)}, best_step=10)
    first = Stage("toy", "round-1", str(built.path), full_length, 12, 2400, done=True, steps_per_trial=200)
    store_tune_state(built, first, "4000", 4000)
    said: list[TuneMessage] = []
    runner = _StopAtTheNextPhase()
    request = TuneRequest(built.path, parse_budget("4000"), output_dir=built.output_dir)
    with contextlib.suppress(_Interrupted):
        tune(request, advisor=ReportAdvisor(), runner=runner, emit=said.append)
    assert runner.asked == ["round-2"]  # the decision came before the next phase
    [decided] = [
        m.decision for m in said if isinstance(m, Decided) and m.decision.kind.startswith("suggestions")
    ]
    assert decided.kind == "suggestions_not_applied"
    why = "round 1 trained at full length: --short-round1 searches again on them"
    assert decided.line == (
        "round 1's report suggests max_train_steps 200 -> 20; "
        f"optimizer.lr range 0.01..1 -> 0.1..10: not applied ({why}); the later rounds next"
    )
    assert decided.numbers["suggested"] == [
        "max_train_steps 200 -> 20",
        "optimizer.lr range 0.01..1 -> 0.1..10",
    ]


def test_each_suggested_change_is_a_few_characters_a_ranges_two_ends_as_one(tmp_path: Path) -> None:
    """An end the report leaves is the study file's; small and large numbers as powers of ten."""
    from tuner.playbook.tune.suggestions import compact_changes
    from tuner.report.findings import Suggestion
    from tuner.spec import load_study

    space = {
        "optimizer.lr": {"type": "float", "low": 1e-4, "high": 3e-2, "log": True},
        "workload.act": {"type": "categorical", "choices": ["relu", "tanh"]},
    }
    loaded = load_study(toy_study(tmp_path, search_space=space))
    suggested = [
        Suggestion(("search_space", "optimizer.lr", "high"), 3e-2, 0.1, "at its edge"),
        Suggestion(("training", "eval_every"), 10, 5, "too coarse"),
        Suggestion(
            ("search_space", "workload.act", "choices"), ["relu", "tanh"], None, "never won", drop="tanh"
        ),
        Suggestion(("search_space", "optimizer.lr", "low"), 1e-4, 3e-4, "never won"),
    ]
    assert compact_changes(suggested, loaded) == [
        "optimizer.lr range 1e-4..0.03 -> 3e-4..0.1",
        "eval_every 10 -> 5",
        "workload.act drop 'tanh'",
    ]
    only_high = compact_changes(suggested[:1], loaded)
    assert only_high == ["optimizer.lr range 1e-4..0.03 -> 1e-4..0.1"]  # the low end is the file's
