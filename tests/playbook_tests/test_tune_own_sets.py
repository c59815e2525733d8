"""The ``--set`` values of what ``tune`` decided itself before round 1 (``own_settings``): every
phase of the study it started on runs them; a next study it searched runs those its applied
suggestions did not change (a suggestion made on round 1's runs wins)."""

from __future__ import annotations

from pathlib import Path

from tests.orchestrate_tests.conftest import toy_study
from tuner.playbook.budget import parse_budget
from tuner.playbook.decision_log import Decision, TuneState
from tuner.playbook.tune import TuneRequest
from tuner.playbook.tune.context import TuneContext
from tuner.playbook.tune.own_sets import own_sets
from tuner.playbook.tune.studies import base_sets
from tuner.spec import load_study

SCHEDULE = [{"shape": "linear", "fraction": 0.5, "start": 0.0, "end": 1.0}, {"shape": "cosine"}]


def _context(tmp_path: Path, *decisions: Decision) -> TuneContext:
    path = toy_study(tmp_path)
    request = TuneRequest(path, parse_budget("1000"), ["seed=3"], tmp_path / "runs")
    return TuneContext(request, load_study(path), "sqlite://", TuneState(decisions=list(decisions)))


def test_the_study_tune_started_on_runs_every_value_it_decided(tmp_path: Path) -> None:
    context = _context(
        tmp_path,
        Decision("length_raised", "toy/round-1", "max_train_steps 20 -> 160", {"value": 160}),
        Decision("schedule_scaled", "toy/round-1", "training.schedule scaled", {"value": SCHEDULE}),
        Decision("eval_every_lowered", "toy/round-1", "eval_every 20 -> 4", {"value": 4}),
    )
    assert base_sets(context) == [
        "seed=3",
        "max_train_steps=160",
        'schedule=[{"shape": "linear", "fraction": 0.5, "start": 0.0, "end": 1.0}, {"shape": "cosine"}]',
        "eval_every=4",
    ]
    study = load_study(context.home.path, base_sets(context)).spec.training
    assert (study.max_train_steps, study.eval_every, study.schedule[0].fraction) == (160, 4, 0.5)


def test_a_next_study_keeps_what_its_applied_suggestions_changed(tmp_path: Path) -> None:
    applied = Decision(
        "suggestions_applied",
        "toy/round-1",
        "round 1's report suggests training.eval_every 4 -> 2: applied in toy-2.yaml",
        {"file": "toy-2.yaml", "study": "toy-2", "paths": [["training", "eval_every"]]},
    )
    context = _context(
        tmp_path,
        Decision("length_raised", "toy/round-1", "max_train_steps 20 -> 160", {"value": 160}),
        Decision("eval_every_lowered", "toy/round-1", "eval_every 20 -> 4", {"value": 4}),
        applied,
    )
    assert own_sets(context, home=True) == ["max_train_steps=160", "eval_every=4"]
    assert own_sets(context, home=False) == ["max_train_steps=160"]  # the next file's eval_every stands
